"""The shared ops library from Python: torch.ops.load_library, then torch.ops.fusedlinear.<op>.

    python3 tests/python/ops_library.py LIBRARY [--script OUT_FOLDER]

Checks every op against eager PyTorch on the CPU (and CUDA where available), that the ops refuse
tensors that require grad in grad mode, and with --script writes a TorchScript module that calls
an op (mish_mish.ts), its input and its output (mish_mish_ts_input.pt, mish_mish_ts_output.pt)
for the C++ side to load. Exits non-zero on the first failure.
"""
import argparse
import os

import torch
import torch.nn.functional as F


def check(what, got, want, tolerance):
    ok = torch.allclose(got.double(), want.double(), rtol=tolerance, atol=tolerance)
    print(("ok    " if ok else "FAIL  ") + what, "max abs difference %.3g"
          % (got.double() - want.double()).abs().max().item())
    if not ok:
        raise SystemExit(1)


def check_ops(device):
    ops = torch.ops.fusedlinear
    torch.manual_seed(0)
    y = torch.randn(37, 200, device=device) * 3
    bias, add_value = torch.randn(200, device=device), torch.randn(200, device=device)
    check(device + " mish_mish", ops.mish_mish(y, bias), F.mish(F.mish(y + bias)), 1e-5)
    check(device + " mish_mish without bias", ops.mish_mish(y, None), F.mish(F.mish(y)), 1e-5)
    t = y + bias + add_value
    want = F.hardtanh(F.gelu(torch.tanh(torch.sigmoid(t) * t)), -1, 1)
    check(device + " swish_chain", ops.swish_chain(y, bias, add_value), want, 1e-5)

    w = (torch.rand(48, 256, device=device) * 2 - 1) / 16
    x = torch.rand(9, 256, device=device)
    hi, lo = ops.split_bf16(w)
    assert hi.dtype == torch.bfloat16 and lo.dtype == torch.bfloat16
    residual = (w.double() - hi.double() - lo.double()).abs()
    assert (residual <= w.double().abs() * 2.0 ** -17).all(), "split_bf16 beyond 2^-17"
    exact = x.double() @ w.double().t()
    check(device + " linear_bf16x3", ops.linear_bf16x3(x, hi, lo), exact, 1e-5)
    check(device + " linear_tf32", ops.linear_tf32(x, w), exact, 1e-2)
    check(device + " linear_bf16", ops.linear_bf16(x, hi), exact, 5e-2)

    # The whole forward for few rows (the skinny kernel on CUDA), from W or its parts.
    b, shift = torch.randn(48, device=device) / 16, torch.randn(48, device=device)
    linear_out = (exact + b.double()).float()
    check(device + " linear_mish_mish", ops.linear_mish_mish(x, w, None, b),
          F.mish(F.mish(linear_out)), 1e-5)
    check(device + " linear_mish_mish from hi and lo", ops.linear_mish_mish(x, hi, lo, b),
          F.mish(F.mish(linear_out)), 1e-5)
    t = linear_out + shift
    check(device + " linear_swish_chain", ops.linear_swish_chain(x, w, None, b, shift),
          F.hardtanh(F.gelu(torch.tanh(torch.sigmoid(t) * t)), -1, 1), 1e-5)

    # Inference-only: refused in grad mode on a tensor that requires grad, fine under no_grad.
    needs_grad = y.clone().requires_grad_()
    try:
        ops.mish_mish(needs_grad, bias)
        raise SystemExit("FAIL  %s: mish_mish ran on a tensor that requires grad" % device)
    except RuntimeError as error:
        assert "inference-only" in str(error), error
    with torch.no_grad():
        check(device + " mish_mish under no_grad", ops.mish_mish(needs_grad, bias),
              F.mish(F.mish(y + bias)), 1e-5)
    print("ok    %s: refused in grad mode, ran under no_grad" % device)


class ScriptedMishMish(torch.nn.Module):
    """MishMish with its epilogue as the fused op: what a TorchScript deployment calls."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.nn.functional.linear(x, self.linear.weight)
        return torch.ops.fusedlinear.mish_mish(y, self.linear.bias)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("library")
    parser.add_argument("--script", help="folder for the TorchScript module and its data")
    args = parser.parse_args()
    torch.ops.load_library(args.library)
    print("loaded %s into torch %s" % (args.library, torch.__version__))
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        check_ops(device)
    if args.script:
        torch.manual_seed(1)
        module = torch.jit.script(ScriptedMishMish(64, 48).eval())
        x = torch.rand(5, 64)
        with torch.no_grad():
            y = module(x)
            check("TorchScript module against eager", y,
                  F.mish(F.mish(F.linear(x, module.linear.weight, module.linear.bias))), 1e-5)
        os.makedirs(args.script, exist_ok=True)
        torch.jit.save(module, os.path.join(args.script, "mish_mish.ts"))
        torch.save(x, os.path.join(args.script, "mish_mish_ts_input.pt"))
        torch.save(y, os.path.join(args.script, "mish_mish_ts_output.pt"))
        print("wrote %s/mish_mish.ts and its input and output" % args.script)


if __name__ == "__main__":
    main()
