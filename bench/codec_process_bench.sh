#!/usr/bin/env bash
# The recipe's codecs as whole processes: `gguf-requant -j 1 --type T` of a GGUF holding one
# f32 tensor of ROWS x 4096 gaussian weights (with an importance vector from a legacy imatrix
# .dat, or without) against ggml's `ggml_quantize_chunk` of the same floats and importance
# vector in its own process (bench/codec_process_bench.cpp `ggml`: ggml's reader finds the
# tensor, the floats are read, encoded, written). Runs alternate (ours, ggml, ours, ...) RUNS
# times per case; prints median wall and CPU (user+sys) seconds, the ratios ggml/ours (> 1:
# ours faster), the load average, and checks that both wrote the same bytes.
#
# Usage: bench/codec_process_bench.sh [BUILD_DIR] [CASE...]
#   BUILD_DIR  a build tree holding tools/gguf-requant and bench/codec_process_bench
#   CASE       TYPE or TYPE+im (with the importance vector); default: iq2_xxs+im q2_K+im q2_K
# Environment: ROWS (2048: one ds4 expert's gate), RUNS (5), GGUF_GGML_LIB (see README),
# REQUANT_ARGS (extra options for gguf-requant, e.g. "-j 2").
set -euo pipefail

BUILD=${1:-build}
shift || true
CASES=("$@")
[[ ${#CASES[@]} -gt 0 ]] || CASES=(iq2_xxs+im q2_K+im q2_K)
ROWS=${ROWS:-2048}
RUNS=${RUNS:-5}
REQUANT=$BUILD/tools/gguf-requant
HELPER=$BUILD/bench/codec_process_bench
for exe in "$REQUANT" "$HELPER" /usr/bin/time; do
  command -v "$exe" >/dev/null || { echo "codec_process_bench: missing $exe (build first)" >&2; exit 2; }
done
WORK=$(mktemp -d /var/tmp/codec-process-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$HELPER" make "$WORK/in.gguf" "$WORK/im.dat" "$ROWS"

# timed FILE CMD...: appends "wall cpu" of CMD to FILE.
timed() {
  local file=$1
  shift
  /usr/bin/time -f '%e %U %S' -o "$WORK/t" "$@" >/dev/null 2>"$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
  awk '{ printf "%s %.3f\n", $1, $2 + $3 }' "$WORK/t" >>"$file"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-12s %9s %9s %9s %9s %8s %8s  %s\n' case ours_wall ggml_wall ours_cpu ggml_cpu wall_x cpu_x bytes
for c in "${CASES[@]}"; do
  type=${c%+im}
  im=(--imatrix "$WORK/im.dat")
  dat=$WORK/im.dat
  [[ $c == *+im ]] || { im=(); dat=-; }
  rm -f "$WORK/ours" "$WORK/ggml"
  for ((r = 0; r < RUNS; ++r)); do
    # shellcheck disable=SC2086
    timed "$WORK/ours" "$REQUANT" "$WORK/in.gguf" -o "$WORK/out.gguf" --type "$type" "${im[@]}" \
      -j 1 --force -q ${REQUANT_ARGS:-}
    timed "$WORK/ggml" "$HELPER" ggml "$type" "$WORK/in.gguf" "$dat" "$WORK/out.bin"
  done
  same=identical
  "$HELPER" same "$WORK/out.gguf" "$WORK/out.bin" || same=DIFFER
  ow=$(cut -d' ' -f1 "$WORK/ours" | median) gw=$(cut -d' ' -f1 "$WORK/ggml" | median)
  oc=$(cut -d' ' -f2 "$WORK/ours" | median) gc=$(cut -d' ' -f2 "$WORK/ggml" | median)
  printf '%-12s %9s %9s %9s %9s %7.2fx %7.2fx  %s\n' "$c" "$ow" "$gw" "$oc" "$gc" \
    "$(echo "$gw / $ow" | bc -l)" "$(echo "$gc / $oc" | bc -l)" "$same"
done
echo "rows $ROWS x 4096 f32, $RUNS alternating runs each, medians; load: $(cut -d' ' -f1-3 /proc/loadavg)"
