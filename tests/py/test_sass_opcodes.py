"""scripts/sass_opcodes.py: nvdisasm output split into kernels, their instructions counted by
opcode (predicates dropped; modifiers dropped unless --full-opcodes), kernels chosen by regex."""
import subprocess
import sys

from conftest import SOURCE_DIR

SCRIPT = SOURCE_DIR / "scripts" / "sass_opcodes.py"

SASS = """
        .text._Z8kernel_av:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   F2FP.F16.E4M3.UNPACK_B R60, R32 ;
        /*0020*/               @P0 F2FP.F16.E4M3.UNPACK_B R61, R28 ;
        /*0030*/                   HMMA.16816.F32 R60, R60, R68, RZ ;
        /*0040*/                   F2FP.F16.F32.PACK_AB R2, R3, R4 ;
        /*0050*/                   EXIT ;
.L_x_1:
        /*0060*/                   BRA `(.L_x_1) ;
        .text._Z8kernel_bv:
        /*0000*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0010*/                   EXIT ;
"""


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_counts_by_opcode_per_kernel(tmp_path):
    f = tmp_path / "k.sass"
    f.write_text(SASS)
    r = run("--sass", f)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "_Z8kernel_av: 7 instructions"
    assert out[1].strip().startswith("F2FP 3,")  # the predicated conversion counted, modifiers dropped
    assert "HMMA 1" in out[1] and "BRA 1" in out[1]
    assert out[2] == "_Z8kernel_bv: 2 instructions"


def test_full_opcodes_and_kernel_filter(tmp_path):
    f = tmp_path / "k.sass"
    f.write_text(SASS)
    r = run("--sass", f, "--full-opcodes", "--kernel", "kernel_a")
    assert r.returncode == 0, r.stderr
    assert "kernel_bv" not in r.stdout
    assert "F2FP.F16.E4M3.UNPACK_B 2" in r.stdout and "F2FP.F16.F32.PACK_AB 1" in r.stdout
    r = run("--sass", f, "--kernel", "no_such_kernel")
    assert r.returncode != 0 and "no kernel matches" in r.stderr
