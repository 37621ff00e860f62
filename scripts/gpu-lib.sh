# Shell functions shared by the scripts/gpu-*.sh scripts (sourced; bench_file reads $duet, $work
# and $out from the caller).

# unpack_bundle BUNDLE: unpacks a packed scripts/gpu-bundle.sh folder into /tmp/duet-bin, sets $bin
# to the folder holding its duet binary and exports DUET_TOKENIZERS (the tokenizers `duet synth`
# embeds) from it.
unpack_bundle() {
  rm -rf /tmp/duet-bin  # a warm machine may hold an earlier call's bundle: never pick its duet
  mkdir -p /tmp/duet-bin
  tar -xJf "$1" -C /tmp/duet-bin
  bin=$(dirname "$(find /tmp/duet-bin -name duet -type f | head -1)")
  export DUET_TOKENIZERS=$bin/tokenizers
}

# start_run BUNDLE OUT [WORK]: the common start of a GPU-machine script: sets $out and $work
# (default /tmp/duet-gpu, where the model files go), makes both and unpacks BUNDLE (unpack_bundle).
start_run() {
  out=$2
  work=${3:-/tmp/duet-gpu}
  mkdir -p "$out" "$work"
  unpack_bundle "$1"
}

# bench_file LABEL FILE [duet bench args...]: `duet bench` pp512 + tg128 (3 reps) and pp2048
# (2 reps; BENCH_PP2048=0 skips it) on $work/FILE, one labelled JSON line each appended to
# $out/bench.jsonl.
bench_file() {
  local label=$1 f=$2
  shift 2
  [ -e "$work/$f" ] || { echo "missing $work/$f"; return; }
  "$duet" bench -m "$work/$f" -p 512 -n 128 -r 3 --json "$@" 2>>"$out/bench.err" |
    python3 -c "import json,sys; j=json.load(sys.stdin); j['label']='$label'; j['pp']=512; print(json.dumps(j))" >>"$out/bench.jsonl"
  [ "${BENCH_PP2048:-1}" = 1 ] || return 0  # BENCH_PP2048=0: pp512 + tg128 only (quicker A/B runs)
  "$duet" bench -m "$work/$f" -p 2048 -n 0 -r 2 --json "$@" 2>>"$out/bench.err" |
    python3 -c "import json,sys; j=json.load(sys.stdin); j['label']='$label'; print(json.dumps(j))" >>"$out/bench.jsonl"
}

# synth_q7 NAME:TYPE ...: each missing $work/NAME made by `duet synth --arch qwen2 --shape
# qwen2-7b -t TYPE` (random weights), in parallel on the host's cores; NAMEs must differ.
synth_q7() {
  local spec
  for spec in "$@"; do
    [ -e "$work/${spec%%:*}" ] || "$bin/duet" synth --arch qwen2 --shape qwen2-7b -t "${spec#*:}" -o "$work/${spec%%:*}" -q &
  done
  wait
}

# split_setting "WORDS": one A/B setting's words into $exe (the bundle's binary to run: duet, or
# NAME for a word BIN=NAME) and the array env_words (its VAR=value words; "-" stands for none).
split_setting() {
  exe=duet
  env_words=()
  local w
  for w in $1; do
    case $w in -) ;; BIN=*) exe=${w#BIN=} ;; *) env_words+=("$w") ;; esac
  done
}

# each_setting "SETTINGS" FUNC: for each "|"-separated setting of SETTINGS ("-" when empty), in
# order, split_setting it and call FUNC N SETTING (N counted from 1).
each_setting() {
  local sets s n=0
  IFS='|' read -r -a sets <<<"${1:--}"
  for s in "${sets[@]}"; do
    n=$((n + 1))
    split_setting "$s"
    "$2" "$n" "$s"
  done
}
