"""Writes the small MLPs that `fusedlinear bench --gemm auto,mlp,cublas` compares (auto, the
fused-MLP kernel, the per-layer path and eager), each with its spec inside
(fx_chain.save_with_chain):

  policy.pt       64 -> 256 -> 256 -> 256 -> 8, tanh, tanh, relu (a control policy)
  field_<W>.pt    32 -> W -> W -> W -> W -> 16, relu (a neural field), W = 64, 128, 256

Usage: python3 .ci/small_mlps.py OUTPUT_FOLDER   (seeded: the same files every run)
       python3 .ci/small_mlps.py --summary BENCH.json ...   (each fused row's forward, TFLOP/s and
                                                        rows a second)
"""
import json
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "weights"))
from fx_chain import save_with_chain  # noqa: E402


def policy():
    return nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
                         nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 8))


def field(width):
    layers = [nn.Linear(32, width), nn.ReLU()]
    for _ in range(3):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, 16))
    return nn.Sequential(*layers)


def main(folder):
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    models = {"policy.pt": policy()}
    for width in (64, 128, 256):
        models["field_%d.pt" % width] = field(width)
    for name, model in models.items():
        _, spec = save_with_chain(model, os.path.join(folder, name), overwrite=True)
        print(os.path.join(folder, name), spec)


def summary(paths):
    """Each bench JSON's fused rows: file, dtype, batch, kernel, what ran, the forward's median
    (of the CUDA-graph replays where bench timed them), its TFLOP/s and rows a second."""
    for path in paths:
        with open(path) as f:
            results = json.load(f)["results"]
        for r in results:
            for fused in r["fused"]:
                timings = fused["timings"]
                forward_us = timings["forward"]["median_us"]
                flops = (fused["derived"]["forward_tflops"] or 0) * forward_us * 1e6
                us = timings.get("graph_replay", timings["forward"])["median_us"]
                print("%-16s %-8s batch %8d  %-6s %-36s %10.2f us %8.2f TFLOP/s %10.4g rows/s" % (
                    os.path.basename(path), r["dtype"], r["batch"], fused["gemm_kernel"],
                    fused["gemm_ran"][:36], us, flops / us / 1e6, r["batch"] / us * 1e6))


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--summary":
        summary(sys.argv[2:])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit(__doc__)
