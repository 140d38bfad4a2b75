#!/usr/bin/env python3
"""Export the reference models' weights, an input and PyTorch's output, for fusedlinear.

The two models are defined here exactly as the reference PyTorch code defines them. For each
model chosen this writes, into --out:
    <model>.pt         the state dict, in the --form people write it (default: ordereddict,
                       torch.save(model.state_dict(), path), what most people write)
    <model>_input.pt   the input tensor, torch.rand(batch, in_features) (uniform in [0, 1))
    <model>_output.pt  PyTorch's output for that input, model(input)

Runs with torch 1.13 (Debian's python3-torch) and torch 2.x. Example:
    python3 weights/export.py --model all --batch 5 --in-features 64 --out-features 48 \\
        --seed 0 --out weights/fixtures
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class SwishChain(nn.Module):
    """Linear -> + add_value -> Swish -> Tanh -> GELU(exact) -> Hardtanh(-1, 1)."""

    def __init__(self, in_features, out_features, add_value_shape):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.add_value = nn.Parameter(torch.randn(add_value_shape))

    def forward(self, x):
        x = self.matmul(x)
        x = x + self.add_value
        x = torch.sigmoid(x) * x
        x = torch.tanh(x)
        x = F.gelu(x)
        x = F.hardtanh(x, min_val=-1, max_val=1)
        return x


class MishMish(nn.Module):
    """Linear -> Mish -> Mish."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = F.mish(x)
        x = F.mish(x)
        return x


# The models by the names fusedlinear gives them (its registry, kernels/ops/chain_registry.cpp;
# a test checks that the two agree, names and state-dict keys).
MODELS = {
    "swish_chain": lambda in_features, out_features: SwishChain(in_features, out_features,
                                                                (out_features,)),
    "mish_mish": MishMish,
}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


# What torch.save is given, for each --form.
FORMS = {
    "ordereddict": lambda model: model.state_dict(),
    "dict": lambda model: dict(model.state_dict()),
    # A training checkpoint; the loader finds the state dict under its well-known key.
    "checkpoint": lambda model: {"epoch": 3, "model_state_dict": model.state_dict(),
                                 "optimizer_state_dict": torch.optim.SGD(
                                     model.parameters(), lr=0.1).state_dict()},
    # What nn.DataParallel / DistributedDataParallel save: every key prefixed "module.".
    "dataparallel": lambda model: nn.DataParallel(model).state_dict(),
}


def build(name, in_features, out_features):
    return MODELS[name](in_features, out_features)


def export(name, args):
    torch.manual_seed(args.seed)
    model = build(name, args.in_features, args.out_features)
    x = torch.rand(args.batch, args.in_features)
    dtype = DTYPES[args.dtype]
    device = torch.device(args.device)
    model = model.to(device=device, dtype=dtype).eval()
    x = x.to(device=device, dtype=dtype)
    with torch.no_grad():
        y = model(x)
    state = FORMS[args.form](model)
    paths = [os.path.join(args.out, name + suffix) for suffix in (".pt", "_input.pt", "_output.pt")]
    for path in paths:
        if os.path.exists(path) and not args.overwrite:
            sys.exit("export.py: %s exists; pass --overwrite to replace it" % path)
    torch.save(state, paths[0])
    torch.save(x.cpu(), paths[1])
    torch.save(y.cpu(), paths[2])
    print("wrote %s (%s, %s, input [%d, %d] -> output %s)"
          % (", ".join(paths), args.form, args.dtype,
             args.batch, args.in_features, list(y.shape)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=tuple(MODELS) + ("all",), default="all")
    parser.add_argument("--batch", type=int, default=5)
    parser.add_argument("--in-features", type=int, default=64)
    parser.add_argument("--out-features", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--device", default="cpu", help="where PyTorch computes the output")
    parser.add_argument("--form", choices=sorted(FORMS), default="ordereddict",
                        help="how the state dict is saved (default: ordereddict)")
    parser.add_argument("--out", help="output folder (created if missing)")
    parser.add_argument("--list", action="store_true",
                        help="print each model's name and state-dict keys, one model a line, "
                             "and exit")
    parser.add_argument("--overwrite", action="store_true", help="replace existing files")
    args = parser.parse_args()
    if args.list:
        for name in MODELS:
            print(name, " ".join(build(name, 2, 3).state_dict().keys()))
        return
    if not args.out:
        parser.error("--out is required")
    if min(args.batch, args.in_features, args.out_features) <= 0:
        parser.error("--batch, --in-features and --out-features must be positive")
    os.makedirs(args.out, exist_ok=True)
    for name in MODELS if args.model == "all" else (args.model,):
        export(name, args)


if __name__ == "__main__":
    main()
