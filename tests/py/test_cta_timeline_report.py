"""scripts/cta_timeline_report.py: the diagnostic build's per-CTA records cut into launches, each
launch's kind (rows, grid, the previous launch's rows) and its times from its wait's release."""
import importlib.util

from conftest import SOURCE_DIR

spec = importlib.util.spec_from_file_location("cta_timeline_report",
                                              SOURCE_DIR / "scripts" / "cta_timeline_report.py")
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)


def write_csv(path, replays):
    """Per replay: a 2-CTA q/k/v launch (4608 rows), then an o launch (3584 rows, 3 CTAs, one of
    them starting 4 us after the release), then a down launch (3584 rows after 37888: a gate/up
    launch of one CTA between). Times in ns; CTAs appended in end order, as the kernels do."""
    lines = ["w,block,smid,t_start,t_wait,t_end,grid,rows"]
    for k in range(replays):
        t = 1_000_000 * k
        recs = [("a0", b, b, t + 0, t + 1000, t + 3000, 2, 4608) for b in range(2)]
        # o: released at t + 5000; blocks 0, 1 resident early, block 2 starts at t + 9000.
        recs += [("b0", 0, 3, t + 2000, t + 5000, t + 7000, 3, 3584),
                 ("b0", 1, 4, t + 2500, t + 5000, t + 8000, 3, 3584),
                 ("b0", 2, 5, t + 9000, t + 9000, t + 12000 + 1000 * k, 3, 3584)]
        recs += [("c0", 0, 0, t + 11000, t + 13000, t + 20000, 1, 37888)]
        recs += [("d0", 0, 1, t + 19000, t + 21000, t + 24000, 1, 3584)]
        recs.sort(key=lambda r: r[5])
        lines += [",".join(str(x) for x in r) for r in recs]
    path.write_text("\n".join(lines) + "\n")


def test_kinds_and_times(tmp_path):
    path = tmp_path / "cta.csv"
    write_csv(path, 4)
    table, ls = report.analyse(report.read_records(path), skip=1)
    assert len(ls) == 16  # four launches a replay, all complete
    kinds = {k["kind"]: k for k in table}
    o = kinds["3584 rows g3 after 4608"]
    down = kinds["3584 rows g1 after 37888"]
    assert o["launches"] == 3 and down["launches"] == 3  # the first replay skipped
    assert abs(o["first_start_us"] + 3.0) < 1e-9 and abs(o["last_start_us"] - 4.0) < 1e-9
    assert o["late"] == 1
    # Work after each CTA's wait: 2, 3 and 3 + k us (k = 1..3): median 3, max mean 5.
    assert abs(o["work_med_us"] - 3.0) < 1e-9 and abs(o["work_max_us"] - 5.0) < 1e-9
    assert abs(o["end_us"] - 9.0) < 1e-9  # release + 7 + k us, k = 1..3
    assert abs(down["end_us"] - 3.0) < 1e-9 and down["late"] == 0
    assert "4608 rows g2 after 3584" in kinds  # the replays after the first follow a down product
    assert "4608 rows g2 after 0" not in kinds  # the first replay's (no predecessor) was skipped


def test_detail_and_partial_launch(tmp_path):
    path = tmp_path / "cta.csv"
    write_csv(path, 3)
    with open(path, "a") as f:  # a launch cut off by the buffer's end: one CTA of three
        f.write("b0,0,3,9000000,9003000,9004000,3,3584\n")
    table, ls = report.analyse(report.read_records(path), skip=0)
    assert len(ls) == 12
    ctas = report.detail(ls, "3584 rows g3 after 4608", skip=0)
    assert [c["block"] for c in ctas] == [0, 1, 2]  # start order
    assert abs(ctas[2]["start_us"] - 4.0) < 1e-9 and abs(ctas[2]["end_us"] - 8.0) < 1e-9  # the median launch (k=1)
    assert report.main([str(path), "--detail", "3584 rows g3 after 4608", "--json", str(tmp_path / "r.json")]) == 0


def test_spread_sm_share(tmp_path):
    """Two SMs, four CTAs a launch: the CTAs on SM 7 end 2 us after the others in every launch,
    so the SM explains all of the spread; with the late SM alternating it explains none."""
    def write(path, late_sm):
        lines = ["w,block,smid,t_start,t_wait,t_end,grid,rows"]
        for k in range(5):
            t = 1_000_000 * k
            for b in range(4):
                sm = 7 if b < 2 else 3
                late = 2000 if sm == late_sm(k) else 0
                lines.append(f"a0,{b},{sm},{t},{t + 1000},{t + 5000 + late},4,4608")
        path.write_text("\n".join(lines) + "\n")

    fixed, moving = tmp_path / "fixed.csv", tmp_path / "moving.csv"
    write(fixed, lambda k: 7)
    write(moving, lambda k: 7 if k % 2 else 3)
    # Launches after the first (skipped) follow one of the same rows.
    sp = report.spread(report.launches(report.read_records(fixed)), skip=1)["4608 rows g4 after 4608"]
    # Ends 5 and 7 us after each launch's start (4 and 6 after its wait), median 6: +-1 us.
    assert abs(sp["max_us"] - 1.0) < 1e-9 and abs(sp["sm_share"] - 1.0) < 1e-9
    assert sp["slowest_sms"][0] == 7
    ls = report.launches(report.read_records(moving))
    sp = report.spread(ls, skip=1)["4608 rows g4 after 4608"]
    assert abs(sp["sm_share"]) < 1e-9  # each SM late in half the launches: its mean is the median
