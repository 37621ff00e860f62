"""scripts/ktrace_report.py: graph replays of a duet_ktrace CSV cut into replays by node count, and
each kernel kind's busy time and critical-path advance per replay (advances sum to the span)."""
import importlib.util

from conftest import SOURCE_DIR

spec = importlib.util.spec_from_file_location("ktrace_report", SOURCE_DIR / "scripts" / "ktrace_report.py")
ktrace_report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ktrace_report)

MMA = "_ZN4duet4cuda7kernels45_GLOBAL__N__85b74ef4_12_quant_mma_cu_7f0b79c917matmul_mma_kernelILNS_5DTypeE12ELi4ELi8ELi1EEEvNS2_7MmaArgsE"
NORM = "_ZN4duet4cuda39_GLOBAL__N__d57c0752_7_norm_cu_297cbb1f18rms_norm_q8_kernelEPKflS3_flPaP6float4"


def test_short_names():
    assert ktrace_report.short_name(MMA) == "matmul_mma_kernel<12,4,8,1>"
    assert ktrace_report.short_name(NORM) == "rms_norm_q8_kernel"


def test_replays_busy_and_advance(tmp_path):
    lines = ["start_ns,end_ns,graph_id,graph_node_id,correlation_id,stream_id,grid,block,dyn_smem,name"]
    for k in range(4):  # four replays of graph 5: a norm, then a product that starts before it ends
        t = 1_000_000 * k
        lines.append(f"{t},{t + 2000},5,11,1,7,1x1x1,1024x1x1,0,{NORM}")
        lines.append(f"{t + 1000},{t + 9000 + 1000 * k},5,12,2,7,259x1x1,256x1x1,0,{MMA}")
    lines.append(f"5000000,5001000,0,0,3,7,1x1x1,32x1x1,0,{NORM}")  # outside a graph: left out
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(lines) + "\n")
    report = ktrace_report.analyse(ktrace_report.read_trace(path), skip=1, min_replays=3)
    assert len(report) == 1
    g = report[0]
    assert (g["graph"], g["kernels"], g["replays"]) == (5, 2, 3)
    # Replays 1-3: spans 10, 11, 12 us.
    assert abs(g["span_us"] - 11.0) < 1e-9 and g["min_span_us"] == 10.0 and g["max_span_us"] == 12.0
    kinds = {r["kind"]: r for r in g["kinds"]}
    mma, norm = kinds["matmul_mma_kernel<12,4,8,1> g259"], kinds["rms_norm_q8_kernel g1"]
    assert norm["per_replay"] == 1 and abs(norm["busy_us"] - 2.0) < 1e-9 and abs(norm["advance_us"] - 2.0) < 1e-9
    assert abs(mma["busy_us"] - 10.0) < 1e-9 and abs(mma["advance_us"] - 9.0) < 1e-9  # starts 1 us early
    assert abs(mma["advance_us"] + norm["advance_us"] - g["span_us"]) < 1e-9
    assert g["kinds"][0]["kind"].startswith("matmul_mma_kernel")  # largest advance first
    # Too few replays: nothing reported.
    assert ktrace_report.analyse(ktrace_report.read_trace(path), skip=2, min_replays=3) == []


def test_timeline(tmp_path):
    lines = ["start_ns,end_ns,graph_id,graph_node_id,correlation_id,stream_id,grid,block,dyn_smem,name"]
    for k in range(5):  # graph 5: norm, product, norm; replays 1 us apart in start, product 1-2 us late
        t = 1_000_000 * k
        lines.append(f"{t},{t + 2000},5,11,1,7,1x1x1,1024x1x1,0,{NORM}")
        lines.append(f"{t + 500 + 1000 * (k % 2)},{t + 9000},5,12,2,7,259x1x1,256x1x1,0,{MMA}")
        lines.append(f"{t + 8000},{t + 10000},5,13,3,7,1x1x1,1024x1x1,0,{NORM}")
    for k in range(3):  # graph 6: fewer replays, not chosen by default
        lines.append(f"{9_000_000 + k * 1000},{9_000_000 + k * 1000 + 500},6,1,4,7,1x1x1,32x1x1,0,{NORM}")
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(lines) + "\n")
    tl = ktrace_report.timeline(ktrace_report.read_trace(path), 1, 3, skip=1)
    assert tl["graph"] == 5 and tl["replays"] == 4
    assert [r["position"] for r in tl["rows"]] == [1, 2]
    assert tl["rows"][0]["kind"] == "matmul_mma_kernel<12,4,8,1> g259"
    # Position 1's start: 0.5 us after the norm in replays 2 and 4, 1.5 us in 1 and 3: it is the origin.
    assert tl["rows"][0]["start_us"] == 0.0
    assert abs(tl["rows"][0]["end_us"] - (9.0 - 1.0)) < 1e-9  # ends at 9 us, starts at 1 us on average
    assert abs(tl["rows"][1]["start_us"] - 7.0) < 1e-9 and abs(tl["rows"][1]["end_us"] - 9.0) < 1e-9
    # Out of range or another graph.
    assert ktrace_report.timeline(ktrace_report.read_trace(path), 2, 4, skip=1)["rows"] == []
    assert ktrace_report.timeline(ktrace_report.read_trace(path), 0, 1, graph=6, skip=0)["replays"] == 3


def test_layer_advances(tmp_path):
    lines = ["start_ns,end_ns,graph_id,graph_node_id,correlation_id,stream_id,grid,block,dyn_smem,name"]
    for k in range(4):  # graph 5: an embedding-like norm, then two "layers" of norm, product, norm
        t = 1_000_000 * k
        lines.append(f"{t},{t + 1000},5,10,1,7,1x1x1,32x1x1,0,{NORM}")
        for layer in range(2):
            b = t + 1000 + 12000 * layer
            lines.append(f"{b},{b + 2000},5,{20 + 3 * layer},2,7,1x1x1,1024x1x1,0,{NORM}")
            # The product starts 1 us before the norm ends and runs 8 us (+1 us in layer 1).
            lines.append(f"{b + 1000},{b + 9000 + 1000 * layer},5,{21 + 3 * layer},3,7,259x1x1,256x1x1,0,{MMA}")
            lines.append(f"{b + 9000 + 1000 * layer},{b + 12000},5,{22 + 3 * layer},4,7,1x1x1,1024x1x1,0,{NORM}")
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(lines) + "\n")
    la = ktrace_report.layer_advances(ktrace_report.read_trace(path), 1, 3, 2, skip=1)
    assert la["graph"] == 5 and la["replays"] == 3
    assert [r["kind"] for r in la["rows"]] == ["rms_norm_q8_kernel g1", "matmul_mma_kernel<12,4,8,1> g259",
                                               "rms_norm_q8_kernel g1"]
    assert all(r["same"] for r in la["rows"])
    adv = [r["advance_us"] for r in la["rows"]]
    # norm 2 us (it starts when the step before ends), product 7 and 8 us past the norm's end (7.5
    # on average), last norm the rest of the 12-us layer.
    assert abs(adv[0] - 2.0) < 1e-9 and abs(adv[1] - 7.5) < 1e-9 and abs(adv[2] - 2.5) < 1e-9
    assert abs(la["layer_us"] - 12.0) < 1e-9
    # A period that is not the layer's: the kinds differ across the "layers".
    off = ktrace_report.layer_advances(ktrace_report.read_trace(path), 1, 2, 3, skip=1)
    assert not all(r["same"] for r in off["rows"])
    # Past the replay's end: nothing.
    assert ktrace_report.layer_advances(ktrace_report.read_trace(path), 1, 3, 3, skip=1)["rows"] == []
