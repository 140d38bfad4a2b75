"""Every demo chain through fusedlinear's command line, against PyTorch's output.

    /usr/bin/python3 tests/python/chain_round_trip.py --exporter weights/fx_chain.py \\
        --cli build/fusedlinear --work /tmp/chains [--demo NAME ...] [--atol 1e-5] \\
        [--cli-args "--device cpu"]

For each demo model of weights/fx_chain.py (or each --demo) this writes WORK/NAME.pt (the
weights with the chain spec), WORK/NAME_input.pt (torch.rand(5, in_features)) and
WORK/NAME_output.pt (PyTorch's output), at batch 5 and 64 -> 48 features (mynet 512 -> 256),
replacing earlier files, then runs

    CLI run --weights WORK/NAME.pt --input WORK/NAME_input.pt --output WORK/NAME_fused.pt

and compares WORK/NAME_fused.pt with PyTorch's output: one line per model, `ok` when the shapes
agree and the max abs difference is at most --atol (float32), `FAIL` with the reason otherwise.
Exits 0 when every model passes, 1 otherwise.
"""
import argparse
import importlib.util
import os
import shlex
import subprocess
import sys

import torch


def load_exporter(path):
    spec = importlib.util.spec_from_file_location("fx_chain", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_cli(cli, extra, weights, x, out):
    """Runs the CLI's `run`; returns None on success, else a one-line reason."""
    if os.path.exists(out):
        os.unlink(out)
    command = [cli, "run", "--weights", weights, "--input", x, "--output", out] + extra
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as error:
        return "could not run %s: %s" % (cli, error)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        return "exit %d: %s" % (result.returncode, lines[-1] if lines else "(no output)")
    if not os.path.exists(out):
        return "exit 0 but no %s" % out
    return None


def compare(fused_path, want_path, atol):
    """(ok, what): the fused output against PyTorch's."""
    fused, want = torch.load(fused_path), torch.load(want_path)
    if not isinstance(fused, torch.Tensor):
        return False, "%s holds a %s, not a tensor" % (fused_path, type(fused).__name__)
    if fused.shape != want.shape:
        return False, "shape %s, PyTorch's %s" % (list(fused.shape), list(want.shape))
    if fused.dtype != want.dtype:
        return False, "dtype %s, PyTorch's %s" % (fused.dtype, want.dtype)
    difference = (fused.double() - want.double()).abs()
    if torch.isnan(difference).any():
        return False, "%d NaN differences" % int(torch.isnan(difference).sum())
    largest = difference.max().item() if difference.numel() else 0.0
    return largest <= atol, "max abs difference %.3g" % largest


def round_trip(fx, name, args, extra):
    linear, spec, (weights, x, want) = fx.export_demo(name, args.work, batch=args.batch,
                                                      seed=args.seed, overwrite=True)
    fused = os.path.join(args.work, name + "_fused.pt")
    failure = run_cli(args.cli, extra, weights, x, fused)
    ok, what = (False, failure) if failure else compare(fused, want, args.atol)
    print("%-5s %-20s %s: %s" % ("ok" if ok else "FAIL", name, spec, what), flush=True)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exporter", required=True, help="path of weights/fx_chain.py")
    parser.add_argument("--cli", required=True, help="path of the fusedlinear program")
    parser.add_argument("--work", required=True, help="folder for the files (created if missing)")
    parser.add_argument("--demo", action="append", help="only this demo (repeatable)")
    parser.add_argument("--atol", type=float, default=1e-5, help="default 1e-5")
    parser.add_argument("--batch", type=int, default=5, help="rows of the input (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="default 0")
    parser.add_argument("--cli-args", default="", help="more arguments for `run`, one string")
    args = parser.parse_args()
    fx = load_exporter(args.exporter)
    names = args.demo or list(fx.DEMOS)
    unknown = [name for name in names if name not in fx.DEMOS]
    if unknown:
        parser.error("no demo %s; the demos: %s" % (", ".join(unknown), ", ".join(fx.DEMOS)))
    os.makedirs(args.work, exist_ok=True)
    extra = shlex.split(args.cli_args)
    passed = sum(round_trip(fx, name, args, extra) for name in names)
    print("%d of %d chains within %g of PyTorch" % (passed, len(names), args.atol))
    return 0 if passed == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
