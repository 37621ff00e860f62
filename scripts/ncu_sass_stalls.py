#!/usr/bin/env python3
"""Summarises ncu's source page (`ncu --import R --page source --csv --print-source sass`): the
warp-state samples (PC sampling) of each SASS instruction, grouped by opcode and listed for the
instructions that hold most of them, with the stall-reason columns ncu gives per instruction;
with --details, the details page's scheduler, warp-state, pipe and speed-of-light metrics.
An instruction stalled on the long scoreboard waits for a global / local / texture load: for each
listed one, the nearest earlier instruction in the listing that writes one of its source registers
is named when it is such a load ("waits on"), so that the load to hoist is found without reading
the SASS by hand; when the nearest writer is not a load (a loop-carried value, say), nothing is
claimed.

Usage: ncu_sass_stalls.py SASS.csv [--details DETAILS.csv] [--top N]
"""
import argparse
import csv
import re
import sys
from collections import defaultdict

from sass_opcodes import opcode  # the opcode of one SASS line, predicate and modifiers dropped


def number(text):
    """A metric cell as a float ('1,234.5' -> 1234.5); None when it is not a number."""
    t = (text or "").replace(",", "").strip()
    try:
        return float(t)
    except ValueError:
        return None


def read_sass(path):
    """(header, rows) of the source page: rows are dicts; the header row is the first whose
    cells name a source/SASS column (ncu may print a few lines before the table)."""
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    for i, row in enumerate(lines):
        if any(c.strip() in ("Source", "SASS") for c in row):
            header = [c.strip() for c in row]
            rows = [dict(zip(header, r)) for r in lines[i + 1:] if len(r) == len(header)]
            return header, rows
    raise SystemExit(f"{path}: no source table (a header with a 'Source' column) found")


REG = re.compile(r"\bR(\d+)\b")
# Loads whose results the long scoreboard tracks (global, local, generic, texture, constant-cache
# LDG.CONSTANT is LDG); LDS / LDSM are short-scoreboard and not named here.
LONG_LOADS = ("LDG", "LDL", "LD", "TEX", "TLD", "ATOMG", "ATOM", "LDC")
NO_DEST = ("ST", "STG", "STS", "STL", "RED", "REDG", "BRA", "BSYNC", "BSSY", "EXIT", "BAR", "LDGSTS", "DEPBAR",
           "LDGDEPBAR", "CALL", "RET", "NOP", "YIELD", "WARPSYNC", "MEMBAR", "ERRBAR", "CCTL")


def split_instr(instr):
    """(opcode with its modifiers, operand strings) of one SASS line, predicate dropped."""
    text = re.sub(r"^@!?U?P\w+\s+", "", instr.strip()).rstrip(" ;")
    head, _, rest = text.partition(" ")
    return head, [o.strip() for o in rest.split(",")] if rest.strip() else []


def operands(instr):
    """(opcode without modifiers, operand strings) of one SASS line, predicate dropped."""
    head, ops = split_instr(instr)
    return head.split(".")[0], ops


def written_regs(instr):
    """Registers an instruction writes: its first operand's register, widened for vector loads
    (.64: 2, .128: 4); none for stores, branches, barriers and copies into shared memory."""
    op, ops = operands(instr)
    if op in NO_DEST or not ops:
        return set()
    m = re.fullmatch(r"R(\d+)", ops[0])
    if not m:
        return set()
    head = split_instr(instr)[0]
    width = 4 if ".128" in head else 2 if ".64" in head else 1
    return set(range(int(m.group(1)), int(m.group(1)) + width))


def read_regs(instr):
    """Registers named among an instruction's source operands (the first operand too for opcodes
    that write none)."""
    op, ops = operands(instr)
    srcs = ops if op in NO_DEST else ops[1:]
    return {int(r) for o in srcs for r in REG.findall(o)}


def producer_load(rows, src, i, window=64):
    """The nearest earlier row (within window rows) that writes a register rows[i] reads, when
    that row is a long-scoreboard load: (row, distance); else None."""
    need = read_regs(rows[i][src])
    if not need:
        return None
    for j in range(i - 1, max(-1, i - 1 - window), -1):
        w = written_regs(rows[j][src])
        if w & need:
            return (rows[j], i - j) if operands(rows[j][src])[0] in LONG_LOADS else None
    return None


def summarise_sass(path, top):
    header, rows = read_sass(path)
    src = "Source" if "Source" in header else "SASS"
    all_col = next((h for h in header if h.startswith("Warp Stall Sampling (All")), None)
    notissued_col = next((h for h in header if h.startswith("Warp Stall Sampling (Not")), None)
    exec_col = next((h for h in header if h.startswith("Instructions Executed")), None)
    reason_cols = [h for h in header if h.lower().startswith("stall_") or re.match(r"^smsp__pcsamp_warps_issue_stalled", h)]
    if all_col is None:
        raise SystemExit(f"{path}: no 'Warp Stall Sampling (All Samples)' column; columns: {header}")
    total = sum(number(r[all_col]) or 0.0 for r in rows)
    if total <= 0:
        raise SystemExit(f"{path}: no samples")
    print(f"{path}: {len(rows)} SASS lines, {total:.0f} samples")
    by_op = defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in rows:
        o = by_op[opcode(r[src], full=False)]
        o[0] += number(r[all_col]) or 0.0
        o[1] += (number(r.get(notissued_col, "")) or 0.0) if notissued_col else 0.0
        o[2] += (number(r.get(exec_col, "")) or 0.0) if exec_col else 0.0
    print(f"{'opcode':<12} {'samples %':>9} {'not issued %':>12} {'warp instr.':>12}")
    for op, (s, n, e) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{op:<12} {100 * s / total:9.1f} {100 * n / total:12.1f} {e:12.0f}")
    print(f"\ninstructions holding the most samples (% of all; the largest stall-reason columns):")
    ranked = sorted(range(len(rows)), key=lambda i: -(number(rows[i][all_col]) or 0.0))[:top]
    long_sb = next((c for c in reason_cols if c in ("stall_long_sb", "smsp__pcsamp_warps_issue_stalled_long_scoreboard")), None)
    for i in ranked:
        r = rows[i]
        s = number(r[all_col]) or 0.0
        reasons = sorted(((number(r[c]) or 0.0, c) for c in reason_cols), reverse=True)[:3]
        why = ", ".join(f"{c.replace('stall_', '')} {100 * v / total:.1f}" for v, c in reasons if v > 0)
        addr = r.get("Address", r.get("# Address", ""))
        print(f"{100 * s / total:5.1f}  {addr:>6} {r[src].strip()[:60]:<60} {why}")
        if long_sb and (number(r.get(long_sb, "")) or 0.0) >= 0.5 * s > 0:
            found = producer_load(rows, src, i)
            if found:
                load, back = found
                laddr = load.get("Address", load.get("# Address", ""))
                print(f"{'':7}waits on {laddr} {load[src].strip()[:60]} ({back} lines earlier)")


def summarise_details(path):
    wanted = ("Scheduler Statistics", "Warp State Statistics", "Compute Workload Analysis", "GPU Speed Of Light Throughput")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return
    print(f"\n{path}:")
    for r in rows:
        section = r.get("Section Name", "")
        if any(section.startswith(w) for w in wanted) and r.get("Metric Name"):
            print(f"  {section[:28]:<28} {r['Metric Name'][:48]:<48} {r.get('Metric Value', ''):>14} {r.get('Metric Unit', '')}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sass")
    ap.add_argument("--details")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    summarise_sass(a.sass, a.top)
    if a.details:
        summarise_details(a.details)


if __name__ == "__main__":
    sys.exit(main())
