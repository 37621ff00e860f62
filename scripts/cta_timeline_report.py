#!/usr/bin/env python3
"""Per-CTA timelines of the decode products, from the diagnostic build's CSV.

Build and record (kernels/cuda/cta_timeline.h):
  cmake -S . -B build-cta -G Ninja -DCMAKE_BUILD_TYPE=Release -DDUET_CUDA=ON -DDUET_CTA_TIMELINE=ON
  ninja -C build-cta duet
  DUET_CTA_TIMELINE_OUT=cta.csv build-cta/duet bench -m MODEL -p 0 -n 16 -r 1 [-b 32]
  scripts/cta_timeline_report.py cta.csv [--skip N] [--detail KIND] [--json FILE]

Each CSV row is one CTA of one launch of an instrumented kernel (the streaming FP8/F16/BF16
decode kernel, the quantized MMA kernel): its matrix (w), block, SM, and three %globaltimer
times in ns: when it started (became resident), when its programmatic-launch wait returned, and
when it ended. Launches are the rows of one (w, grid) cut into groups of `grid` in start order.
A launch's kind is its row count, grid and the row count of the launch before it, so that the
3584-row o product (after q/k/v) and down product (after gate/up) of a 7B model stay apart.
Per launch, relative to the first return of its wait (its producer's completion, "release"):
  first / last start: when its first and last CTAs started (negative: before the release);
  late: CTAs that started after the release (not resident while the producer ran);
  work med / max: t_end - t_wait of its CTAs (each CTA's time after its own wait);
  end: its last CTA's end (the launch's time after the release).
The table gives each kind's mean over its launches (the first --skip launches of each matrix left
out: warm-up and graph capture); --detail KIND lists one launch of that kind CTA by CTA.
--spread adds, per kind, how its CTAs' ends spread after the launch's median CTA end (pooled
over launches: p90 and max, in us) and how much of that spread belongs to the SM a CTA ran on
(the variance of the per-SM means over the pooled variance: near 1 when the same SMs finish late
in every launch, near 0 when lateness moves around): the tail that static shares of equal work
leave, and whether a fixed rebalancing or only a dynamic one could take it.
"""
import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict


def read_records(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append({"w": r["w"], "block": int(r["block"]), "smid": int(r["smid"]),
                         "t_start": int(r["t_start"]), "t_wait": int(r["t_wait"]), "t_end": int(r["t_end"]),
                         "grid": int(r["grid"]), "rows": int(r["rows"])})
    return rows


def launches(records):
    """The complete launches, in start order: lists of CTA records of one (w, grid)."""
    by_key = defaultdict(list)
    for r in records:
        by_key[(r["w"], r["grid"])].append(r)
    out = []
    for (w, grid), rs in by_key.items():
        rs.sort(key=lambda r: r["t_start"])
        for i in range(0, len(rs) - grid + 1, grid):
            group = rs[i:i + grid]
            if len({r["block"] for r in group}) == grid:  # every block once: a whole launch
                out.append(group)
    out.sort(key=lambda g: min(r["t_start"] for r in g))
    return out


def launch_stats(group):
    release = min(r["t_wait"] for r in group)
    starts = [r["t_start"] for r in group]
    work = [r["t_end"] - r["t_wait"] for r in group]
    return {
        "first_start_us": (min(starts) - release) / 1e3,
        "last_start_us": (max(starts) - release) / 1e3,
        "late": sum(1 for s in starts if s > release),
        "work_med_us": statistics.median(work) / 1e3,
        "work_max_us": max(work) / 1e3,
        "end_us": (max(r["t_end"] for r in group) - release) / 1e3,
    }


def labelled(ls, skip):
    """(kind, launch) for each launch in start order past its matrix's first `skip` launches."""
    seen = defaultdict(int)  # launches of each matrix so far
    prev_rows = 0
    for g in ls:
        kind = f"{g[0]['rows']} rows g{g[0]['grid']} after {prev_rows}"
        prev_rows = g[0]["rows"]
        seen[g[0]["w"]] += 1
        if seen[g[0]["w"]] > skip:
            yield kind, g


def analyse(records, skip=1):
    ls = launches(records)
    kinds = {}
    for kind, g in labelled(ls, skip):
        k = kinds.setdefault(kind, {"kind": kind, "rows": g[0]["rows"], "grid": g[0]["grid"], "stats": []})
        k["stats"].append(launch_stats(g))
    out = []
    for k in kinds.values():
        mean = {f: statistics.fmean(s[f] for s in k["stats"]) for f in k["stats"][0]}
        out.append({"kind": k["kind"], "rows": k["rows"], "grid": k["grid"], "launches": len(k["stats"]), **mean})
    out.sort(key=lambda k: -k["end_us"] * k["launches"])
    return out, ls


def detail(ls, kind, skip=1):
    """The CTAs of the median-end launch of `kind`, relative to its release, in start order."""
    picked = sorted((g for k, g in labelled(ls, skip) if k == kind), key=lambda g: launch_stats(g)["end_us"])
    if not picked:
        return []
    g = picked[len(picked) // 2]
    release = min(r["t_wait"] for r in g)
    return [{"block": r["block"], "smid": r["smid"], "start_us": (r["t_start"] - release) / 1e3,
             "wait_us": (r["t_wait"] - release) / 1e3, "end_us": (r["t_end"] - release) / 1e3}
            for r in sorted(g, key=lambda r: r["t_start"])]


def spread(ls, skip=1):
    """Per kind: CTA ends after each launch's median CTA end, pooled (p90, max, us), and the share
    of their variance that the SM explains."""
    by_kind = defaultdict(list)  # kind -> [(smid, end - median end)]
    for kind, g in labelled(ls, skip):
        ends = [r["t_end"] for r in g]
        med = statistics.median(ends)
        by_kind[kind] += [(r["smid"], (r["t_end"] - med) / 1e3) for r in g]
    out = {}
    for kind, pts in by_kind.items():
        d = sorted(v for _, v in pts)
        per_sm = defaultdict(list)
        for sm, v in pts:
            per_sm[sm].append(v)
        sm_mean = {sm: statistics.fmean(v) for sm, v in per_sm.items()}
        mean = statistics.fmean(d)
        var = statistics.fmean((v - mean) ** 2 for v in d)
        # Between-SM variance, each SM weighted by its CTAs.
        sm_var = sum(len(per_sm[sm]) * (m - mean) ** 2 for sm, m in sm_mean.items()) / len(d)
        out[kind] = {"p90_us": d[min(len(d) - 1, int(0.9 * len(d)))], "max_us": d[-1],
                     "sm_share": sm_var / var if var > 0 else 0.0,
                     "slowest_sms": sorted(sm_mean, key=lambda sm: -sm_mean[sm])[:8]}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--skip", type=int, default=1, help="launches of each matrix left out first (default 1)")
    ap.add_argument("--detail", help="a kind from the table: list one of its launches CTA by CTA")
    ap.add_argument("--spread", action="store_true", help="also each kind's CTA-end spread and its SM share")
    ap.add_argument("--json", help="write the table (and the detail, the spread) as JSON here")
    args = ap.parse_args(argv)
    table, ls = analyse(read_records(args.csv), args.skip)
    if not table:
        print("no complete launches in", args.csv, file=sys.stderr)
        return 1
    print(f"{len(ls)} launches; us from each launch's release (its wait's first return)")
    print(f"  {'kind':<36} {'launches':>8} {'1st start':>9} {'last start':>10} {'late':>6} "
          f"{'work med':>8} {'work max':>8} {'end':>7}")
    for k in table:
        print(f"  {k['kind']:<36} {k['launches']:>8} {k['first_start_us']:>9.2f} {k['last_start_us']:>10.2f} "
              f"{k['late']:>6.1f} {k['work_med_us']:>8.2f} {k['work_max_us']:>8.2f} {k['end_us']:>7.2f}")
    sp = spread(ls, args.skip) if args.spread else {}
    if sp:
        print(f"\n  {'kind':<36} {'end p90':>8} {'end max':>8} {'SM share':>8}  slowest SMs by mean end")
        for k in table:
            s = sp[k["kind"]]
            print(f"  {k['kind']:<36} {s['p90_us']:>8.2f} {s['max_us']:>8.2f} {s['sm_share']:>8.2f}  "
                  f"{' '.join(str(x) for x in s['slowest_sms'])}")
    ctas = detail(ls, args.detail, args.skip) if args.detail else []
    if args.detail:
        print(f"\n{args.detail}: the median launch's CTAs (us from its release)")
        print(f"  {'block':>5} {'sm':>4} {'start':>8} {'wait':>8} {'end':>8}")
        for c in ctas:
            print(f"  {c['block']:>5} {c['smid']:>4} {c['start_us']:>8.2f} {c['wait_us']:>8.2f} {c['end_us']:>8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"kinds": table, "detail": ctas, "spread": sp}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
