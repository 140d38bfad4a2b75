"""The shared ops library from Python: torch.ops.load_library, then torch.ops.fusedlinear.<op>.

    python3 tests/python/ops_library.py LIBRARY [--script OUT_FOLDER]

Checks every op against eager PyTorch on the CPU (and CUDA where available) (the whole-model op
against Python modules it stands for), on meta tensors, that
None is refused for a required tensor, that the ops run in grad mode recording no graph, and
with --script writes a TorchScript module that calls an op (mish_mish.ts), its input and its output
(mish_mish_ts_input.pt, mish_mish_ts_output.pt) for the C++ side to load. Exits non-zero on the
first failure.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

# A layered model as one call of the whole-model op, built from its state dict and spec.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "weights"))
from model_op import ModelOp  # noqa: E402


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
    check(device + " mish_mish", ops.epilogue(y, bias, [], "mish_mish"),
          F.mish(F.mish(y + bias)), 1e-5)
    check(device + " mish_mish without bias", ops.epilogue(y, None, [], "mish_mish"),
          F.mish(F.mish(y)), 1e-5)
    # None for no params: what AOTInductor's runtime passes for an empty list (ops.cpp).
    check(device + " mish_mish with params None", ops.epilogue(y, bias, None, "mish_mish"),
          F.mish(F.mish(y + bias)), 1e-5)
    try:
        ops.epilogue(y, bias, None, "swish_chain")
        raise SystemExit("FAIL  %s: swish_chain ran with params None" % device)
    except RuntimeError as e:
        assert "parameter tensor(s), got 0" in str(e), str(e)
    t = y + bias + add_value
    want = F.hardtanh(F.gelu(torch.tanh(torch.sigmoid(t) * t)), -1, 1)
    check(device + " swish_chain", ops.epilogue(y, bias, [add_value], "swish_chain"), want, 1e-5)
    check(device + " swish_chain's spec", ops.epilogue(
        y, bias, [add_value], "add(add_value),swish,tanh,gelu,hardtanh(-1,1)"), want, 1e-5)
    t = y + bias
    check(device + " a chain spec", ops.epilogue(y, bias, [], "gelu(tanh),silu,clamp(-2,2)"),
          torch.clamp(F.silu(F.gelu(t, approximate="tanh")), -2, 2), 1e-5)

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
    hi3, mid3, lo3 = ops.split_bf16_three(w)
    assert torch.equal(hi3, hi) and torch.equal(mid3, lo), "split_bf16_three's hi, mid"
    residual = (w.double() - hi3.double() - mid3.double() - lo3.double()).abs()
    assert (residual <= w.double().abs() * 2.0 ** -26).all(), "split_bf16_three beyond 2^-26"
    check(device + " linear_bf16x6", ops.linear_bf16x6(x, hi3, mid3, lo3), exact, 1e-5)

    # The whole forward for few rows (the small-batch kernels on CUDA), from W or its parts.
    b, shift = torch.randn(48, device=device) / 16, torch.randn(48, device=device)
    linear_out = (exact + b.double()).float()
    check(device + " linear_epilogue", ops.linear_epilogue(x, w, None, b, [], "mish_mish", "ieee"),
          F.mish(F.mish(linear_out)), 1e-5)
    check(device + " linear_epilogue from hi and lo",
          ops.linear_epilogue(x, hi, lo, b, [], "mish_mish", "bf16x3"),
          F.mish(F.mish(linear_out)), 1e-5)
    t = linear_out + shift
    check(device + " linear_epilogue with params None",
          ops.linear_epilogue(x, w, None, b, None, "mish_mish", "ieee"),
          F.mish(F.mish(linear_out)), 1e-5)
    # The Hopper GEMM's op, where it runs (its CPU twin: linear_epilogue's, bitwise).
    if device == "cpu" or torch.cuda.get_device_capability() == (9, 0):
        check(device + " gemm_epilogue bf16x3",
              ops.gemm_epilogue(x, hi, lo, b, None, "mish_mish", "bf16x3"),
              F.mish(F.mish(linear_out)), 1e-5)
        check(device + " gemm_epilogue bf16x6",
              ops.gemm_epilogue(x, hi3, mid3, b, None, "mish_mish", "bf16x6", lo3),
              F.mish(F.mish(linear_out)), 1e-5)
    if device == "cpu":
        assert torch.equal(ops.gemm_epilogue(x, w, None, b, [], "mish_mish", "ieee"),
                           ops.linear_epilogue(x, w, None, b, [], "mish_mish", "ieee"))
    check(device + " linear_epilogue of swish_chain",
          ops.linear_epilogue(x, w, None, b, [shift], "swish_chain", "ieee"),
          F.hardtanh(F.gelu(torch.tanh(torch.sigmoid(t) * t)), -1, 1), 1e-5)

    # On meta tensors: the outputs' shapes and dtypes, no data.
    meta = ops.epilogue(y.to("meta"), bias.to("meta"), [], "mish_mish")
    assert meta.device.type == "meta" and meta.shape == y.shape and meta.dtype == y.dtype
    meta = ops.linear_epilogue(x.to("meta"), w.to("meta"), None, None, [], "mish_mish", "ieee")
    assert meta.device.type == "meta" and meta.shape == (9, 48)

    # A required tensor is required: None only where the schema says Tensor?.
    for call in (lambda: ops.epilogue(None, bias, [], "mish_mish"),
                 lambda: ops.epilogue(y, bias, [None], "swish_chain"),
                 lambda: ops.linear_epilogue(x, None, None, b, [], "mish_mish", "ieee")):
        try:
            call()
            raise SystemExit("FAIL  %s: an op took None for a required tensor" % device)
        except (RuntimeError, TypeError):
            pass
    # The precision comes by name: each whole-forward op parses it and refuses an unknown one.
    for op_name, takes in (("linear_epilogue", "ieee, bf16 or bf16x3"),
                           ("gemm_epilogue", "ieee, bf16, bf16x3 or bf16x6")):
        try:
            getattr(ops, op_name)(x, w, None, None, [], "mish_mish", "fp8")
            raise SystemExit("FAIL  %s: %s ran in precision fp8" % (device, op_name))
        except RuntimeError as e:
            assert "expected precision %s, got 'fp8'" % takes in str(e), str(e)

    # Inference ops: in grad mode, on tensors that require grad, they compute their outputs and
    # record no graph, so the outputs do not require grad and a backward from them fails.
    needs_grad = y.clone().requires_grad_()
    for op_name, out in [
            ("epilogue", ops.epilogue(needs_grad, bias, [], "mish_mish")),
            ("linear_epilogue", ops.linear_epilogue(needs_grad[:, :64], torch.randn(
                48, 64, device=device, requires_grad=True), None, None, [], "mish_mish", "ieee"))]:
        if out.requires_grad or out.grad_fn is not None:
            raise SystemExit("FAIL  %s: %s's output requires grad" % (device, op_name))
    out = ops.epilogue(needs_grad, bias, [], "mish_mish")
    check(device + " mish_mish in grad mode", out, F.mish(F.mish(y + bias)), 1e-5)
    try:
        out.sum().backward()
        raise SystemExit("FAIL  %s: a backward from the op's output ran" % device)
    except RuntimeError as error:
        assert "does not require grad" in str(error), error
    with torch.no_grad():
        check(device + " mish_mish under no_grad", ops.epilogue(needs_grad, bias, [], "mish_mish"),
              F.mish(F.mish(y + bias)), 1e-5)
    print("ok    %s: ran in grad mode recording no graph, ran under no_grad" % device)


class SwiGlu(torch.nn.Module):
    """LLaMA's feed-forward with a residual, x + w2(silu(w1(x)) * w3(x)); w3 without a bias."""

    def __init__(self, width=64, hidden=96):
        super().__init__()
        self.w1 = torch.nn.Linear(width, hidden)
        self.w3 = torch.nn.Linear(width, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.w2(F.silu(self.w1(x)) * self.w3(x))


SWIGLU_SPEC = "x+(w1:silu*w3|w2)"


def swiglu_ops(reference):
    """The same module as one call of the whole-model op, with reference's tensors."""
    return ModelOp(reference.state_dict(), SWIGLU_SPEC)


def check_model_op(device):
    """The whole-model op against the Python modules it stands for, in each precision."""
    ops = torch.ops.fusedlinear
    torch.manual_seed(3)
    reference = SwiGlu().to(device)
    fused = swiglu_ops(reference)
    x = torch.rand(2, 5, 64, device=device)
    with torch.no_grad():
        check(device + " model x+(w1:silu*w3|w2)", fused(x), reference(x), 1e-5)
        linears = [reference.w1, reference.w3, reference.w2]
        biases = [l.bias for l in linears]
        for precision, split, tolerance in (("bf16x3", ops.split_bf16, 1e-4),
                                            ("bf16x6", ops.split_bf16_three, 1e-5)):
            weights = []
            for l in linears:
                weights += [l.weight, *split(l.weight)]
            check("%s model in %s" % (device, precision),
                  ops.model(x, weights, biases, [], SWIGLU_SPEC, precision),
                  reference(x), tolerance)
        # The chunk form with a chain parameter: w13's halves, gelu on the first plus a shift.
        w13, w2 = torch.nn.Linear(64, 2 * 40).to(device), torch.nn.Linear(40, 8).to(device)
        shift = torch.randn(40, device=device)
        a, b = w13(x).chunk(2, -1)
        check(device + " model w13[0]:add(shift),gelu*w13[1]|w2",
              ops.model(x, [w13.weight, w2.weight], [w13.bias, w2.bias], [shift],
                        "w13[0]:add(shift),gelu*w13[1]|w2", "ieee"),
              w2(F.gelu(a + shift) * b), 1e-5)
        meta = ops.model(x.to("meta"), [w13.weight.to("meta"), w2.weight.to("meta")],
                         [None, None], [shift.to("meta")], "w13[0]:add(shift),gelu*w13[1]|w2",
                         "ieee")
        assert meta.device.type == "meta" and meta.shape == (2, 5, 8), meta.shape
        try:
            ops.model(x, [w13.weight], [w13.bias, w2.bias], [shift],
                      "w13[0]:add(shift),gelu*w13[1]|w2", "ieee")
            raise SystemExit("FAIL  %s: model ran with a weight missing" % device)
        except RuntimeError as e:
            assert "2 weights, got 1" in str(e), str(e)
        # The precision and the kernel come from Python by name: the op parses them, on the
        # device and on meta tensors alike, and refuses an unknown one in one line.
        for on in (device, "meta"):
            arguments = (x.to(on), [w13.weight.to(on), w2.weight.to(on)],
                         [w13.bias.to(on), w2.bias.to(on)], [shift.to(on)],
                         "w13[0]:add(shift),gelu*w13[1]|w2")
            for names, want in (
                    (("fp8",), "expected precision ieee, bf16x3, bf16x6, tf32 or bf16, got 'fp8'"),
                    (("ieee", "fused"),
                     "expected gemm auto, cublas, skinny, hopper or mlp, got 'fused'")):
                try:
                    ops.model(*arguments, *names)
                    raise SystemExit("FAIL  %s: model ran with %s" % (on, names))
                except RuntimeError as e:
                    assert want in str(e) and "\n" not in str(e).strip(), str(e)


class ScriptedMishMish(torch.nn.Module):
    """MishMish with its epilogue as the fused op: what a TorchScript deployment calls."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.nn.functional.linear(x, self.linear.weight)
        return torch.ops.fusedlinear.epilogue(y, self.linear.bias, [], "mish_mish")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("library")
    parser.add_argument("--script", help="folder for the TorchScript module and its data")
    args = parser.parse_args()
    torch.ops.load_library(args.library)
    print("loaded %s into torch %s" % (args.library, torch.__version__))
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        check_ops(device)
        check_model_op(device)
    if args.script:
        torch.manual_seed(1)
        module = torch.jit.script(ScriptedMishMish(64, 48).eval())
        x = torch.rand(5, 64)
        y = module(x)  # in the default grad mode: the Linear's parameters require grad
        with torch.no_grad():
            check("TorchScript module against eager", y.detach(),
                  F.mish(F.mish(F.linear(x, module.linear.weight, module.linear.bias))), 1e-5)
        y = y.detach()
        os.makedirs(args.script, exist_ok=True)
        torch.jit.save(module, os.path.join(args.script, "mish_mish.ts"))
        torch.save(x, os.path.join(args.script, "mish_mish_ts_input.pt"))
        torch.save(y, os.path.join(args.script, "mish_mish_ts_output.pt"))
        print("wrote %s/mish_mish.ts and its input and output" % args.script)


if __name__ == "__main__":
    main()
