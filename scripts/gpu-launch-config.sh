#!/usr/bin/env bash
# What the driver gives each kernel of a one-token decode step: ncu's launch statistics (grid,
# block, registers, static and dynamic shared memory, the shared-memory configuration size the
# driver chose for the launch, and the occupancy limits) for the first COUNT (default 40) kernels
# of an eager decode step of qwen2-7b files (`duet synth`, random weights), after SKIP (default 0)
# kernels. Consecutive kernels with different configuration sizes cannot share an SM, so the
# table shows where a programmatic launch cannot overlap its predecessor.
#   FILES: of q4km bf16 fp8wo (default "q4km fp8wo"); SETS: "|"-separated settings (VAR=value
#   words, "-" for none) run for every file (default "-").
# Writes OUT/LABEL-SETTING.csv (ncu's raw page) and prints one table per run.
# Usage: FILES="q4km fp8wo" SETS="- | DUET_MATVEC_CARVEOUT=100" scripts/gpu-launch-config.sh BUNDLE.tar.xz OUT
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-lib.sh
start_run "$1" "$2"
command -v ncu >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
specs=()
for f in ${FILES:-q4km fp8wo}; do
  case $f in
    q4km) specs+=("q4km:q7-q4km.gguf:Q4_K_M:") ;;
    bf16) specs+=("bf16:q7-bf16.gguf:BF16:") ;;
    fp8wo) specs+=("fp8wo:q7-fp8ch:fp8-channel:--fp8 weight-only") ;;
    *) echo "unknown file kind $f"; exit 2 ;;
  esac
done
files=()
for s in "${specs[@]}"; do
  IFS=':' read -r _ file type _ <<<"$s"
  files+=("$file:$type")
done
synth_q7 "${files[@]}"
metrics=launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block_static
metrics=$metrics,launch__shared_mem_per_block_dynamic,launch__shared_mem_config_size,launch__occupancy_limit_shared_mem
metrics=$metrics,launch__occupancy_limit_registers,launch__occupancy_limit_blocks,launch__occupancy_limit_warps
IFS='|' read -r -a sets <<<"${SETS:--}"
for s in "${specs[@]}"; do
  IFS=':' read -r label file _ fixed <<<"$s"
  for set in "${sets[@]}"; do
    set=$(echo $set)
    split_setting "$set"
    tag=$label-$(echo "${set:--}" | tr -c 'A-Za-z0-9=\n' '_')
    echo "== $label [${set:--}]"
    env "${env_words[@]}" timeout 240 ncu --clock-control none --metrics "$metrics" --csv --page raw \
      -s "${SKIP:-0}" -c "${COUNT:-40}" "$bin/$exe" bench -m "$work/$file" $fixed -p 0 -n 1 -r 1 --no-graphs \
      >"$out/$tag.csv" 2>"$out/$tag.err" || { echo "ncu failed"; tail -5 "$out/$tag.err"; continue; }
    python3 - "$out/$tag.csv" <<'EOF'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
cols = rows[head]
def col(r, name):
    return r[cols.index(name)] if name in cols else "?"
print("| # | kernel | grid | block | regs | smem static / dynamic | config | limit smem / regs / warps |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for n, r in enumerate(rows[head + 2:]):
    name = col(r, "Kernel Name")
    for junk in ("(anonymous namespace)::", "<unnamed>::", "{unnamed}::", "duet::cuda::", "void "):
        name = name.replace(junk, "")
    name = name.split("(")[0].split("<")[0]
    print(f"| {n} | {name} | {col(r, 'launch__grid_size')} | {col(r, 'launch__block_size')} | "
          f"{col(r, 'launch__registers_per_thread')} | {col(r, 'launch__shared_mem_per_block_static')} / "
          f"{col(r, 'launch__shared_mem_per_block_dynamic')} | {col(r, 'launch__shared_mem_config_size')} | "
          f"{col(r, 'launch__occupancy_limit_shared_mem')} / {col(r, 'launch__occupancy_limit_registers')} / "
          f"{col(r, 'launch__occupancy_limit_warps')} |")
EOF
  done
done
