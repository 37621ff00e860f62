#!/usr/bin/env python3
"""Takes apart the CUDA-graph replays in a duet_ktrace CSV (src/ktrace/ktrace.cpp): for each graph,
the mean span of a replay and, per kernel kind (function name and grid), its launches a replay,
its mean time from start to end ("busy": overlapping kernels both count) and its share of the
replay's critical path ("advance": how far the kernel's end moved the latest end seen so far, in
start order; the advances of a replay sum to its span, so they say where the wall-clock time of a
step goes when programmatic launches overlap kernels).

Usage: ktrace_report.py TRACE.csv [--min-replays N] [--skip N] [--json OUT]
                         [--timeline FIRST LAST | --layers FIRST PERIOD COUNT] [--graph G]
  --skip N: leave out each graph's first N replays (warm-up).
  --timeline FIRST LAST: instead, the kernels at positions FIRST .. LAST - 1 of each replay (in start
    order) with their mean start and end in us from position FIRST's start, e.g. one decoder layer
    (graph G, else the graph with the most replays).
  --layers FIRST PERIOD COUNT: instead, the mean advance (us) of each of a layer's PERIOD kernels over
    COUNT layers starting at position FIRST (e.g. the ten kernels of a decoder layer), and the
    layer's total: where a layer's time goes."""
import argparse
import collections
import csv
import json
import re


def short_name(mangled):
    """The kernel's function name from its mangled name (the first identifier holding 'kernel'),
    with the leading template arguments' numbers kept (dtype codes, tile counts)."""
    ids = []
    i = 0
    s = mangled
    while i < len(s):
        m = re.match(r"(\d+)", s[i:])
        if m:
            n = int(m.group(1))
            start = i + len(m.group(1))
            ident = s[start:start + n]
            if n > 0 and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", ident or "-"):
                ids.append((ident, start + n))
                i = start + n
                continue
        i += 1
    for ident, end in ids:
        if ("kernel" in ident and ident != "kernels") or ident.endswith("_k"):
            tail = s[end:end + 40]
            args = re.findall(r"(?:DTypeE|Li|Lb)(\d+)", tail)
            return ident + ("<" + ",".join(args[:4]) + ">" if tail.startswith("I") and args else "")
    return ids[-1][0] if ids else mangled[:60]


def read_trace(path):
    """Graph kernels of a trace: {graph id: [(start_ns, end_ns, node id, kind)]} (kind: short
    name and grid x); kernels launched outside graphs are left out."""
    by_graph = collections.defaultdict(list)
    with open(path) as f:
        for r in csv.DictReader(f):
            g = int(r["graph_id"])
            if g == 0:
                continue
            by_graph[g].append((int(r["start_ns"]), int(r["end_ns"]), int(r["graph_node_id"]),
                                short_name(r["name"]) + " g" + r["grid"].split("x")[0]))
    return by_graph


def analyse(by_graph, skip=2, min_replays=3):
    """Per graph with at least min_replays replays after the first `skip`: its kernels, replays,
    mean span (us) and per kernel kind the launches, busy and advance (us) a replay, largest
    advance first. Graphs whose kernel count is not a multiple of their node count are left out."""
    report = []
    for g, recs in sorted(by_graph.items()):
        replays = replays_of(recs, skip)
        if len(replays) < min_replays:
            continue
        nodes = len(replays[0])
        spans, busy, adv, count = [], collections.Counter(), collections.Counter(), collections.Counter()
        for rep in replays:
            spans.append(max(r[1] for r in rep) - rep[0][0])
            for (s, e, _, kind), a in zip(rep, replay_advances(rep)):
                busy[kind] += e - s
                count[kind] += 1
                adv[kind] += a
        n = len(replays)
        rows = [{"kind": k, "per_replay": count[k] / n, "busy_us": busy[k] / n / 1e3, "advance_us": adv[k] / n / 1e3}
                for k in sorted(adv, key=lambda k: -adv[k])]
        report.append({"graph": g, "kernels": nodes, "replays": n, "span_us": sum(spans) / n / 1e3,
                       "min_span_us": min(spans) / 1e3, "max_span_us": max(spans) / 1e3, "kinds": rows})
    return report


def replay_advances(rep):
    """Each record's advance in a replay (in start order): how far its end moved the latest end seen
    so far, from the replay's first start; they sum to the replay's span."""
    latest = rep[0][0]
    out = []
    for _, e, _, _ in rep:
        out.append(max(0, e - latest))
        latest = max(latest, e)
    return out


def busiest_graph(by_graph, skip):
    """The graph with the most replays after the first `skip` (None without graphs)."""
    return max(by_graph, key=lambda g: len(replays_of(by_graph[g], skip)), default=None)


def replays_of(recs, skip):
    """A graph's records cut into replays of its node count, each in start order, the first `skip`
    left out; [] when the records are not whole replays."""
    nodes = len({r[2] for r in recs})
    recs = sorted(recs)
    if len(recs) % nodes != 0:
        return []
    return [recs[i:i + nodes] for i in range(0, len(recs), nodes)][skip:]


def timeline(by_graph, first, last, graph=None, skip=2):
    """Positions first .. last - 1 of the replays of `graph` (else the graph with the most
    replays): per position its kind and mean start / end (us) from position first's start."""
    if graph is None:
        graph = busiest_graph(by_graph, skip)
    reps = replays_of(by_graph.get(graph, []), skip)
    if not reps or not 0 <= first < last <= len(reps[0]):
        return {"graph": graph, "replays": len(reps), "rows": []}
    rows = []
    for i in range(first, last):
        starts = [rep[i][0] - rep[first][0] for rep in reps]
        ends = [rep[i][1] - rep[first][0] for rep in reps]
        rows.append({"position": i, "kind": reps[0][i][3], "start_us": sum(starts) / len(reps) / 1e3,
                     "end_us": sum(ends) / len(reps) / 1e3})
    return {"graph": graph, "replays": len(reps), "rows": rows}


def layer_advances(by_graph, first, period, count, graph=None, skip=2):
    """Positions first + i period + j (i < count, j < period) of the replays of `graph` (else the
    graph with the most replays): per j the kind (that of layer 0; `same` False where another layer
    has another kind there) and the mean advance (us) over layers and replays, the advance being
    measured over the whole replay as in analyse()."""
    if graph is None:
        graph = busiest_graph(by_graph, skip)
    reps = replays_of(by_graph.get(graph, []), skip)
    if not reps or period < 1 or count < 1 or first < 0 or first + period * count > len(reps[0]):
        return {"graph": graph, "replays": len(reps), "rows": [], "layer_us": 0.0}
    adv = [sum(col) for col in zip(*(replay_advances(rep) for rep in reps))]
    rows = []
    for j in range(period):
        pos = [first + i * period + j for i in range(count)]
        kind = reps[0][pos[0]][3]
        rows.append({"offset": j, "kind": kind, "same": all(reps[0][q][3] == kind for q in pos),
                     "advance_us": sum(adv[q] for q in pos) / count / len(reps) / 1e3})
    return {"graph": graph, "replays": len(reps), "rows": rows, "layer_us": sum(r["advance_us"] for r in rows)}


def write_json(path, obj):
    """obj as indented JSON into path (--json), when one was given."""
    if path:
        with open(path, "w") as f:
            json.dump(obj, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--min-replays", type=int, default=3)
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--timeline", nargs=2, type=int, metavar=("FIRST", "LAST"))
    ap.add_argument("--layers", nargs=3, type=int, metavar=("FIRST", "PERIOD", "COUNT"))
    ap.add_argument("--graph", type=int)
    a = ap.parse_args()
    if a.layers:
        la = layer_advances(read_trace(a.trace), a.layers[0], a.layers[1], a.layers[2], a.graph, a.skip)
        print(f"graph {la['graph']}, {la['replays']} replays; mean advance over {a.layers[2]} layers of "
              f"{a.layers[1]} kernels from position {a.layers[0]}, us")
        for r in la["rows"]:
            mark = "" if r["same"] else "  (kinds differ across layers)"
            print(f"  {r['offset']:3d} {r['kind'][:58]:58s} {r['advance_us']:8.2f}{mark}")
        print(f"  {'layer':62s} {la['layer_us']:8.2f}")
        write_json(a.json, la)
        return
    if a.timeline:
        tl = timeline(read_trace(a.trace), a.timeline[0], a.timeline[1], a.graph, a.skip)
        print(f"graph {tl['graph']}, {tl['replays']} replays; us from position {a.timeline[0]}'s start")
        for r in tl["rows"]:
            print(f"  {r['position']:4d} {r['kind'][:58]:58s} start {r['start_us']:8.2f} end {r['end_us']:8.2f}")
        write_json(a.json, tl)
        return
    report = analyse(read_trace(a.trace), a.skip, a.min_replays)
    for g in report:
        span = g["span_us"]
        print(f"\ngraph {g['graph']}: {g['kernels']} kernels, {g['replays']} replays, span {span:.1f} us a replay "
              f"(min {g['min_span_us']:.1f}, max {g['max_span_us']:.1f})")
        print(f"  {'kernel kind (name, grid)':58s} {'a replay':>8s} {'busy us':>9s} {'advance us':>11s} {'share':>6s}")
        for k in g["kinds"]:
            print(f"  {k['kind'][:58]:58s} {k['per_replay']:8.0f} {k['busy_us']:9.1f} {k['advance_us']:11.1f} "
                  f"{100 * k['advance_us'] / span:5.1f}%")
    write_json(a.json, report)


if __name__ == "__main__":
    main()
