#!/usr/bin/env bash
# Benchmark of gguf-diff on DeepSeek-style MoE files made by the library's synthetic model
# generator:
#   1. byte identity: an f16 model of about SIZE_GIB and its copy, page-cached; gguf-diff's
#      hashing bandwidth per thread (1 and 2 threads) against a plain single-core XXH3_64bits
#      over the same mapped payloads (target >= 0.8x), measured in one process by
#      bench/diff_bench, next to plain xxh3 on two threads (A and B at once: the ceiling the
#      memory system leaves to two threads); plus the wall time of the gguf-diff binary;
#   2. --values: for each pair of encodings in PAIRS, the values diff's decoded elements per
#      second against plain single-core dequantize of the same tensors of both files
#      (target >= 0.8x), and the binary's wall time.
#
# Usage: bench/diff_bench.sh [BUILD_DIR] [WORK_DIR]
#   BUILD_DIR  a build tree with tools/gguf-diff, examples/make_tiny_moe and bench/diff_bench
#              (configure with -DGGUF_BUILD_BENCH=ON; default: build)
#   WORK_DIR   where the model files go (default: a new directory under /var/tmp, removed at
#              the end unless KEEP=1); needs about 2.5 x SIZE_GIB free.
# Environment: SIZE_GIB (2) for the identity files; PAIRS ("q4_K:q4_K q2_K:q4_K q8_0:q4_K")
# encodings A:B for --values (the same type twice means two seeds, so bytes differ and are
# hashed first; two types mean one seed, two encodings of the same weights); REPS (5)
# repetitions per benchmark (the best is reported: the machine may be shared).
set -euo pipefail

BUILD=${1:-build}
WORK=${2:-}
SIZE_GIB=${SIZE_GIB:-2}
PAIRS=${PAIRS:-"q4_K:q4_K q2_K:q4_K q8_0:q4_K"}
REPS=${REPS:-5}
DIFF=$BUILD/tools/gguf-diff
GEN=$BUILD/examples/make_tiny_moe
BENCH=$BUILD/bench/diff_bench
for exe in "$DIFF" "$GEN" "$BENCH" /usr/bin/time; do
  [[ -x $exe ]] || { echo "diff_bench: missing $exe (build it first)" >&2; exit 2; }
done
if [[ -z $WORK ]]; then WORK=$(mktemp -d /var/tmp/diff-bench.XXXXXX); fi
mkdir -p "$WORK"
cleanup() { [[ ${KEEP:-0} == 1 ]] || rm -rf "$WORK"; }
trap cleanup EXIT

# gen FILE RECIPE SEED LAYERS EXPERTS: one synthetic model (2048 wide, 1024-wide experts).
gen() {
  [[ -f $1 ]] && return
  echo "generating $1 ..." >&2
  "$GEN" -o "$1" --recipe "$2" --seed "$3" --layers "$4" --experts "$5" --embd 2048 --ff 1024 \
    --vocab 4096 --threads "$(nproc)" >/dev/null
}

# wall SECONDS of one command (best of REPS), output discarded; gguf-diff exits 0 or 1.
wall() {
  local best=
  for ((i = 0; i < REPS; i++)); do
    /usr/bin/time -f %e -o "$WORK/t" "$@" >/dev/null || [[ $? == 1 ]]
    best=$(awk -v b="$best" 'END { print (b == "" || $1 < b) ? $1 : b }' "$WORK/t")
  done
  echo "$best"
}

# Each routed-expert layer holds 3 x 2048 x 1024 x EXPERTS f16 weights (12 MiB per expert).
EXPERTS=32
LAYERS=$(awk -v g="$SIZE_GIB" -v e=$EXPERTS 'BEGIN { n = int(g * 1024 / (12 * e) + 0.5); print (n < 1 ? 1 : n) + 1 }')
A=$WORK/a-f16.gguf
B=$WORK/b-f16.gguf
gen "$A" f16 1 "$LAYERS" "$EXPERTS"
[[ -f $B ]] || cp "$A" "$B"
cat "$A" "$B" >/dev/null # page cache

echo "== byte identity: $(du -h "$A" | cut -f1) x 2, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
# Equal C and D: the values benchmarks, filtered out here, would have nothing to decode.
DIFF_BENCH_A=$A DIFF_BENCH_B=$B DIFF_BENCH_C=$A DIFF_BENCH_D=$B \
  "$BENCH" --benchmark_filter='xxh3|identity' --benchmark_repetitions="$REPS" 2>&1 |
  sed -n '/^byte identity/,/^$/p'
for t in 1 2; do
  s=$(wall "$DIFF" -q -j $t "$A" "$B")
  awk -v s="$s" -v t=$t -v f="$A" 'BEGIN {
    cmd = "stat -c %s " f; cmd | getline bytes; close(cmd)
    printf "gguf-diff -q -j%d (binary, end to end): %.2f s, %.2f GiB/s hashed, %.2f GiB/s/thread\n",
      t, s, 2 * bytes / 2^30 / s, 2 * bytes / 2^30 / s / t }'
done

for pair in $PAIRS; do
  ta=${pair%%:*}
  tb=${pair##*:}
  if [[ $ta == "$tb" ]]; then sb=2; else sb=1; fi
  C=$WORK/v-$ta-1.gguf
  D=$WORK/v-$tb-$sb.gguf
  gen "$C" "$ta" 1 4 8
  gen "$D" "$tb" "$sb" 4 8
  cat "$C" "$D" >/dev/null
  echo
  echo "== --values: A $ta (seed 1), B $tb (seed $sb)"
  DIFF_BENCH_A=$C DIFF_BENCH_B=$C DIFF_BENCH_C=$C DIFF_BENCH_D=$D \
    "$BENCH" --benchmark_filter='dequantize|values' --benchmark_repetitions="$REPS" 2>&1 |
    sed -n '/^--values/,/^$/p'
  for t in 1 2; do
    echo "gguf-diff --values -j$t (binary, end to end): $(wall "$DIFF" --values -j $t "$C" "$D") s"
  done
done
