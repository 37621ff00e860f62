#!/usr/bin/env python3
"""Counts the SASS instructions of chosen kernels by opcode: what ptxas made of a kernel (e.g.
whether an FP8 mma.sync became FP8 tensor-core instructions or conversions and F16 HMMAs).

Input: a CUDA object file or cubin (disassembled with cuobjdump -xelf and nvdisasm, from the
toolkit or the PyPI packages nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm, whose bin folders may
be named with --tools), or a text file nvdisasm already wrote (--sass).
Usage: sass_opcodes.py OBJ [--kernel REGEX] [--arch sm_90] [--tools DIR] [--full-opcodes]
       sass_opcodes.py --sass FILE.sass [--kernel REGEX]
Prints, for each kernel whose mangled name matches REGEX, its instruction count and the count of
each opcode (modifiers dropped unless --full-opcodes), largest first.
"""
import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

FUNC = re.compile(r"^\s*\.text\.(\S+?):\s*$")
INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")


def split_functions(sass_text):
    """{mangled name: [instruction text]} from nvdisasm's output."""
    funcs, name = {}, None
    for line in sass_text.splitlines():
        m = FUNC.match(line)
        if m:
            name = m.group(1)
            funcs[name] = []
            continue
        m = INSTR.search(line)
        if m and name is not None:
            funcs[name].append(m.group(1))
    return funcs


def opcode(instr, full):
    words = instr.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    if not words:
        return "?"
    return words[0] if full else words[0].split(".")[0]


def tool(name, dirs):
    for d in dirs:
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    p = shutil.which(name)
    if p is None:
        sys.exit(f"{name} not found: install the toolkit's, or `pip install nvidia-cuda-cuobjdump "
                 f"nvidia-cuda-nvdisasm` and name their bin folder with --tools")
    return p


def disassemble(obj, arch, dirs):
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([tool("cuobjdump", dirs), "-xelf", "all", os.path.abspath(obj)], cwd=tmp, check=True,
                       capture_output=True)
        cubins = sorted(glob.glob(os.path.join(tmp, f"*{arch}*.cubin"))) or sorted(glob.glob(os.path.join(tmp, "*.cubin")))
        if not cubins:
            sys.exit(f"{obj}: no cubin for {arch}")
        return "\n".join(subprocess.run([tool("nvdisasm", dirs), "-c", c], check=True, capture_output=True,
                                        text=True).stdout for c in cubins)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("obj", nargs="?")
    ap.add_argument("--sass", help="nvdisasm output to read instead of an object file")
    ap.add_argument("--kernel", default=".", help="regular expression over the mangled kernel names")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--tools", action="append", default=[], help="folder holding cuobjdump and nvdisasm")
    ap.add_argument("--full-opcodes", action="store_true", help="keep the opcodes' modifiers")
    a = ap.parse_args()
    if a.sass:
        text = open(a.sass).read()
    elif a.obj:
        text = disassemble(a.obj, a.arch, a.tools)
    else:
        ap.error("an object file or --sass")
    funcs = {n: ins for n, ins in split_functions(text).items() if re.search(a.kernel, n)}
    if not funcs:
        sys.exit(f"no kernel matches {a.kernel!r}")
    for name, ins in sorted(funcs.items()):
        counts = collections.Counter(opcode(i, a.full_opcodes) for i in ins)
        print(f"{name}: {len(ins)} instructions")
        print("  " + ", ".join(f"{op} {n}" for op, n in counts.most_common()))


if __name__ == "__main__":
    main()
