#!/usr/bin/env bash
# Memory counters of the streaming decode products (matvec_mma_stream_kernel) under ncu: time,
# DRAM bytes read and throughput, L2 sectors the SMs read and how many missed, warps active, for
# two eager one-token decode layers (-s 8 -c 8: layers 2-3's q/k/v, o, gate/up and down) of
# qwen2-7b FP8 weight-only and BF16 (`duet synth`, random weights). Answers whether a product
# reads more DRAM bytes than its weights and how busy HBM is while it runs.
# FP8_SETS / BF16_SETS: extra settings for the FP8 / BF16 file, "|"-separated VAR=value words
# (e.g. FP8_SETS="DUET_MATVEC_L2PF=0" BF16_SETS="DUET_MATVEC_STREAM_CFG=4"); the word BIN=NAME runs
# the bundle's binary NAME instead of duet (e.g. FP8_SETS="BIN=duet-diag1").
# Usage: scripts/gpu-ncu-products.sh BUNDLE.tar.xz OUT
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-lib.sh
start_run "$1" "$2"
command -v ncu >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
m=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
m=$m,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum
m=$m,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size,launch__registers_per_thread
synth_q7 q7-fp8ch:fp8-channel q7-bf16.gguf:BF16
runs=("fp8|q7-fp8ch|--fp8 weight-only|" "bf16|q7-bf16.gguf||")
IFS='|' read -r -a extra_sets <<<"${FP8_SETS:-}"
for s in "${extra_sets[@]}"; do runs+=("fp8 $(echo $s)|q7-fp8ch|--fp8 weight-only|$(echo $s)"); done
IFS='|' read -r -a extra_sets <<<"${BF16_SETS:-}"
for s in "${extra_sets[@]}"; do runs+=("bf16 $(echo $s)|q7-bf16.gguf||$(echo $s)"); done
i=0
for r in "${runs[@]}"; do
  IFS='|' read -r label f args envs <<<"$r"
  i=$((i + 1))
  echo "== $label"
  split_setting "$envs"
  env "${env_words[@]}" timeout 240 ncu --clock-control none --csv --page raw --metrics "$m" -k regex:matvec_mma_stream -s 8 -c 8 \
    "$bin/$exe" bench -m "$work/$f" -p 0 -n 2 -r 1 --no-graphs $args >"$out/ncu-$i.csv" 2>"$out/ncu-$i.err"
  python3 scripts/ncu_table.py "$out/ncu-$i.csv"
done
