#!/usr/bin/env python3
"""Each --precision mode's GEMM error against float64, as a fraction of sum_k |x||w|.

  python3 .ci/precision-bounds.py LIBRARY [--device cpu|cuda] [--rows 32] [--in 2048] [--out 1024]

LIBRARY is libfusedlinear_ops.so. On two inputs: `torch.rand` x and nn.Linear's weights (what
`compare` runs), and wide-range x (torch.rand scaled by logspace(-6, 3) along K, the scales
permuted) with the same weights. Each mode's ops (cuBLAS's products on CUDA), and on a GPU of
compute capability 9.0 bf16x3 and bf16x6 on the Hopper GEMM too (gemm_epilogue with the chain
mul(1), which leaves the sums as they are). For each mode: the largest |error| against float64, the largest
|error| / sum_k |x_k w_k| over the outputs, and the bound docs/USAGE.md states for it
(ieee: K 2^-24; bf16x3: 3 2^-16 + K 2^-24; bf16x6: 3 2^-25 + K 2^-24; tf32: 2 2^-11 + K 2^-24; bf16: 2 2^-8 + K 2^-24), and
whether allclose(1e-4, 1e-4) against PyTorch's float32 product holds.
"""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("library")
parser.add_argument("--device", default="cpu")
parser.add_argument("--rows", type=int, default=32)
parser.add_argument("--in", dest="in_features", type=int, default=2048)
parser.add_argument("--out", dest="out_features", type=int, default=1024)
args = parser.parse_args()
torch.ops.load_library(args.library)
ops = torch.ops.fusedlinear
device = torch.device(args.device)
torch.backends.cuda.matmul.allow_tf32 = False

torch.manual_seed(0)
k = args.in_features
w = torch.nn.Linear(k, args.out_features).weight.detach().to(device)
plain = torch.rand(args.rows, k)
scales = torch.logspace(-6, 3, k)[torch.randperm(k)]
inputs = {"torch.rand": plain.to(device), "wide range": (plain * scales).to(device)}
hi, lo = ops.split_bf16(w)
parts = ops.split_bf16_three(w)
modes = {
    "ieee": lambda x: x @ w.t(),
    "bf16x3": lambda x: ops.linear_bf16x3(x, hi, lo),
    "bf16x6": lambda x: ops.linear_bf16x6(x, *parts),
    "tf32": lambda x: ops.linear_tf32(x, w),
    "bf16": lambda x: ops.linear_bf16(x, hi),
}
if device.type == "cuda" and torch.cuda.get_device_capability(device) == (9, 0):
    modes["bf16x3 hopper"] = lambda x: ops.gemm_epilogue(x, hi, lo, None, [], "mul(1)", "bf16x3")
    modes["bf16x6 hopper"] = lambda x: ops.gemm_epilogue(x, parts[0], parts[1], None, [], "mul(1)",
                                                         "bf16x6", parts[2])
sum_bound = k * 2.0 ** -24
bounds = {"ieee": sum_bound, "bf16x3": 3 * 2.0 ** -16 + sum_bound,
          "bf16x6": 3 * 2.0 ** -25 + sum_bound,
          "tf32": 2 * 2.0 ** -11 + sum_bound, "bf16": 2 * 2.0 ** -8 + sum_bound}

print("%d x %d -> %d on %s" % (args.rows, k, args.out_features, device))
print("%-11s %-13s %11s %15s %11s %9s" % ("input", "mode", "max |err|", "max err/S|x||w|",
                                           "bound", "allclose"))
for name, x in inputs.items():
    want = x.double() @ w.double().t()
    scale = x.double().abs() @ w.double().abs().t()
    pytorch = x @ w.t()
    for mode, run in modes.items():
        got = run(x)
        err = (got.double() - want).abs()
        ok = torch.allclose(got, pytorch, rtol=1e-4, atol=1e-4)
        print("%-11s %-13s %11.3g %15.3g %11.3g %9s" % (
            name, mode, err.max().item(), (err / scale).max().item(), bounds[mode.split()[0]],
            "yes" if ok else "no"))
