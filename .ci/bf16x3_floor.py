#!/usr/bin/env python3
"""The error floor of bf16x3's split on the MLP shapes of .ci/mlp_models.py and the small MLPs of
.ci/small_mlps.py, against float64.

  python3 .ci/bf16x3_floor.py [--device cpu|cuda] [--rows 1024]
                              [--models mlp,swiglu,policy,field_64,field_128,field_256]

bf16x3 writes each float32 operand as hi + lo, two bfloat16 values (hi = x rounded, lo = x - hi
rounded), and sums three products, x_hi w_hi + x_hi w_lo + x_lo w_hi. What the two parts cannot
hold (about 2^-17 of each operand) and the dropped x_lo w_lo stay in the result however exactly
the products are summed. Each Linear is evaluated here four ways, the rest of the model (the
chains, the products of a gated pair) in float32 as a float32 model runs it:
  float32             torch's own float32 GEMM on the device
  float32, exact      the float32 operands' products summed exactly (float64), rounded to float32:
                      what any float32 kernel's error comes down to, its order of sums aside
  bf16x3, exact       the split's three products summed exactly, rounded to float32: no bf16x3
                      kernel, in any order or precision of accumulation, does better
  bf16x3, float32     the three products each in float32 (torch's GEMM), then added
The largest |error| over the outputs against the float64 model, and its ratio to float32's.
The models' weights from seed 0 (as mlp_models.py; the small MLPs each from seed 0 alone, not
small_mlps.py's files), x = torch.rand from seed 1.
"""
import argparse
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlp_models import Mlp, SwiGlu  # noqa: E402
from small_mlps import field, policy  # noqa: E402


def split(t):
    hi = t.to(torch.bfloat16).float()
    return hi, (t - hi).to(torch.bfloat16).float()


def with_bias(y, linear):
    return y if linear.bias is None else y + linear.bias.to(y.dtype)


def float32(h, linear):
    return torch.nn.functional.linear(h, linear.weight, linear.bias)


def float32_exact(h, linear):
    return with_bias(h.double() @ linear.weight.double().t(), linear).float()


def bf16x3_exact(h, linear):
    (hh, hl), (wh, wl) = split(h), split(linear.weight)
    hh, hl, wh, wl = (t.double() for t in (hh, hl, wh, wl))
    return with_bias(hh @ wh.t() + hh @ wl.t() + hl @ wh.t(), linear).float()


def bf16x3_float32(h, linear):
    (hh, hl), (wh, wl) = split(h), split(linear.weight)
    return with_bias(hh @ wh.t() + (hh @ wl.t() + hl @ wh.t()), linear)


def forward_with(model, x, linear_fn):
    """model(x) with each nn.Linear's forward replaced by linear_fn(h, linear)."""
    saved = {}
    for m in model.modules():
        if isinstance(m, nn.Linear):
            saved[m] = m.forward
            m.forward = lambda h, m=m: linear_fn(h, m)
    try:
        return model(x)
    finally:
        for m, forward in saved.items():
            m.forward = forward


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--models", default="mlp,swiglu")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    classes = {"mlp": Mlp, "swiglu": SwiGlu, "policy": policy,
               "field_64": lambda: field(64), "field_128": lambda: field(128),
               "field_256": lambda: field(256)}
    ways = (("float32", float32), ("float32, exact", float32_exact),
            ("bf16x3, exact", bf16x3_exact), ("bf16x3, float32", bf16x3_float32))
    print("torch %s, %s, %d rows; largest |error| against float64 (x float32's)" %
          (torch.__version__, args.device, args.rows))
    with torch.no_grad():
        for name in args.models.split(","):
            torch.manual_seed(0)
            model = classes[name]().eval().to(args.device)
            torch.manual_seed(1)
            first = next(m for m in model.modules() if isinstance(m, nn.Linear))
            x = torch.rand(args.rows, first.in_features).to(args.device)
            reference = model.double()(x.double())  # as compare's: the float32 input, exactly
            model.float()
            errors = [(way, (forward_with(model, x, fn).double() - reference).abs().max().item())
                      for way, fn in ways]
            print("  " + name + ": " + "; ".join(
                "%s %.3e (%.2fx)" % (way, e, e / errors[0][1]) for way, e in errors))


if __name__ == "__main__":
    main()
