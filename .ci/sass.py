#!/usr/bin/env python3
"""SASS of the fused epilogue kernels, per kernel: its instructions and an opcode histogram.

Usage: .ci/sass.py BINARY [REGEX ...]
Runs `cuobjdump -sass BINARY`, demangles each kernel's name, and for those whose demangled name
matches every REGEX prints the name, the instruction count, the opcode histogram and the
listing (without addresses and encodings), so kernels can be compared line by line.
"""
import collections
import re
import subprocess
import sys


def kernels(binary):
    text = subprocess.run(["cuobjdump", "-sass", binary], capture_output=True, text=True,
                          check=True).stdout
    name, body = None, []
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);?\s*/\*", line)
        if name and m:
            body.append(m.group(1).strip())
    if name:
        yield name, body


def main():
    binary, patterns = sys.argv[1], sys.argv[2:]
    for mangled, body in kernels(binary):
        name = subprocess.run(["c++filt", mangled], capture_output=True, text=True).stdout.strip()
        name = name.replace("fusedlinear::", "").replace("(anonymous namespace)::", "")
        if not all(re.search(p, name) for p in patterns):
            continue
        ops = collections.Counter()
        for ins in body:
            op = re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0] if ins else ""
            ops[op] += 1
        print(f"=== {name}\n{len(body)} instructions")
        print("  ".join(f"{op}:{n}" for op, n in ops.most_common()))
        for ins in body:
            print("   ", ins)


if __name__ == "__main__":
    main()
