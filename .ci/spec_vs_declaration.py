"""Times each reference model's compiled declaration against the same chain given as a spec
(`--chain`), compiled at run time by NVRTC and interpreted, in turns of whole `fusedlinear bench`
runs: the whole forward in every precision at each batch, and its error against float64. Each
turn takes the three ways in another order (declaration first, then compiled first, ...).

Usage: python3 .ci/spec_vs_declaration.py FUSEDLINEAR OUTPUT_FOLDER [TURNS] [BATCHES] [-- BENCH ARGS]
       (defaults: 3 turns, batches 1,8,64,1024; BENCH ARGS are added to every run, e.g. the
       shape on a CPU: --in-features 256 --out-features 256)
Prints, per model, dtype, batch and precision: the median over turns of each run's median forward,
the spec's time over the declaration's, and the largest error against float64 of each.
"""
import json
import os
import statistics
import subprocess
import sys

MODELS = {  # each reference model's chain as a spec (docs/CHAINS.md)
    "swish_chain": "add(add_value),swish,tanh,gelu,hardtanh(-1,1)",
    "mish_mish": "mish,mish",
}
WAYS = (("declaration", []), ("compiled", ["--jit", "on"]), ("interpreted", ["--jit", "off"]))


def bench(binary, args, path):
    command = [binary, "bench", "--precision", "all", "--json", path] + args
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit("spec_vs_declaration: %s failed: %s" % (" ".join(command), done.stderr.strip()))
    with open(path) as f:
        return json.load(f)["results"]


def main(binary, folder, turns, batches, extra):
    os.makedirs(folder, exist_ok=True)
    times, errors = {}, {}
    for turn in range(turns):
        # Each turn starts from another way, so that a drift within a turn (the GPU warming up
        # under the 16-bit GEMMs) favours none of them.
        ways = WAYS[turn % len(WAYS):] + WAYS[:turn % len(WAYS)]
        for model, spec in MODELS.items():
            for way, way_args in ways:
                given = ["--model", model] if way == "declaration" else ["--chain", spec]
                path = os.path.join(folder, "%s-%s-%d.json" % (model, way, turn))
                for r in bench(binary, given + way_args + ["--batches", batches] + extra, path):
                    for fused in r["fused"]:
                        key = (model, r["dtype"], r["batch"], fused["precision"])
                        times.setdefault(key + (way,), []).append(
                            fused["timings"]["forward"]["median_us"])
                        error = fused["vs_float64"]["max_abs"]
                        errors[key + (way,)] = max(errors.get(key + (way,), 0.0), error)
    print("%-12s %-9s %6s %-7s %12s %12s %12s %9s %9s %10s %10s %10s" % (
        "model", "dtype", "batch", "prec", "decl us", "compiled us", "interp us", "comp x", "interp x",
        "err decl", "err comp", "err interp"))
    for key in sorted({k[:4] for k in times}):
        us = {way: statistics.median(times[key + (way,)]) for way, _ in WAYS}
        print("%-12s %-9s %6d %-7s %12.2f %12.2f %12.2f %9.3f %9.3f %10.2e %10.2e %10.2e" % (
            key + (us["declaration"], us["compiled"], us["interpreted"],
                   us["compiled"] / us["declaration"], us["interpreted"] / us["declaration"],
                   errors[key + ("declaration",)], errors[key + ("compiled",)],
                   errors[key + ("interpreted",)])))


if __name__ == "__main__":
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    if len(args) < 2:
        sys.exit(__doc__)
    main(args[0], args[1], int(args[2]) if len(args) > 2 else 3,
         args[3] if len(args) > 3 else "1,8,64,1024", extra)
