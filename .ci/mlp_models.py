#!/usr/bin/env python3
"""The MLP shapes of docs/PERFORMANCE.md from Python: writes each model's file with its spec
(weights/fx_chain.py save_with_chain) for `fusedlinear compare --weights`, and times PyTorch's
own forward of the same module (eager, torch.compile) in the same session, with its error
against float64.

usage: mlp_models.py OUT_DIR [--iters N]

Models (seed 0, nn.Linear's initialisation):
  mlp     4096 -> 4096 (GELU) -> 4096 (GELU) -> 4096
  swiglu  LLaMA's feed-forward w2(silu(w1(x)) * w3(x)), 4096 -> 11008 -> 4096
Rows: the mlp at 1024 and at 1, the swiglu at 1024; float32 (TF32 off), and bfloat16 for the
swiglu, whose three GEMMs are also timed alone (torch.matmul in bfloat16)."""
import argparse
import json
import os
import statistics
import sys

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "weights"))
import fx_chain  # noqa: E402


class Mlp(nn.Module):
    def __init__(self, width=4096):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = (nn.Linear(width, width) for _ in range(3))

    def forward(self, x):
        return self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(x)))))


class SwiGlu(nn.Module):
    def __init__(self, width=4096, hidden=11008):
        super().__init__()
        self.w1 = nn.Linear(width, hidden, bias=False)
        self.w3 = nn.Linear(width, hidden, bias=False)
        self.w2 = nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def median_ms(fn, iters, warmup=5):
    """Median of `iters` calls of fn, each between CUDA events, each after a sync: the call as a
    program that waits for each result sees it."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    models = {}
    for name, cls in (("mlp", Mlp), ("swiglu", SwiGlu)):
        torch.manual_seed(0)
        models[name] = cls().eval()
        linear, spec = fx_chain.save_with_chain(
            models[name], os.path.join(args.out_dir, name + ".pt"), overwrite=True)
        print("%s: spec %r" % (name, spec))

    rows_of = (("mlp", torch.float32, 1024), ("mlp", torch.float32, 1),
               ("swiglu", torch.float32, 1024), ("swiglu", torch.bfloat16, 1024))
    results = []
    with torch.no_grad():
        for name, dtype, rows in rows_of:
            torch.manual_seed(1)
            x64 = torch.rand(rows, 4096, dtype=torch.float64, device="cuda")
            reference = models[name].to("cuda", torch.float64)(x64)
            model = models[name].to("cuda", dtype)
            x = x64.to(dtype)
            row = {"model": name, "dtype": str(dtype).split(".")[-1], "rows": rows,
                   "eager_ms": median_ms(lambda: model(x), args.iters),
                   "eager_err_vs_fp64": (model(x).double() - reference).abs().max().item()}
            compiled = torch.compile(model)
            row["compile_ms"] = median_ms(lambda: compiled(x), args.iters)
            if name == "swiglu":
                w1, w3, w2 = model.w1.weight, model.w3.weight, model.w2.weight
                h = torch.rand(rows, w2.shape[1], dtype=dtype, device="cuda")
                row["gemms_alone_ms"] = sum(
                    median_ms(fn, args.iters)
                    for fn in (lambda: x @ w1.t(), lambda: x @ w3.t(), lambda: h @ w2.t()))
            weights = [p for p in model.parameters() if p.dim() == 2]
            row["weight_read_ms"] = median_ms(
                lambda: [w.clone() for w in weights], args.iters) / 2
            results.append(row)
            print(json.dumps(row))
            models[name].to("cpu", torch.float32)
    with open(os.path.join(args.out_dir, "pytorch.json"), "w") as file:
        json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
                   "results": results}, file, indent=2)


if __name__ == "__main__":
    main()
