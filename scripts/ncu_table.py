#!/usr/bin/env python3
"""Prints an `ncu --csv --page raw` file (scripts/gpu-quick.sh's NCU=1 and NCU_PROMPT=1,
scripts/gpu-ncu-products.sh): one line per kernel launch with its metrics, each value followed by
its unit from ncu's units row, or with --sum the total time per kernel name, largest first.

Usage: ncu_table.py FILE.csv [--sum]"""
import collections
import csv
import sys

METRICS = [("time", "gpu__time_duration.sum"), ("dram%", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
           ("l1%", "l1tex__throughput.avg.pct_of_peak_sustained_active"),
           ("sm%", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
           ("warps%", "sm__warps_active.avg.pct_of_peak_sustained_active"), ("grid", "launch__grid_size"),
           ("blk", "launch__block_size"), ("regs", "launch__registers_per_thread"), ("dram_read", "dram__bytes_read.sum"),
           ("L2sect", "lts__t_sectors_srcunit_tex_op_read.sum"),
           ("L2miss", "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum")]


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    hdr = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
    if hdr is None:
        print("no ncu rows")
        return
    h = rows[hdr]
    col = lambda r, name: r[h.index(name)] if name in h else "-"
    if "--sum" in sys.argv[2:]:
        t = collections.OrderedDict()
        for r in rows[hdr + 2:]:
            name = col(r, "Kernel Name")[:70]
            n, tot = t.get(name, (0, 0.0))
            t[name] = (n + 1, tot + float(col(r, "gpu__time_duration.sum").replace(",", "")) / 1e3)
        for name, (n, tot) in sorted(t.items(), key=lambda kv: -kv[1][1]):
            print(f"{tot:10.1f} us  {n:4d} calls {tot / n:8.2f} us/call  {name}")
        return
    units = rows[hdr + 1]  # ncu's second row: each metric's unit (ns, byte, sector, %)

    def field(r, label, name):
        unit = units[h.index(name)] if name in h and h.index(name) < len(units) else ""
        return f"{label} {col(r, name)}" + (f" {unit}" if unit and unit != "%" and name in h else "")

    for r in rows[hdr + 2:]:
        print(col(r, "Kernel Name")[:60], *(field(r, label, name) for label, name in METRICS))


if __name__ == "__main__":
    main()
