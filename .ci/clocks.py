#!/usr/bin/env python3
"""The reference shape's tensor-core forwards timed two ways, with the SM clock and the board's
power sampled beside them (nvidia-smi): back to back (each alone, for --seconds) and in turns with
a float32 GEMM (cuBLAS's SGEMM, as in `fusedlinear bench`'s forwards, which take turns with the
float32 paths); on the reference inputs (x = rand, W as nn.Linear draws it) and on inputs of few
bits (every value exact in bfloat16: bf16x3's small parts all zero). Shows how much of a time is
the clock, and what nvidia-smi says holds the clock down.

  python3 .ci/clocks.py LIBRARY [--rows 1024] [--features 8192] [--seconds 2]

LIBRARY: the ops library (build-gpu/libfusedlinear_ops.so). Needs an sm_90 GPU and nvidia-smi.
"""
import argparse
import datetime
import statistics
import subprocess
import threading
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("library")
p.add_argument("--rows", type=int, default=1024)
p.add_argument("--features", type=int, default=8192)
p.add_argument("--seconds", type=float, default=2.0)
args = p.parse_args()
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    raise SystemExit("clocks.py: needs a GPU of compute capability 9.0 (the Hopper GEMM's)")
torch.ops.load_library(args.library)
ops = torch.ops.fusedlinear
torch.backends.cuda.matmul.allow_tf32 = False


# The clock's event reasons (nvidia-smi --help-query-gpu, clocks_event_reasons.*), by bit.
REASONS = {0x4: "power cap", 0x8: "hw slowdown", 0x20: "sw thermal", 0x40: "hw thermal",
           0x80: "power brake"}


class Sampler:
    """nvidia-smi's samples, every 20 ms, of the SM clock (MHz), the board's power (W), the
    temperature (C) and why the clock is held below its maximum."""

    def __init__(self):
        self.samples = []  # (time.time(), MHz, W, C, reasons)
        query = None
        for reasons in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):  # new, old
            candidate = "timestamp,clocks.sm,power.draw,temperature.gpu," + reasons
            if subprocess.run(["nvidia-smi", "--query-gpu=" + candidate, "--format=csv"],
                              capture_output=True).returncode == 0:
                query = candidate
                break
        if query is None:
            raise SystemExit("clocks.py: nvidia-smi cannot report the clocks' reasons here")
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=" + query, "--format=csv,noheader,nounits", "-lms", "20"],
            stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        for line in self.proc.stdout:
            fields = [f.strip() for f in line.split(",")]
            try:
                stamp = datetime.datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                self.samples.append((stamp, float(fields[1]), float(fields[2]), float(fields[3]),
                                     int(fields[4], 16)))
            except (ValueError, IndexError):
                pass

    def over(self, start, end):
        """Means of clock, power and temperature over the middle 60% of [start, end] (the ramps
        left out), and the reasons in at least half of its samples."""
        lo, hi = start + 0.2 * (end - start), end - 0.2 * (end - start)
        inside = [s for s in self.samples if lo <= s[0] <= hi]
        if not inside:
            return float("nan"), float("nan"), float("nan"), "no samples"
        reasons = [name for bit, name in REASONS.items()
                   if 2 * sum(1 for s in inside if s[4] & bit) >= len(inside)]
        return (statistics.mean(s[1] for s in inside), statistics.mean(s[2] for s in inside),
                statistics.mean(s[3] for s in inside), "+".join(reasons) or "none")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def inputs(few_bits):
    """Rotating inputs (four x, 4 x 32 MB at the reference shape: more than L2) and one W, b."""
    k, n = args.features, args.features
    torch.manual_seed(0)
    xs = [torch.rand(args.rows, k, device="cuda") for _ in range(4)]
    lin = torch.nn.Linear(k, n, device="cuda")
    w, b = lin.weight.detach(), lin.bias.detach()
    if few_bits:  # multiples of 1/8 and of 2^-10: exact in bfloat16
        xs = [torch.round(x * 8) / 8 for x in xs]
        w = torch.round(w * 1024) / 1024
    return xs, w, b


def workloads(few_bits):
    xs, w, b = inputs(few_bits)
    hi, lo = ops.split_bf16(w)
    xb = [x.bfloat16() for x in xs]
    wb, bb = w.bfloat16(), b.bfloat16()
    return xs, w, {
        "bf16x3 forward, Hopper GEMM": lambda i: ops.gemm_epilogue(
            xs[i % 4], hi, lo, b, None, "mish_mish", "bf16x3"),
        "bf16x3 forward, cuBLAS": lambda i: ops.epilogue(
            ops.linear_bf16x3(xs[i % 4], hi, lo), b, [], "mish_mish"),
        "bfloat16 forward, Hopper GEMM": lambda i: ops.gemm_epilogue(
            xb[i % 4], wb, None, bb, None, "mish_mish", "ieee"),
        "bfloat16 forward, cuBLAS": lambda i: ops.epilogue(
            torch.mm(xb[i % 4], wb.t()), bb, [], "mish_mish"),
        "cuBLAS bf16 GEMM alone": lambda i: torch.mm(xb[i % 4], wb.t()),
    }


def timed(fns, calls):
    """Each fn of fns called in turns, calls times each, CUDA events around each call (all queued,
    then one sync); returns each fn's times in us and the wall-clock span of the run."""
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
               for _ in range(calls)] for _ in fns]
    torch.cuda.synchronize()
    start = time.time()
    for i in range(calls):
        for f, fn in enumerate(fns):
            events[f][i][0].record()
            fn(i)
            events[f][i][1].record()
    torch.cuda.synchronize()
    end = time.time()
    return [[1000.0 * a.elapsed_time(z) for a, z in e] for e in events], start, end


sampler = Sampler()
limits = subprocess.run(["nvidia-smi", "--query-gpu=name,power.limit,clocks.max.sm",
                         "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
print("clocks.py: %s; torch %s; %d x %d -> %d, mish_mish" %
      (limits, torch.__version__, args.rows, args.features, args.features))
print("%-31s %-9s %-9s %9s %9s %7s %5s %4s %8s %s" % (
    "workload", "inputs", "timed", "median us", "p10-p90", "SM MHz", "W", "C", "Mcycles",
    "clock held by"))
for few_bits in (False, True):
    xs, w, loads = workloads(few_bits)
    sgemm = lambda i: torch.mm(xs[i % 4], w.t())  # noqa: E731 (float32, CUDA cores)
    for name, fn in loads.items():
        for regime in ("alone", "in turns"):
            fns = [fn] if regime == "alone" else [fn, sgemm]
            probe, _, _ = timed(fns, 5)
            per_round = sum(statistics.median(t) for t in probe) * 1e-6
            calls = max(20, int(args.seconds / per_round))
            times, start, end = timed(fns, calls)
            mhz, watts, celsius, reasons = sampler.over(start, end)
            t = sorted(times[0])
            median = statistics.median(t)
            # In turns the clock is the mix's, not this workload's: no cycles then.
            cycles = "%.3f" % (median * mhz * 1e-6) if regime == "alone" else "-"
            print("%-31s %-9s %-9s %9.1f %9s %7.0f %5.0f %4.0f %8s %s" % (
                name, "few bits" if few_bits else "reference", regime, median,
                "%.0f-%.0f" % (t[len(t) // 10], t[len(t) * 9 // 10]), mhz, watts, celsius, cycles,
                reasons), flush=True)
sampler.stop()
print("SM MHz, W, C: nvidia-smi's means over the middle 60% of each run (samples every 20 ms); "
      "Mcycles (alone only): median us x SM MHz; clock held by: the reasons nvidia-smi gives in "
      "half the samples or more")
