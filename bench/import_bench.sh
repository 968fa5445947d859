#!/usr/bin/env bash
# Benchmark of the packed-affine import (gguf-requant IN.safetensors): the routed experts of a
# DeepSeek-style model as 4-bit affine codes (make_packed_affine), imported as q4_1 with its
# read-back proof, at 1 and 2 threads; next to a plain copy_file_range + fsync of a file the
# size of the output (what moving those bytes costs at the least). Prints wall time, MB/s of
# output, the ratio to the copy and peak RSS (from /usr/bin/time -v).
#
# Usage: bench/import_bench.sh [BUILD_DIR] [WORK_DIR]
#   BUILD_DIR  a build tree holding tools/gguf-requant, examples/make_tiny_moe and
#              examples/make_packed_affine (default: build)
#   WORK_DIR   where the files go (default: a new directory under /var/tmp, removed at the end
#              unless KEEP=1); needs about 3 GB free with the defaults.
# Environment: LAYERS (4: 1 dense + 3 MoE), EXPERTS (32), EMBD (2048), FF (1024), BITS (4),
# GROUP (32), RUNS (3; the median is reported).
set -euo pipefail

BUILD=${1:-build}
WORK=${2:-}
LAYERS=${LAYERS:-4} EXPERTS=${EXPERTS:-32} EMBD=${EMBD:-2048} FF=${FF:-1024}
BITS=${BITS:-4} GROUP=${GROUP:-32} RUNS=${RUNS:-3}
REQUANT=$BUILD/tools/gguf-requant GEN=$BUILD/examples/make_tiny_moe
PACK=$BUILD/examples/make_packed_affine
for exe in "$REQUANT" "$GEN" "$PACK" /usr/bin/time python3; do
  command -v "$exe" >/dev/null || { echo "import_bench: missing $exe (build first)" >&2; exit 2; }
done
if [[ -z $WORK ]]; then WORK=$(mktemp -d /var/tmp/import-bench.XXXXXX); fi
mkdir -p "$WORK"
cleanup() { [[ ${KEEP:-0} == 1 ]] || rm -rf "$WORK"; }
trap cleanup EXIT

MODEL=$WORK/model-f16.gguf IN=$WORK/inhouse.safetensors OUT=$WORK/out.gguf COPY=$WORK/copy.gguf
if [[ ! -f $IN ]]; then
  echo "generating $MODEL and $IN ..." >&2
  "$GEN" -o "$MODEL" --recipe f16 --layers "$LAYERS" --experts "$EXPERTS" --embd "$EMBD" \
    --ff "$FF" --vocab 4096 --threads "$(nproc)" --force >/dev/null
  "$PACK" "$MODEL" -o "$IN" --bits "$BITS" --group "$GROUP" --role routed >&2
  rm -f "$MODEL"
fi
cat "$IN" >/dev/null  # page cache: both sides read from memory

COPY_PY='
import os, sys
src = os.open(sys.argv[1], os.O_RDONLY)
dst = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
left = os.fstat(src).st_size
while left > 0:
    n = os.copy_file_range(src, dst, min(left, 1 << 30))
    if n <= 0: sys.exit("copy_file_range stopped")
    left -= n
os.fsync(dst)
'
# median SECONDS and peak RSS KiB of RUNS runs of a command; the output removed before each.
measure() {
  local times=() rss=0
  for ((i = 0; i < RUNS; i++)); do
    rm -f "$OUT" "$COPY"
    sync
    /usr/bin/time -f '%e %M' -o "$WORK/t" "$@" >/dev/null
    read -r t m <"$WORK/t"
    times+=("$t")
    ((m > rss)) && rss=$m
  done
  printf '%s %s\n' "$(printf '%s\n' "${times[@]}" | sort -g | sed -n "$(((RUNS + 1) / 2))p")" "$rss"
}

read -r t1 r1 < <(measure "$REQUANT" "$IN" -o "$OUT" --threads 1)
read -r t2 r2 < <(measure "$REQUANT" "$IN" -o "$OUT" --threads 2)
"$REQUANT" "$IN" -o "$OUT" --force >/dev/null
size=$(stat -c %s "$OUT")
cp "$OUT" "$WORK/src.gguf"
cat "$WORK/src.gguf" >/dev/null
read -r tc rc < <(measure python3 -c "$COPY_PY" "$WORK/src.gguf" "$COPY")
echo "== packed-affine import: $(du -h "$IN" | cut -f1) of $BITS-bit codes (groups of $GROUP) -> $((size >> 20)) MiB of q4_1, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v s="$size" -v t1="$t1" -v t2="$t2" -v tc="$tc" -v r1="$r1" -v r2="$r2" -v rc="$rc" 'BEGIN {
  printf "%-34s %8s %10s %9s %10s\n", "run", "wall s", "MB/s out", "vs copy", "peak RSS"
  printf "%-34s %8.2f %10.1f %8.2fx %7d MiB\n", "import --threads 1 (with proof)", t1, s / 1e6 / t1, tc / t1, r1 / 1024
  printf "%-34s %8.2f %10.1f %8.2fx %7d MiB\n", "import --threads 2 (with proof)", t2, s / 1e6 / t2, tc / t2, r2 / 1024
  printf "%-34s %8.2f %10.1f %8.2fx %7d MiB\n", "copy_file_range + fsync (peer)", tc, s / 1e6 / tc, 1, rc / 1024
}'
