#!/usr/bin/env bash
# Benchmark of gguf-requant's threads on the ds4 recipe (routed gate/up iq2_xxs, routed down
# q2_K, attention projections, shared experts, dense FFN and output q8_0, one run with
# --role-type rules): -j 1 against -j 2, alternated RUNS times. Prints wall and CPU time of the
# best run of each, the wall-clock speedup (issue 29's target: >= 1.8x on 2 cores), peak RSS,
# the load average before the runs (the figure means little on a busy machine) and whether the
# two outputs are byte-identical (cmp).
#
# Usage: bench/recipe_threads_bench.sh [BUILD_DIR] [WORK_DIR]
#   BUILD_DIR  a build tree holding tools/gguf-requant and examples/make_tiny_moe (default: build)
#   WORK_DIR   where the model files go (default: a new directory under /var/tmp; removed at the
#              end unless KEEP=1). Needs about 2 x the model size free.
# Environment: LAYERS (6), EXPERTS (8), EMBD (1024), FF (512) set the size of the f16 input;
# RUNS (3) the repetitions of each thread count.
set -euo pipefail

BUILD=${1:-build}
WORK=${2:-}
LAYERS=${LAYERS:-6}
EXPERTS=${EXPERTS:-8}
EMBD=${EMBD:-1024}
FF=${FF:-512}
RUNS=${RUNS:-3}
REQUANT=$BUILD/tools/gguf-requant
GEN=$BUILD/examples/make_tiny_moe
for exe in "$REQUANT" "$GEN" /usr/bin/time cmp; do
  command -v "$exe" >/dev/null || { echo "recipe_threads_bench: missing $exe (build first)" >&2; exit 2; }
done
if [[ -z $WORK ]]; then WORK=$(mktemp -d /var/tmp/recipe-threads.XXXXXX); fi
mkdir -p "$WORK"
cleanup() { [[ ${KEEP:-0} == 1 ]] || rm -rf "$WORK"; }
trap cleanup EXIT

IN=$WORK/in-f16.gguf
if [[ ! -f $IN ]]; then
  echo "generating $IN ..." >&2
  "$GEN" -o "$IN" --recipe f16 --layers "$LAYERS" --experts "$EXPERTS" --embd "$EMBD" \
    --ff "$FF" --vocab 4096 --threads "$(nproc)" >/dev/null
fi

# run THREADS: one recipe run; appends "threads wall cpu maxrss_kib" to $WORK/times.
run() {
  /usr/bin/time -f "$1 %e %U %S %M" -a -o "$WORK/times.raw" "$REQUANT" "$IN" \
    -o "$WORK/out-j$1.gguf" -j "$1" --force -q \
    --role-type routed-gate,routed-up=iq2_xxs --role-type routed-down=q2_K \
    --role-type attn-proj,shared,output,dense-ffn=q8_0
}

: >"$WORK/times.raw"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
cat "$IN" >/dev/null
for ((i = 0; i < RUNS; i++)); do
  if ((i % 2)); then run 2; run 1; else run 1; run 2; fi
done
if cmp -s "$WORK/out-j1.gguf" "$WORK/out-j2.gguf"; then SAME=identical; else SAME=DIFFERENT; fi

awk -v load="$LOAD_BEFORE" -v same="$SAME" -v runs="$RUNS" -v inb="$(stat -c %s "$IN")" '
  { t = $1; w = $2; if (!(t in best) || w < best[t]) { best[t] = w; cpu[t] = $3 + $4; rss[t] = $5 } }
  END {
    printf "recipe_threads_bench: f16 input %.1f MiB, %d runs each, load before %s\n", inb / 1048576, runs, load
    printf "  -j 1: %6.2f s wall  %6.2f s CPU  peak RSS %d MiB\n", best[1], cpu[1], rss[1] / 1024
    printf "  -j 2: %6.2f s wall  %6.2f s CPU  peak RSS %d MiB\n", best[2], cpu[2], rss[2] / 1024
    printf "  speedup -j 2 / -j 1: %.2fx wall-clock (target >= 1.8x); outputs %s\n", best[1] / best[2], same
  }' "$WORK/times.raw"
