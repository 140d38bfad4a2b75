"""Writes the small MLPs that `fusedlinear bench --gemm auto,mlp,cublas` compares (auto, the
fused-MLP kernel, the per-layer path and eager), each with its spec inside
(fx_chain.save_with_chain):

  policy.pt       64 -> 256 -> 256 -> 256 -> 8, tanh, tanh, relu (a control policy)
  field_<W>.pt    32 -> W -> W -> W -> W -> 16, relu (a neural field), W = 64, 128, 256

Usage: python3 .ci/small_mlps.py OUTPUT_FOLDER   (seeded: the same files every run)
       python3 .ci/small_mlps.py --summary BENCH.json ...   (each fused row's forward, TFLOP/s and
                                                        rows a second)
       python3 .ci/small_mlps.py --pytorch OPS_LIBRARY OUT.json [CASE ...]
           the same modules in one process on the GPU, each call timed alike (CUDA events around
           a plain call that starts on an idle GPU, medians): PyTorch eager, torch.compile in
           "max-autotune-no-cudagraphs" and "reduce-overhead" modes, and the whole-model op
           (torch.ops.fusedlinear.model, gemm auto, from the library at OPS_LIBRARY); each with its
           error against the float64 module, and a dense GEMM of the same dtype for the rate.
           CASE: policy-1, policy-64, policy-1024, field_64, field_128, field_256 (default: all);
           each row is printed as it is measured.
"""
import json
import os
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "weights"))
from fx_chain import save_with_chain  # noqa: E402
from mlp_models import median_ms  # noqa: E402  (.ci/, the script's own folder)


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


# (model, dtype, rows) of each case --pytorch times.
CASES = {
    "policy-1": ("policy", torch.float32, 1),
    "policy-64": ("policy", torch.float32, 64),
    "policy-1024": ("policy", torch.float32, 1024),
    "field_64": ("field_64", torch.float16, 1 << 21),
    "field_128": ("field_128", torch.float16, 1 << 21),
    "field_256": ("field_256", torch.float16, 1 << 21),
}
COMPILE_MODES = ("max-autotune-no-cudagraphs", "reduce-overhead")


def median_us(fn, iters):
    """mlp_models.median_ms, in µs."""
    return median_ms(fn, iters) * 1000.0


def dense_gemm_tflops(dtype, iters=20):
    """The rate of a square dense GEMM of `dtype` (8192), for the percentage the fields reach."""
    a = torch.rand(8192, 8192, dtype=dtype, device="cuda")
    b = torch.rand(8192, 8192, dtype=dtype, device="cuda")
    us = median_us(lambda: a @ b, iters)
    return 2.0 * 8192 ** 3 / us / 1e6


def pytorch_side_by_side(library, out_path, names):
    """The --pytorch mode (the module's docstring)."""
    if not torch.cuda.is_available() or not hasattr(torch, "compile"):
        sys.exit("small_mlps.py --pytorch: needs a CUDA GPU and torch 2 (torch.compile); this is "
                 "torch %s%s" % (torch.__version__, "" if torch.cuda.is_available() else
                                 " without a GPU"))
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit("small_mlps.py --pytorch: no case %s; the cases: %s"
                 % (", ".join(unknown), ", ".join(CASES)))
    torch.ops.load_library(library)
    import fusedlinear  # noqa: E402  (weights/ on sys.path: the exporter and ModelOp)
    from torch._dynamo.utils import counters
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    modules = {"policy": policy()}
    for width in (64, 128, 256):
        modules["field_%d" % width] = field(width)
    report = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "results": []}
    dense = {}
    for name in names:
        model_name, dtype, rows = CASES[name]
        module = modules[model_name]
        torch.manual_seed(1)
        x64 = torch.rand(rows, module[0].in_features, dtype=torch.float64, device="cuda") * 2 - 1
        with torch.no_grad():
            reference = module.to("cuda", torch.float64)(x64)
            model = module.to("cuda", dtype)
            x = x64.to(dtype)
            iters = 20 if rows > 4096 else 200
            flops = 2.0 * rows * sum(m.in_features * m.out_features for m in model
                                     if isinstance(m, nn.Linear))
            row = {"case": name, "dtype": str(dtype).split(".")[-1], "rows": rows,
                   "flops": flops, "us": {}, "error_vs_float64": {}}

            def measure(label, fn):
                row["us"][label] = median_us(fn, iters)
                row["error_vs_float64"][label] = (fn().double() - reference).abs().max().item()

            measure("eager", lambda: model(x))
            for mode in COMPILE_MODES:
                torch._dynamo.reset()
                counters.clear()
                compiled = torch.compile(model, mode=mode, dynamic=False)
                measure("compile " + mode, lambda: compiled(x))
                # Whether reduce-overhead's CUDA graphs ran: Inductor counts each graph it
                # leaves without one (its log says why).
                row["cudagraph_skips " + mode] = int(counters["inductor"]["cudagraph_skips"])
            torch._dynamo.reset()
            weights, biases, params, spec = fusedlinear.op_arguments(
                model.state_dict(), str(fusedlinear.trace_model(model)))
            op = torch.ops.fusedlinear.model
            measure("fusedlinear op",
                    lambda: op(x, weights, biases, params, spec, "ieee", "auto"))
            if dtype != torch.float32:
                if dtype not in dense:
                    dense[dtype] = dense_gemm_tflops(dtype)
                row["dense_gemm_tflops"] = dense[dtype]
            module.to("cpu", torch.float32)
        report["results"].append(row)
        print(json.dumps(row), flush=True)
        with open(out_path, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--pytorch":
        pytorch_side_by_side(sys.argv[2], sys.argv[3], sys.argv[4:] or list(CASES))
    elif len(sys.argv) >= 3 and sys.argv[1] == "--summary":
        summary(sys.argv[2:])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit(__doc__)
