"""The models of a serving repository (examples/serving/build_repository.py), built here from
files, on whatever torch this is (1.13 or 2.x); what needs torch 2.6 (torch.export, AOTInductor)
runs on the GPU machine (.ci/gpu-check's serving step):

    python3 tests/python/serving_models.py LIBRARY

Every layered demo of weights/fx_chain.py and a model of one Linear, saved with save_with_chain,
and the reference models' files (weights/export.py): the script's models_of builds the plain
PyTorch model and the model written with the ops (a layered model: one call of the whole-model
op); the ops model's output against the plain model's and, for a demo, against the demo module's
own; the TorchScript module as write_torchscript writes it, loaded back and run. Then refusals:
a file that names no model, and the command line (--help, a bad --rows). One line a check; exits
non-zero on the first failure.
"""
import argparse
import contextlib
import importlib.util
import io
import os
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "examples", "serving", "build_repository.py")
TOLERANCE = 1e-5


def load_script():
    spec = importlib.util.spec_from_file_location("build_repository", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(what, ok, detail=""):
    print(("ok    " if ok else "FAIL  ") + what + (": " + detail if detail else ""))
    if not ok:
        raise SystemExit(1)


def difference(a, b):
    return (a.double() - b.double()).abs().max().item()


def check_models(repository, path, want_name, demo=None, model=None):
    """models_of(path) against the plain model and `demo` (the module the file was saved from),
    then its TorchScript module loaded back."""
    name, reference, fused, in_features, out_features = repository.models_of(path, model)
    check("%s: named %s" % (os.path.basename(path), name), name == want_name, name)
    torch.manual_seed(1)
    x = torch.rand(7, in_features)
    with torch.no_grad():
        want = reference(x)
        got = fused(x)
        check("%s: %s -> %s, ops model against PyTorch" % (name, in_features, out_features),
              got.shape == (7, out_features) and difference(got, want) <= TOLERANCE,
              "max abs difference %.3g" % difference(got, want))
        if demo is not None:
            check("%s: the plain model against the module saved" % name,
                  difference(want, demo(x)) <= TOLERANCE)
        with tempfile.TemporaryDirectory() as folder:
            script_path = os.path.join(folder, "model.pt")
            repository.write_torchscript(fused, script_path)
            scripted = torch.jit.load(script_path)
            for rows in (1, 7):  # the server batches requests of up to --rows rows
                got = scripted(x[:rows])
                check("%s: TorchScript, %d rows" % (name, rows),
                      difference(got, want[:rows]) <= TOLERANCE,
                      "max abs difference %.3g" % difference(got, want[:rows]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("library")
    args = parser.parse_args()
    torch.ops.load_library(args.library)
    repository = load_script()  # puts weights/ and tests/python/ on the path
    import fx_chain

    with tempfile.TemporaryDirectory() as folder:
        demos = [name for name in fx_chain.DEMOS
                 if not fx_chain.chain_spec(fx_chain.build_demo(name, 4, 3))[0]]
        demos.append("gelu_dropout_silu")  # one Linear: a layered spec of one layer
        for name in demos:
            torch.manual_seed(0)
            demo = fx_chain.build_demo(name).eval()
            path = os.path.join(folder, name + ".pt")
            fx_chain.save_with_chain(demo, path)
            check_models(repository, path, name, demo=demo)

        code = subprocess.call([sys.executable, os.path.join(ROOT, "weights", "export.py"),
                                "--model", "all", "--batch", "4", "--in-features", "24",
                                "--out-features", "16", "--out", folder],
                               stdout=subprocess.DEVNULL)
        check("weights/export.py wrote the reference models", code == 0)
        check_models(repository, os.path.join(folder, "swish_chain.pt"), "swish_chain")
        check_models(repository, os.path.join(folder, "mish_mish.pt"), "mish_mish",
                     model="mish_mish")

        # A Linear's keys alone name no model: refused in one line, nothing built.
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            try:
                repository.models_of(os.path.join(folder, "mish_mish.pt"))
                code = 0
            except SystemExit as exit:
                code = exit.code
        message = stderr.getvalue()
        check("a file naming no model is refused", code == 2 and message.count("\n") == 1
              and "pass --model" in message, message.strip())

    result = subprocess.run([sys.executable, SCRIPT, "--help"], capture_output=True, text=True)
    check("--help", result.returncode == 0 and "--name" in result.stdout)
    result = subprocess.run([sys.executable, SCRIPT, "w.pt", "out", "--ops", "x.so", "--rows",
                             "0"], capture_output=True, text=True)
    check("--rows 0 is refused", result.returncode == 2 and "--rows" in result.stderr,
          result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "")
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
