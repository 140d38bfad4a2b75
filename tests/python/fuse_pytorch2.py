"""fusedlinear.fuse on PyTorch 2's deployment path (torch 2.x; on 1.x it says so and exits 77,
which ctest counts as skipped):

    python3 tests/python/fuse_pytorch2.py LIBRARY [--runner PATH] [--device cpu|cuda] [--out DIR]
                                      [--no-bench]

For each model of tests/python/fuse_models.py, fused (float32, ieee): torch.compile(fullgraph=True),
torch.export and, from torch 2.6, an AOTInductor package (in DIR, or a temporary folder) run from
C++ by fusedlinear_pt2 (--runner: AOTIModelPackageLoader with the ops linked, as a server runs
it; torch 2.11's aoti_load_package crashes loading any package back into Python, one of a
plain nn.Linear too), each within 1e-5 of the model. Two of them fused in bf16x3 (W split once, its parts
buffers): the same three paths with no split in their graphs, within 1e-4 of float64, and the
compiled module after its weights changed (in place then fusedlinear.refresh; by
load_state_dict) within 1e-4 of the new weights' float64 output. Then on CUDA, unless
--no-bench, a ViT-B MLP block (x + fc2(gelu(fc1(norm(x)))), 768 -> 3072 -> 768, 8192 tokens,
float32) timed with CUDA events (warm-up, median of 50): eager, torch.compile of the block, fuse
in ieee, in bf16x3 (W split once, and split per call) and in bf16x6, and torch.compile of each
split-precision block; each one's largest error against float64 and its time, as a table. Every
check runs; a failure is one FAIL line, and the exit code is non-zero if any failed.
"""
import argparse
import copy
import importlib
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn

# The models (this folder), and the CUDA-event timing of the MLP measurements (.ci/).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".ci"))
from fuse_models import PreNormMLP, fusedlinear, models  # noqa: E402
from mlp_models import median_ms  # noqa: E402

SKIP = 77
failures = []
RUNNER = None  # fusedlinear_pt2, which runs an AOTInductor package from C++ (--runner)


def check_close(what, got, want, tolerance=1e-5):
    difference = (got.double() - want.double()).abs().max().item()
    ok = difference <= tolerance + tolerance * want.double().abs().max().item()
    print("%s  %s: max abs difference %.3g" % ("ok  " if ok else "FAIL", what, difference))
    if not ok:
        failures.append(what)


def step(what, run):
    """Runs one check; an exception is a FAIL line naming it, and the next check runs."""
    try:
        run()
    except Exception as error:  # any failure of the path under test, reported in one line
        line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        print("FAIL  %s: %s: %s" % (what, type(error).__name__, line))
        failures.append(what)


def aoti_available():
    return hasattr(torch._inductor, "aoti_compile_and_package")


def split_ops_in(graph):
    """The nodes of graph that split a weight (what split="once" leaves out of the graph)."""
    return [n for n in graph.nodes if n.op == "call_function" and "split_bf16" in str(n.target)]


def check_exported(what, fused, x, want, tolerance, package_path):
    """torch.export of fused, run, and its AOTInductor package at package_path (torch 2.6+),
    each within tolerance of want; the exported graph splits no W (a split precision's parts are
    the program's constants)."""
    exported = []
    step(what + " torch.export", lambda: exported.append(torch.export.export(fused, (x,))))
    if not exported:
        return
    if split_ops_in(exported[0].graph):
        print("FAIL  %s torch.export: the graph splits W" % what)
        failures.append(what + " exported graph splits W")
    step(what + " torch.export, run", lambda: check_close(
        what + " torch.export", exported[0].module()(x), want, tolerance))
    if not aoti_available():
        print("skip  %s AOTInductor: torch %s has no aoti_compile_and_package (2.6+)"
              % (what, torch.__version__))
        return
    if not RUNNER:
        print("skip  %s AOTInductor: no --runner (fusedlinear_pt2, built where libtorch has "
              "AOTIModelPackageLoader)" % what)
        return

    def package():
        torch._inductor.aoti_compile_and_package(exported[0], package_path=package_path)
        stem = os.path.splitext(package_path)[0]
        torch.save(x.cpu(), stem + "_input.pt")
        torch.save(want.float().cpu(), stem + "_want.pt")
        run = subprocess.run([RUNNER, package_path, "-", stem + "_input.pt", stem + "_want.pt",
                              repr(tolerance * (1.0 + want.double().abs().max().item()))],
                             capture_output=True, text=True)
        lines = (run.stdout + run.stderr).strip().splitlines()
        print("%s  %s AOTInductor package, run from C++: %s"
              % ("ok  " if run.returncode == 0 else "FAIL", what, lines[-1] if lines else ""))
        if run.returncode != 0:
            failures.append(what + " AOTInductor package")
    step(what + " AOTInductor", package)


def check_model(name, model, x, out):
    model.eval()
    with torch.no_grad():
        want = model(x)
        fused = fusedlinear.fuse(model)
        if not fused.fusion_report.fused:
            failures.append(name + ": nothing fused")
            print("FAIL  %s: nothing fused" % name)
        torch._dynamo.reset()
        step(name + " torch.compile(fullgraph=True)", lambda: check_close(
            name + " torch.compile(fullgraph=True)", torch.compile(fused, fullgraph=True)(x),
            want))
        check_exported(name, fused, x, want, 1e-5, os.path.join(out, name + ".pt2"))


def check_split_once(name, model, x, out):
    """A module fused in bf16x3 (W split once, the parts buffers) under torch.compile(fullgraph=
    True), torch.export and AOTInductor: no split in their graphs, outputs within bf16x3's bound
    of float64, and, after its weights change, the new weights' outputs: in place then
    fusedlinear.refresh, and by the fused module's load_state_dict (its hook refreshes)."""
    model.eval()
    with torch.no_grad():
        reference = copy.deepcopy(model).double()(x.double())
        fused = fusedlinear.fuse(model, precision="bf16x3")
        graphs = []

        def keep_graph(graph_module, example_inputs):
            graphs.append(graph_module)
            return graph_module.forward
        torch._dynamo.reset()
        compiled = torch.compile(fused, fullgraph=True, backend=keep_graph)
        step(name + " bf16x3 torch.compile(fullgraph=True)", lambda: check_close(
            name + " bf16x3 torch.compile(fullgraph=True)", compiled(x), reference, 1e-4))
        if graphs and split_ops_in(graphs[0].graph):
            print("FAIL  %s bf16x3 torch.compile: the graph splits W" % name)
            failures.append(name + " bf16x3 compiled graph splits W")
        inductor = torch.compile(fused, fullgraph=True)
        step(name + " bf16x3 torch.compile, inductor", lambda: check_close(
            name + " bf16x3 torch.compile, inductor", inductor(x), reference, 1e-4))

        def changed_in_place():
            for module in model.modules():
                if isinstance(module, nn.Linear):
                    module.weight.mul_(0.5)
            fusedlinear.refresh(compiled)  # torch.compile's wrapper, or the fused module
            want = copy.deepcopy(model).double()(x.double())
            check_close(name + " bf16x3 compiled, after an in-place change and refresh",
                        compiled(x), want, 1e-4)
            check_close(name + " bf16x3 inductor, after an in-place change and refresh",
                        inductor(x), want, 1e-4)
        step(name + " bf16x3 compiled, weights changed in place", changed_in_place)

        def loaded():
            other = copy.deepcopy(model)
            for parameter in other.parameters():
                parameter.copy_(torch.randn_like(parameter) * 0.1)
            fused.load_state_dict(other.state_dict())
            want = other.double()(x.double())
            check_close(name + " bf16x3 compiled, after fused.load_state_dict", compiled(x),
                        want, 1e-4)
            check_close(name + " bf16x3 inductor, after fused.load_state_dict", inductor(x),
                        want, 1e-4)
        step(name + " bf16x3 compiled, weights loaded", loaded)

        reference = copy.deepcopy(model).double()(x.double())
        check_exported(name + " bf16x3", fused, x, reference, 1e-4,
                       os.path.join(out, name + "_bf16x3.pt2"))


def bench_vit_mlp():
    """The ViT-B MLP block at 8192 tokens: each way's time and error against float64."""
    torch.backends.cuda.matmul.allow_tf32 = False  # PyTorch's default: float32 GEMMs
    torch.manual_seed(0)
    block = PreNormMLP(768, 3072).cuda().eval()
    x = torch.randn(8, 1024, 768, device="cuda")
    with torch.no_grad():
        reference = block.double()(x.double())
        block.float()
        torch._dynamo.reset()
        split_once = fusedlinear.fuse(block, precision="bf16x3")
        per_call = fusedlinear.fuse(block, precision="bf16x3", split="per_call")
        six = fusedlinear.fuse(block, precision="bf16x6")
        ways = [("eager (PyTorch, float32)", block),
                ("torch.compile(block)", torch.compile(block)),
                ("fuse(block, ieee)", fusedlinear.fuse(block)),
                ("fuse(block, bf16x3), W split once", split_once),
                ("fuse(block, bf16x3), W split per call", per_call),
                ("torch.compile(fuse(block, bf16x3)), W split once", torch.compile(split_once)),
                ("torch.compile(fuse(block, bf16x3)), W split per call", torch.compile(per_call)),
                ("fuse(block, bf16x6), W split once", six),
                ("torch.compile(fuse(block, bf16x6)), W split once", torch.compile(six))]
        rows = []
        for name, run in ways:
            error = (run(x).double() - reference).abs().max().item()
            rows.append((name, median_ms(lambda: run(x), 50, warmup=10), error))
    base = rows[1][1]
    print("\nViT-B MLP block, x + fc2(gelu(fc1(norm(x)))), x %s float32, %s, torch %s"
          % (list(x.shape), torch.cuda.get_device_name(), torch.__version__))
    print("| way | median ms | vs torch.compile | max abs error vs float64 |")
    print("| --- | --- | --- | --- |")
    for name, ms, error in rows:
        print("| %s | %.3f | %.2fx | %.2g |" % (name, ms, base / ms, error))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("library", help="libfusedlinear_ops.so")
    parser.add_argument("--runner", help="fusedlinear_pt2, to run the AOTInductor packages")
    parser.add_argument("--device", choices=("cpu", "cuda"),
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", help="folder for the AOTInductor packages (default: temporary)")
    parser.add_argument("--no-bench", action="store_true", help="skip the ViT-B MLP timing")
    args = parser.parse_args()
    global RUNNER
    RUNNER = args.runner
    if int(torch.__version__.split(".")[0]) < 2:
        print("skipped: torch %s; torch.compile and torch.export need torch 2" % torch.__version__)
        return SKIP
    importlib.import_module("torch._inductor")  # aoti_compile_and_package
    torch.ops.load_library(args.library)
    with tempfile.TemporaryDirectory(prefix="fuse-pt2-") as temporary:
        out = args.out or temporary
        os.makedirs(out, exist_ok=True)
        for name, (model, x, _, _) in models().items():
            check_model(name, model.to(args.device), x.to(args.device), out)
        for name, (model, x, _, _) in models().items():
            if name in ("pre_norm_mlp", "gated_feed_forward"):
                check_split_once(name, model.to(args.device), x.to(args.device), out)
    if args.device == "cuda" and not args.no_bench:
        step("ViT-B MLP bench", bench_vit_mlp)
    print("%d failed" % len(failures) if failures else "fuse on PyTorch 2: every check passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
