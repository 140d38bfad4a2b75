"""The pip package: installed from the checkout, imported, and refused under another torch.

    python3 tests/python/package_install.py SOURCE_DIR [--cmake-build-dir DIR]

Runs `python3 -m pip install --no-build-isolation --no-deps --target TMP SOURCE_DIR` (with
--cmake-build-dir, setup.py builds the ops in that configured build instead of configuring its
own: FUSEDLINEAR_CMAKE_BUILD_DIR), then in fresh processes: `import fusedlinear` from TMP loads
the ops (torch.ops.fusedlinear.*, a layered model through fuse and through the op), and a copy
whose recorded torch version is another is refused with a one-line ImportError. Exits 77 (a
skip) when this python has no pip, setuptools or wheel; non-zero on a failure.
"""
import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77

IMPORTED = r"""
import os, sys, torch
import fusedlinear
from fusedlinear import _build_info
assert os.path.dirname(fusedlinear.__file__) == os.path.join(sys.argv[1], "fusedlinear"), \
    fusedlinear.__file__
assert _build_info.TORCH_VERSION == torch.__version__, _build_info.TORCH_VERSION
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
x = torch.randn(5, 16)
with torch.no_grad():
    fused = fusedlinear.fuse(model)
    assert torch.allclose(fused(x), model(x), atol=1e-5, rtol=1e-5)
    weights, biases, params, spec = fusedlinear.op_arguments(model.state_dict(), "0:gelu|2")
    y = torch.ops.fusedlinear.model(x, weights, biases, params, spec, "ieee")
    assert torch.allclose(y, model(x), atol=1e-5, rtol=1e-5)
print("imported fusedlinear %s from %s (torch %s): %s"
      % (fusedlinear.__version__, fusedlinear.__file__, torch.__version__,
         fused.fusion_report.fused))
"""


def fail(what):
    raise SystemExit("FAIL  " + what)


def run(command, shown=None, **kwargs):
    print("$ " + " ".join(shown or command), flush=True)
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, **kwargs)


def python(code, *args, path):
    """python3 -c code in a fresh process that finds packages in `path` (run in it, so that no
    checkout's files are on its sys.path)."""
    environment = dict(os.environ, PYTHONPATH=path)
    return run([sys.executable, "-c", code] + list(args), env=environment, cwd=path,
               shown=[sys.executable, "-c", code.strip().splitlines()[0] + "..."] + list(args))


def check_version_refused(target, folder):
    """A copy of the installed package whose record names another torch: one line, ImportError."""
    copy = os.path.join(folder, "other-torch")
    shutil.copytree(target, copy)
    record = os.path.join(copy, "fusedlinear", "_build_info.py")
    with open(record) as file:
        text = file.read()
    with open(record, "w") as file:
        file.write(text.replace("TORCH_VERSION = ", "TORCH_VERSION = '0.1.0'  # ", 1))
    result = python("import fusedlinear", path=copy)
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    if result.returncode == 0 or not last.startswith("ImportError: fusedlinear: its ops were "
                                                     "built against torch 0.1.0, and this is"):
        fail("another torch's package imported, or said: %s" % result.stdout)
    print("ok    another torch's package: " + last)


def check_version_rule():
    """The rule itself: the release must match; torch's local part (+cu124) may differ."""
    spec = importlib.util.spec_from_file_location(
        "library", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "weights",
                                "fusedlinear", "_library.py"))
    library = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(library)
    library.check_torch_version("2.5.1+cu124", "2.5.1+cu121")
    library.check_torch_version("1.13.0a0+gitunknown", "1.13.0a0+gitunknown")
    for built, running in (("2.5.1", "2.6.0"), ("1.13.0a0", "1.13.1")):
        try:
            library.check_torch_version(built, running)
            fail("torch %s taken for %s" % (running, built))
        except ImportError as error:
            if "\n" in str(error):
                fail("a message of more than one line: %s" % error)
    print("ok    the version rule")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="the checkout (where pyproject.toml is)")
    parser.add_argument("--cmake-build-dir", help="a configured CMake build of the checkout")
    args = parser.parse_args()
    missing = [m for m in ("pip", "setuptools", "wheel") if importlib.util.find_spec(m) is None]
    if missing:
        print("skipped: %s has no %s (Debian: python3-pip, python3-setuptools, python3-wheel)"
              % (sys.executable, ", ".join(missing)))
        return SKIP
    check_version_rule()
    environment = dict(os.environ)
    if args.cmake_build_dir:
        environment["FUSEDLINEAR_CMAKE_BUILD_DIR"] = os.path.abspath(args.cmake_build_dir)
    with tempfile.TemporaryDirectory(prefix="fusedlinear-pip-") as folder:
        target = os.path.join(folder, "target")
        result = run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                      "--no-index", "--target", target, args.source], env=environment)
        print(result.stdout)
        if result.returncode != 0:
            fail("pip install exited %d" % result.returncode)
        result = python(IMPORTED, target, path=target)
        print(result.stdout)
        if result.returncode != 0:
            fail("import fusedlinear from the installed package")
        check_version_refused(target, folder)
    print("package: installed, imported, another torch refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
