"""scripts/ncu_sass_stalls.py: ncu's source page (SASS with PC-sampling counts) summarised by opcode
and by the instructions holding the most samples, and the details page's scheduler metrics."""
import subprocess
import sys

from conftest import SOURCE_DIR

SCRIPT = SOURCE_DIR / "scripts" / "ncu_sass_stalls.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def write_sass(path):
    path.write_text(
        '"Kernel Name","matvec_mma_stream_kernel"\n'
        '"# Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
        '"Instructions Executed","stall_long_sb","stall_wait"\n'
        '"0x10","@P0 LDGSTS.E.BYPASS.LTC128B.128 [R1], desc[UR4][R2.64]","1,000","900","4000","800","100"\n'
        '"0x20","HMMA.16816.F32 R4, R8, R12, R4","2,500","2,000","8000","0","1,900"\n'
        '"0x30","HMMA.16816.F32 R16, R8, R14, R16","500","400","8000","0","300"\n'
        '"0x40","F2FP.F16.E4M3.UNPACK_B R1, R2","1,000","600","32000","0","500"\n')


def test_opcodes_and_top_instructions(tmp_path):
    sass = tmp_path / "sass.csv"
    write_sass(sass)
    r = run(sass, "--top", "3")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].endswith("4 SASS lines, 5000 samples")
    # Opcodes by share of all samples: the two HMMA lines together, predicates and modifiers dropped.
    rows = {line.split()[0]: line.split()[1:] for line in out[2:5]}
    assert rows["HMMA"] == ["60.0", "48.0", "16000"]
    assert rows["LDGSTS"] == ["20.0", "18.0", "4000"]
    assert rows["F2FP"] == ["20.0", "12.0", "32000"]
    assert out[2].startswith("HMMA")
    # The instruction with most samples first, with its largest stall reasons in % of all samples.
    top = [line for line in out if line.strip().startswith("50.0")]
    assert len(top) == 1 and "HMMA.16816.F32 R4" in top[0] and "wait 38.0" in top[0]
    assert any("long_sb 16.0" in line for line in out)


def test_details_page_sections(tmp_path):
    sass = tmp_path / "sass.csv"
    write_sass(sass)
    details = tmp_path / "details.csv"
    details.write_text('"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
                       '"0","k","Scheduler Statistics","Issue Slots Busy","%","23.50"\n'
                       '"0","k","Memory Workload Analysis","Mem Busy","%","80.1"\n')
    r = run(sass, "--details", details)
    assert r.returncode == 0, r.stderr
    assert "Issue Slots Busy" in r.stdout and "23.50" in r.stdout
    assert "Mem Busy" not in r.stdout  # only the issue, warp-state, pipe and throughput sections


def test_a_file_without_samples_is_an_error(tmp_path):
    sass = tmp_path / "sass.csv"
    sass.write_text('"Address","Source","Instructions Executed"\n"0x10","NOP","1"\n')
    r = run(sass)
    assert r.returncode != 0
    assert "Warp Stall Sampling" in r.stderr


def test_long_scoreboard_waits_name_their_load(tmp_path):
    # 0x40 waits on the scalar load two lines up (an unrelated ALU line between); 0x70 reads R70,
    # the third register of a 128-bit load; 0x90 reads R5, whose nearest writer is an IMAD, not a
    # load, so nothing is claimed for it; 0xa0 stalls on barriers, not on the long scoreboard.
    sass = tmp_path / "sass.csv"
    sass.write_text(
        '"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_long_sb","stall_barrier"\n'
        '"0x10","LDG.E.CONSTANT R23, desc[UR8][R22.64]","1","10","0","0"\n'
        '"0x20","IADD3 R1, R2, 0x4, RZ","1","10","0","0"\n'
        '"0x40","FMUL R20, R20, R23","400","10","390","0"\n'
        '"0x50","@!P1 LDG.E.128 R68, desc[UR8][R20.64+0x20]","1","10","0","0"\n'
        '"0x60","STG.E desc[UR8][R68.64], R2","1","10","0","0"\n'
        '"0x70","F2FP.F16.F32.PACK_AB R16, R71, R70","300","10","280","0"\n'
        '"0x80","IMAD R5, R3, 0x2, RZ","1","10","0","0"\n'
        '"0x90","FADD R6, R6, R5","200","10","190","0"\n'
        '"0xa0","@P0 BRA 0x10","90","10","0","90"\n')
    r = run(sass, "--top", "4")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    at = {line.split()[1]: k for k, line in enumerate(lines) if line[:6].strip().replace(".", "").isdigit()}
    assert lines[at["0x40"] + 1].split() == ["waits", "on", "0x10", "LDG.E.CONSTANT", "R23,", "desc[UR8][R22.64]", "(2",
                                              "lines", "earlier)"]
    assert "waits on 0x50 @!P1 LDG.E.128 R68" in lines[at["0x70"] + 1]
    assert "waits on" not in lines[at["0x90"] + 1]
    assert "waits on" not in " ".join(lines[at["0xa0"]:])
