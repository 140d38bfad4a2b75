#!/usr/bin/env python3
"""The split modes' products through cuBLAS (the ops linear_bf16x3 and linear_bf16x6), profiled:
each kernel's time per call, grouped as x's split, the products (cuBLAS's GEMMs) and the pass that
makes a non-finite sum eager's, at 1024, 64 and 8 rows of 8192 -> 8192, float32.

Usage: python3 .ci/split_products_profile.py build-gpu/libfusedlinear_ops.so
"""
import sys
import torch
from torch.profiler import ProfilerActivity, profile

torch.ops.load_library(sys.argv[1])
ops = torch.ops.fusedlinear
torch.manual_seed(0)
w = torch.randn(8192, 8192, device="cuda") / 90
for rows in (1024, 64, 8):
    x = torch.randn(rows, 8192, device="cuda")
    for name, parts, call in (
        ("bf16x3", ops.split_bf16(w), lambda p: ops.linear_bf16x3(x, *p)),
        ("bf16x6", ops.split_bf16_three(w), lambda p: ops.linear_bf16x6(x, *p)),
    ):
        for _ in range(5):
            call(parts)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                call(parts)
            torch.cuda.synchronize()
        total, per = 0.0, {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                key = "non-finite pass" if "non_finite" in e.name else ("split" if "split" in e.name else "products")
                per[key] = per.get(key, 0.0) + e.time_range.elapsed_us() / 20
                total += e.time_range.elapsed_us() / 20
        print(f"{rows:5d} rows {name}: kernels {total:8.1f} us; "
              + ", ".join(f"{k} {v:7.1f} us ({100 * v / total:4.1f}%)" for k, v in sorted(per.items())))
