"""The ops in PyTorch 2's deployment path, from Python (torch 2.x; on 1.x it says so and exits 77,
which ctest counts as skipped):

    python3 tests/python/pytorch2_path.py LIBRARY [--out DIR]

Loads the ops library, then for the CPU (and CUDA where there is one):
  - torch.library.opcheck on every op (schema, fake tensors, autograd registration, AOTAutograd);
  - torch.compile(fullgraph=True) of the reference models written with the ops: the same outputs as
    the Python models, with no graph break, under no_grad and in the default grad mode;
  - torch.export of each, run again from the exported program (a layered model as one call of the
    whole-model op among them);
and with --out, for the C++ side (app/tools/run_pt2.cpp): swish_chain written with the ops,
exported and packaged by AOTInductor (DIR/swish_chain.pt2, on CUDA where there is one), with its
state dict, input and Python's output; and a layered model (x + w2(silu(w1(x)) * w3(x))) as one
call of the whole-model op (DIR/swiglu.pt2, its input and output). Every check runs; a failure is one FAIL line, and the exit
code is non-zero if any failed.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

# The reference models as weights/export.py defines them, and the ops test's check and scripted
# module (this folder).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "weights"))
from export import MishMish, SwishChain  # noqa: E402
from ops_library import ScriptedMishMish as MishMishOps, SwiGlu, check, swiglu_ops  # noqa: E402


class SwishChainOps(SwishChain):
    """swish_chain with the fused op after a bias-free GEMM."""

    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features, (out_features,))

    def forward(self, x):
        y = F.linear(x, self.matmul.weight)
        return torch.ops.fusedlinear.epilogue(y, self.matmul.bias, [self.add_value], "swish_chain")


class SpecChainOps(MishMishOps):
    """A chain given as a spec: Linear -> GELU(tanh) -> SiLU -> clamp(-2, 2)."""

    def forward(self, x):
        y = F.linear(x, self.linear.weight)
        return torch.ops.fusedlinear.epilogue(y, self.linear.bias, [], "gelu(tanh),silu,clamp(-2,2)")


def spec_chain_eager(model, x):
    return torch.clamp(F.silu(F.gelu(model.linear(x), approximate="tanh")), -2, 2)


FAILURES = []


def step(what, fn):
    """Runs one check; a failure is printed in one line and counted, and the next check runs."""
    try:
        fn()
    except (Exception, SystemExit) as e:  # check() exits on a mismatch, after printing it
        lines = [line for line in str(e).strip().splitlines() if line.strip()]
        print("FAIL  %s: %s%s" % (what, type(e).__name__, (": " + lines[-1]) if lines else ""))
        FAILURES.append(what)


def check_opcheck(device):
    ops = torch.ops.fusedlinear
    torch.manual_seed(0)
    y, b, p = (torch.randn(7, 48, device=device), torch.randn(48, device=device),
               torch.randn(48, device=device))
    x, w = torch.rand(5, 64, device=device), torch.randn(48, 64, device=device) / 8
    hi, lo = ops.split_bf16(w)
    parts = ops.split_bf16_three(w)
    w2, p2 = torch.randn(64, 48, device=device) / 8, torch.randn(64, device=device)
    hi2, lo2 = ops.split_bf16(w2)
    cases = [
        (ops.epilogue.default, (y, b, [p], "swish_chain")),
        (ops.epilogue.default, (y, None, [], "mish_mish")),
        (ops.epilogue.default, (y, b, [p], "mul(p),gelu(tanh),clamp(-2,2)")),
        (ops.linear_epilogue.default, (x, w, None, b, [p], "swish_chain", "ieee")),
        (ops.linear_epilogue.default, (x, hi, lo, b, [], "mish_mish", "bf16x3")),
        (ops.split_bf16.default, (w,)),
        (ops.linear_bf16x3.default, (x, hi, lo)),
        (ops.split_bf16_three.default, (w,)),
        (ops.linear_bf16x6.default, (x, *parts)),
        (ops.linear_bf16.default, (x, hi)),
        (ops.linear_tf32.default, (x, w)),
        # The whole-model op: a gated pair, then a Linear with a chain parameter; in bf16x3 W's
        # parts follow each W.
        (ops.model.default, (x, [w, w, w2], [b, None, None], [p2], "x+(a:silu*g|o:mul(p))",
                             "ieee")),
        (ops.model.default, (x, [w, hi, lo, w, hi, lo, w2, hi2, lo2], [b, b, None], [p2],
                             "x+(a:silu*g|o:mul(p))", "bf16x3")),
    ]
    # The Hopper GEMM's op: its CPU twin, and on CUDA where it runs (compute capability 9.0).
    if device == "cpu" or torch.cuda.get_device_capability() == (9, 0):
        cases += [
            (ops.gemm_epilogue.default, (x, hi, lo, b, [p], "swish_chain", "bf16x3")),
            (ops.gemm_epilogue.default, (x, parts[0], parts[1], b, [p], "swish_chain", "bf16x6",
                                         parts[2])),
            (ops.gemm_epilogue.default, (x.bfloat16(), w.bfloat16(), None, b.bfloat16(), [],
                                         "mish_mish", "ieee")),
        ]
    def run(op, args):
        for requires_grad in (False, True):
            call = [a.detach().clone().requires_grad_(requires_grad and a.is_floating_point())
                    if isinstance(a, torch.Tensor) else a for a in args]
            torch.library.opcheck(op, tuple(call))
        print("ok    %s opcheck %s" % (device, op))

    for op, args in cases:
        step("%s opcheck %s %s" % (device, op, args[-1] if isinstance(args[-1], str) else ""),
             lambda: run(op, args))


def loaded(fused, reference):
    """fused with reference's parameters (the same keys)."""
    fused.load_state_dict(reference.state_dict())
    return fused


def check_compile_and_export(device):
    torch.manual_seed(1)
    swish, mish, swiglu = SwishChain(64, 48, (48,)), MishMish(64, 48), SwiGlu()
    models = [(swish, loaded(SwishChainOps(64, 48), swish)),
              (mish, loaded(MishMishOps(64, 48), mish)),
              (None, SpecChainOps(64, 48)),
              (swiglu, swiglu_ops(swiglu))]
    x = torch.rand(9, 64, device=device)
    for reference, fused in models:
        step("%s %s" % (device, type(fused).__name__),
             lambda: compile_and_export(device, reference, fused, x))


def compile_and_export(device, reference, fused, x):
    if reference is not None:
        reference = reference.to(device).eval()
    fused = fused.to(device).eval()
    name = type(fused).__name__
    want = reference(x) if reference is not None else spec_chain_eager(fused, x)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(fused)(x)
    if explained.graph_break_count != 0:
        raise SystemExit("%d graph breaks" % explained.graph_break_count)
    compiled = torch.compile(fused, fullgraph=True)
    with torch.no_grad():
        check("%s torch.compile %s under no_grad" % (device, name), compiled(x), want.detach(),
              1e-5)
    check("%s torch.compile %s in grad mode" % (device, name), compiled(x).detach(),
          want.detach(), 1e-5)
    exported = torch.export.export(fused, (x,))
    check("%s torch.export %s" % (device, name), exported.module()(x).detach(), want.detach(),
          1e-5)


def write_package(out, device):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(2)
    reference = SwishChain(512, 256, (256,))
    fused = SwishChainOps(512, 256)
    fused.load_state_dict(reference.state_dict())
    reference, fused = reference.to(device).eval(), fused.to(device).eval()
    x = torch.rand(64, 512, device=device)
    with torch.no_grad():
        want = reference(x)
        exported = torch.export.export(fused, (x,))
        path = torch._inductor.aoti_compile_and_package(
            exported, package_path=os.path.join(out, "swish_chain.pt2"))
    torch.save(reference.state_dict(), os.path.join(out, "swish_chain.pt"))
    torch.save(x.cpu(), os.path.join(out, "swish_chain_input.pt"))
    torch.save(want.cpu(), os.path.join(out, "swish_chain_output.pt"))
    print("wrote %s (on %s) and the model's state dict, input and output" % (path, device))
    # A layered model as one op: packaged, loaded back and run.
    torch.manual_seed(3)
    reference = SwiGlu()
    fused = swiglu_ops(reference)
    reference, fused = reference.to(device).eval(), fused.to(device).eval()
    x = torch.rand(33, 64, device=device)
    with torch.no_grad():
        want = reference(x)
        path = torch._inductor.aoti_compile_and_package(
            torch.export.export(fused, (x,)), package_path=os.path.join(out, "swiglu.pt2"))
    # Run from C++ (fusedlinear_pt2 with "-" for weights): torch 2.11's Python crashed loading a
    # package back (examples/serving/build_repository.py).
    torch.save(x.cpu(), os.path.join(out, "swiglu_input.pt"))
    torch.save(want.cpu(), os.path.join(out, "swiglu_output.pt"))
    print("wrote %s (on %s) and its input and output" % (path, device))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("library")
    parser.add_argument("--out", help="folder for the AOTInductor package and its data")
    args = parser.parse_args()
    if int(torch.__version__.split(".")[0]) < 2:
        print("torch %s: the PyTorch 2 path (torch.compile, torch.export, AOTInductor) needs "
              "torch 2: skipped" % torch.__version__)
        return 77  # ctest's SKIP_RETURN_CODE
    torch.ops.load_library(args.library)
    print("loaded %s into torch %s" % (args.library, torch.__version__))
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        check_opcheck(device)
        check_compile_and_export(device)
    if args.out:
        step("AOTInductor package", lambda: write_package(args.out, devices[-1]))
    if FAILURES:
        print("%d check(s) failed: %s" % (len(FAILURES), "; ".join(FAILURES)))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
