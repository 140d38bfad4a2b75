#!/usr/bin/env python3
"""Where the error of a float16 mish_mish forward comes from, step by step, against float64.

  python3 .ci/half-error-breakdown.py [--rows 1024] [--features 8192] [--dtype float16]

Same workload as `fusedlinear compare --model mish_mish --dtype float16` (torch.rand input,
nn.Linear's initialisation), on the GPU. Prints the max abs error against float64 of:
the GEMM product alone, the product with the bias added inside the GEMM (eager's addmm), eager
(addmm, then mish, mish, each rounded to float16), and the fused path emulated in PyTorch (the
bias-free product rounded to float16, then bias and both mish in float32, rounded once).
"""
import argparse

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--rows", type=int, default=1024)
p.add_argument("--features", type=int, default=8192)
p.add_argument("--dtype", default="float16")
args = p.parse_args()
dtype = getattr(torch, args.dtype)
torch.manual_seed(0)
n = args.features
lin = torch.nn.Linear(n, n)
x = torch.rand(args.rows, n)
w, b, x = lin.weight.detach().cuda().to(dtype), lin.bias.detach().cuda().to(dtype), x.cuda().to(dtype)
w64, b64, x64 = w.double(), b.double(), x.double()

prod64 = x64 @ w64.t()
lin64 = prod64 + b64
out64 = F.mish(F.mish(lin64))

def err(t, ref):
    d = (t.double() - ref).abs()
    i = int(d.argmax())
    return f"{d.max().item():.2e} (at reference value {ref.flatten()[i].item():+.4f})"

prod = x @ w.t()
addmm = F.linear(x, w, b)
eager = F.mish(F.mish(addmm))
fused = F.mish(F.mish(prod.float() + b.float())).to(dtype)
fused_from_addmm = F.mish(F.mish(addmm.float())).to(dtype)
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype} "
      f"[{args.rows}, {n}] -> {n}; max abs error against float64:")
print(f"  |y| max {lin64.abs().max().item():.3f}, |out| max {out64.abs().max().item():.3f}")
print(f"  GEMM product x @ W^T (no bias)           {err(prod, prod64)}")
print(f"  addmm (bias inside the GEMM)             {err(addmm, lin64)}")
print(f"  eager: addmm, mish, mish                 {err(eager, out64)}")
print(f"  fused, emulated: round(x@W^T) + b, chain {err(fused, out64)}")
print(f"  chain in float32 on addmm's output       {err(fused_from_addmm, out64)}")
