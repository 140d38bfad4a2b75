#!/usr/bin/env python3
"""Times the ways the fused forward could run its GEMM, side by side in one run (CUDA events,
variants in turns, rotating inputs, medians), and their error against float64.

  python3 .ci/gemm-variants.py [--rows 1024] [--features 8192] [--iters 50] [--dtype float32]

Variants: F.linear with the bias (eager's addmm), x @ W.t() (the fused forward's bias-free
GEMM), x @ Wt with the weight stored transposed, each through cuBLAS and through cuBLASLt
(torch.backends.cuda.preferred_blas_library).
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--rows", type=int, default=1024)
p.add_argument("--features", type=int, default=8192)
p.add_argument("--iters", type=int, default=50)
p.add_argument("--dtype", default="float32")
args = p.parse_args()
dtype = getattr(torch, args.dtype)
n = args.features
torch.manual_seed(0)
lin = torch.nn.Linear(n, n).cuda().to(dtype)
w, b = lin.weight.detach(), lin.bias.detach()
wt = w.t().contiguous()
n_inputs = max(2, (4 * 60 << 20) // (args.rows * n * w.element_size()) + 1)
xs = [torch.rand(args.rows, n, device="cuda", dtype=dtype) for _ in range(n_inputs)]

variants = {
    "linear (addmm, bias)": lambda x: F.linear(x, w, b),
    "x @ W.t() (no bias)": lambda x: x @ w.t(),
    "x @ Wt (stored transposed)": lambda x: x @ wt,
}
backends = ["cublas", "cublaslt"]
times = {(k, be): [] for k in variants for be in backends}
for i in range(5 + args.iters):
    x = xs[i % n_inputs]
    for be in backends:
        torch.backends.cuda.preferred_blas_library(be)
        for k, f in variants.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            f(x)
            e.record()
            if i >= 5:
                times[(k, be)].append((s, e))
torch.cuda.synchronize()

x = xs[0]
ref = x.double() @ w.double().t()
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {args.dtype} "
      f"[{args.rows}, {n}] x [{n}, {n}]; median (p10-p90) of {args.iters}, variants in turns")
print(f"{'variant':32} {'backend':9} {'us':>8} {'p10':>8} {'p90':>8} {'err vs f64':>11}")
for (k, be), evs in times.items():
    us = sorted(1000 * s.elapsed_time(e) for s, e in evs)
    torch.backends.cuda.preferred_blas_library(be)
    out = variants[k](x).double()
    if k.startswith("linear"):
        out = out - b.double()  # compare the product alone
    err = (out - ref).abs().max().item()
    print(f"{k:32} {be:9} {statistics.median(us):8.1f} {us[len(us) // 10]:8.1f} "
          f"{us[len(us) * 9 // 10]:8.1f} {err:11.2e}")
