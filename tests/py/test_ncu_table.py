"""scripts/ncu_table.py: an `ncu --csv --page raw` file printed one line per launch with its
metrics (memory counters included) in the units of ncu's units row, or with --sum the total time per kernel name."""
import subprocess
import sys

from conftest import SOURCE_DIR

SCRIPT = SOURCE_DIR / "scripts" / "ncu_table.py"
HEADER = ["ID", "Process ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum",
          "lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum"]
UNITS = ["", "", "", "ns", "byte", "sector", "sector"]


def write_csv(path, rows):
    lines = ['==PROF== Connected to process 1', ",".join(f'"{h}"' for h in HEADER), ",".join(f'"{u}"' for u in UNITS)]
    lines += [",".join(f'"{v}"' for v in r) for r in rows]
    path.write_text("\n".join(lines) + "\n")


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, check=True).stdout


def test_one_line_per_launch_with_memory_counters(tmp_path):
    path = tmp_path / "ncu.csv"
    write_csv(path, [["0", "1", "gate_up_kernel", "40,832", "136,739,328", "4,310,879", "4,270,040"],
                     ["1", "1", "down_kernel", "23,296", "68,561,920", "2,355,568", "2,142,220"]])
    lines = run(path).splitlines()
    assert len(lines) == 2  # the units row is not a launch
    assert lines[0].startswith("gate_up_kernel")
    assert "time 40,832 ns" in lines[0] and "dram_read 136,739,328 byte" in lines[0]
    assert "L2sect 4,310,879 sector" in lines[0] and "L2miss 4,270,040 sector" in lines[0]
    assert "dram% -" in lines[0]  # a metric the file lacks prints as "-"
    assert "L2miss 2,142,220 sector" in lines[1]


def test_sum_totals_time_per_kernel_largest_first(tmp_path):
    path = tmp_path / "ncu.csv"
    write_csv(path, [["0", "1", "small", "1,000", "0", "0", "0"], ["1", "1", "big", "30,000", "0", "0", "0"],
                     ["2", "1", "small", "3,000", "0", "0", "0"]])
    lines = run(path, "--sum").splitlines()
    assert len(lines) == 2
    big, small = lines[0].split(), lines[1].split()
    assert big[-1] == "big" and float(big[0]) == 30.0 and big[2] == "1"
    assert small[-1] == "small" and float(small[0]) == 4.0 and small[2] == "2" and float(small[4]) == 2.0


def test_no_rows(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("==PROF== no kernels were profiled\n")
    assert run(path).strip() == "no ncu rows"
