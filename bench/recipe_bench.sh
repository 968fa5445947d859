#!/usr/bin/env bash
# Benchmark of gguf-requant's per-tensor types: the ds4 recipe (routed gate/up iq2_xxs, routed
# down q2_K, attention projections, shared experts, dense FFN and output q8_0) as ONE run with
# --role-type rules against the THREE single-type runs it replaces (each writes and verifies a
# whole intermediate file). Prints wall time (best of RUNS), bytes written, peak RSS, and
# whether both final files are byte-identical (cmp).
#
# Usage: bench/recipe_bench.sh [BUILD_DIR] [WORK_DIR]
#   BUILD_DIR  a build tree holding tools/gguf-requant and examples/make_tiny_moe (default: build)
#   WORK_DIR   where the model files go (default: a new directory under /var/tmp; removed at the
#              end unless KEEP=1). Needs about 3 x the model size free.
# Environment: LAYERS (6), EXPERTS (8), EMBD (1024), FF (512) set the size of the f16 input;
# RUNS (3) the repetitions (alternated, best reported); THREADS (0: all cores).
set -euo pipefail

BUILD=${1:-build}
WORK=${2:-}
LAYERS=${LAYERS:-6}
EXPERTS=${EXPERTS:-8}
EMBD=${EMBD:-1024}
FF=${FF:-512}
RUNS=${RUNS:-3}
THREADS=${THREADS:-0}
REQUANT=$BUILD/tools/gguf-requant
GEN=$BUILD/examples/make_tiny_moe
for exe in "$REQUANT" "$GEN" /usr/bin/time cmp; do
  command -v "$exe" >/dev/null || { echo "recipe_bench: missing $exe (build first)" >&2; exit 2; }
done
if [[ -z $WORK ]]; then WORK=$(mktemp -d /var/tmp/recipe-bench.XXXXXX); fi
mkdir -p "$WORK"
cleanup() { [[ ${KEEP:-0} == 1 ]] || rm -rf "$WORK"; }
trap cleanup EXIT

IN=$WORK/in-f16.gguf
if [[ ! -f $IN ]]; then
  echo "generating $IN ..." >&2
  "$GEN" -o "$IN" --recipe f16 --layers "$LAYERS" --experts "$EXPERTS" --embd "$EMBD" \
    --ff "$FF" --vocab 4096 --threads "$(nproc)" >/dev/null
fi
REST=attn-proj,shared,output,dense-ffn

# timed NAME CMD...: runs CMD under /usr/bin/time, appends "NAME seconds maxrss_kib" to times.
timed() {
  local name=$1
  shift
  /usr/bin/time -v -o "$WORK/time.txt" "$@" >/dev/null 2>"$WORK/stderr.txt" ||
    { cat "$WORK/stderr.txt" >&2; exit 1; }
  awk -v n="$name" '
    /Elapsed \(wall clock\)/ { k = split($NF, p, ":"); s = 0; for (i = 1; i <= k; i++) s = s * 60 + p[i] }
    /Maximum resident set size/ { r = $NF }
    END { print n, s, r }' "$WORK/time.txt" >>"$WORK/times"
}

one_pass() {
  timed one "$REQUANT" "$IN" -o "$WORK/one.gguf" -j "$THREADS" --force \
    --role-type routed-gate,routed-up=iq2_xxs --role-type routed-down=q2_K --role-type "$REST=q8_0"
}

# The three runs, timed as one: each writes (and verifies) a whole file the next one reads.
three_steps() {
  local t0 t1
  t0=$(date +%s.%N)
  "$REQUANT" "$IN" -o "$WORK/s1.gguf" -j "$THREADS" --force -q --type iq2_xxs \
    --role routed-gate,routed-up 2>/dev/null
  "$REQUANT" "$WORK/s1.gguf" -o "$WORK/s2.gguf" -j "$THREADS" --force -q --type q2_K \
    --role routed-down
  "$REQUANT" "$WORK/s2.gguf" -o "$WORK/three.gguf" -j "$THREADS" --force -q --type q8_0 \
    --role "$REST"
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { print "three", b - a, "-" }' >>"$WORK/times"
}

: >"$WORK/times"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
cat "$IN" >/dev/null
for ((i = 0; i < RUNS; i++)); do
  if ((i % 2)); then three_steps; one_pass; else one_pass; three_steps; fi
done
if cmp -s "$WORK/one.gguf" "$WORK/three.gguf"; then SAME=identical; else SAME=DIFFERENT; fi
IN_BYTES=$(stat -c %s "$IN")
ONE_BYTES=$(stat -c %s "$WORK/one.gguf")
THREE_BYTES=$(($(stat -c %s "$WORK/s1.gguf") + $(stat -c %s "$WORK/s2.gguf") + ONE_BYTES))

awk -v load="$LOAD_BEFORE" -v same="$SAME" -v inb="$IN_BYTES" -v oneb="$ONE_BYTES" \
  -v threeb="$THREE_BYTES" -v runs="$RUNS" '
  { if (!($1 in best) || $2 < best[$1]) best[$1] = $2; if ($3 != "-") rss[$1] = $3 }
  END {
    printf "recipe_bench: f16 input %.1f MiB, %d runs each, load before %s\n", inb / 1048576, runs, load
    printf "  one run (--role-type rules):   %7.2f s  writes %7.1f MiB  peak RSS %d MiB\n",
           best["one"], oneb / 1048576, rss["one"] / 1024
    printf "  three single-type runs:        %7.2f s  writes %7.1f MiB\n", best["three"], threeb / 1048576
    printf "  one run / three runs: %.2fx the time, %.2fx the bytes written; final files %s\n",
           best["one"] / best["three"], oneb / threeb, same
  }' "$WORK/times"
