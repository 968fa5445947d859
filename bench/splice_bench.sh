#!/usr/bin/env bash
# Benchmark of gguf-splice against a plain copy_file_range copy of the same output size, in
# one run: builds a DeepSeek-style base (f16) and donor (bf16) of several GiB with the
# library's synthetic model generator, splices the routed experts of 6 layers, copies the
# output with a bare copy_file_range loop (+ fsync, as the writer does) and with cp (+ sync of
# the copy), and prints throughput, their ratio and peak RSS (from /usr/bin/time -v). As root
# with mkfs.xfs (xfsprogs) it also makes a loop-mounted XFS with reflink=1 in WORK_DIR, re-lays
# base and donor there with --align 4096, and times the same splice between them ("xfs-4k":
# payload blocks shared, not copied), with the disk it took (df before and after).
#
# Usage: bench/splice_bench.sh [BUILD_DIR] [WORK_DIR]
#   BUILD_DIR  a build tree holding tools/gguf-splice and examples/make_tiny_moe
#              (default: build)
#   WORK_DIR   where the model files go (default: a new directory under /var/tmp; removed at
#              the end unless KEEP=1). Needs about 4.5 x the base size free.
# Environment: LAYERS (10: 1 dense + 9 MoE), EXPERTS (40), EMBD (2048), FF (1024) set the
# size: each routed tensor is EMBD*FF*EXPERTS f16 weights (160 MiB by default, base ~4.3 GiB).
# RUNS (3) repetitions of each timing, the median is reported. KEEP=1 keeps the files and
# reuses them on the next run with the same WORK_DIR. COLD=1 leaves the inputs out of the
# page cache, so both sides read them from the disk.
#
# Both sides start alike: no output file from an earlier run (no unlink to pay for, nothing
# dirty to flush), every model file evicted from the page cache (posix_fadvise DONTNEED),
# then only this run's inputs read back in (base and donor for the splice, the spliced
# file for the copy), so neither side is favoured or squeezed by what the cache holds.
set -euo pipefail

BUILD=${1:-build}
WORK=${2:-}
LAYERS=${LAYERS:-10}
EXPERTS=${EXPERTS:-40}
EMBD=${EMBD:-2048}
FF=${FF:-1024}
RUNS=${RUNS:-3}
SPLICE=$BUILD/tools/gguf-splice
GEN=$BUILD/examples/make_tiny_moe
for exe in "$SPLICE" "$GEN" /usr/bin/time python3; do
  command -v "$exe" >/dev/null || { echo "splice_bench: missing $exe (build first)" >&2; exit 2; }
done
if [[ -z $WORK ]]; then WORK=$(mktemp -d /var/tmp/splice-bench.XXXXXX); fi
mkdir -p "$WORK"
XMNT=$WORK/xfs XIMG=$WORK/xfs.img
cleanup() {
  if mountpoint -q "$XMNT" 2>/dev/null; then umount "$XMNT" || umount -l "$XMNT"; fi
  rm -f "$XIMG"
  [[ ${KEEP:-0} == 1 ]] || rm -rf "$WORK"
}
trap cleanup EXIT

BASE=$WORK/base.gguf DONOR=$WORK/donor.gguf OUT=$WORK/out.gguf COPY=$WORK/copy.gguf
FIRST=$((LAYERS - 6)) LAST=$((LAYERS - 1))
gen() {  # gen PATH TYPE SEED
  [[ -f $1 ]] && return 0
  "$GEN" -o "$1" --recipe "$2" --seed "$3" --layers "$LAYERS" --experts "$EXPERTS" \
    --embd "$EMBD" --ff "$FF" --vocab 4096 --threads "$(nproc)" >/dev/null
}
echo "generating base (f16) and donor (bf16) in $WORK ..." >&2
gen "$BASE" f16 1
gen "$DONOR" bf16 2

# A bare copy: copy_file_range over the whole file in 1 GiB requests, then fsync.
COPY_PY='
import os, sys
src = os.open(sys.argv[1], os.O_RDONLY)
dst = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
left = os.fstat(src).st_size
while left > 0:
    n = os.copy_file_range(src, dst, min(left, 1 << 30))
    if n == 0:
        sys.exit("short copy")
    left -= n
os.fsync(dst)
os.close(dst)
'

# run LABEL CMD...: appends "label seconds maxrss_kib" to $WORK/times.
run() {
  local label=$1
  shift
  /usr/bin/time -v -o "$WORK/time.txt" "$@" >/dev/null
  awk -v l="$label" '
    /Elapsed \(wall clock\)/ { n = split($NF, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i] }
    /Maximum resident set size/ { r = $NF }
    END { print l, s, r }' "$WORK/time.txt" >>"$WORK/times"
}

: >"$WORK/times"
"$SPLICE" "$BASE" --donor "$DONOR" --layers "$FIRST-$LAST" -o "$OUT" --force --no-verify >/dev/null
EVICT_PY='
import os, sys
for path in sys.argv[1:]:
    if os.path.exists(path):
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
'
# fresh OUTPUT INPUT...: removes OUTPUT, flushes dirty pages, evicts every model file from
# the page cache, then reads the inputs back in (unless COLD=1).
fresh() {
  rm -f "$1"
  sync
  python3 -c "$EVICT_PY" "$BASE" "$DONOR" "$OUT" "$COPY"
  shift
  [[ ${COLD:-0} == 1 ]] || cat "$@" >/dev/null
}
for ((i = 0; i < RUNS; i++)); do
  fresh "$OUT" "$BASE" "$DONOR"
  run splice "$SPLICE" "$BASE" --donor "$DONOR" --layers "$FIRST-$LAST" -o "$OUT"
  fresh "$OUT" "$BASE" "$DONOR"
  run splice-noverify "$SPLICE" "$BASE" --donor "$DONOR" --layers "$FIRST-$LAST" -o "$OUT" \
    --no-verify
  fresh "$COPY" "$OUT"
  run copy python3 -c "$COPY_PY" "$OUT" "$COPY"
  fresh "$COPY" "$OUT"
  run cp sh -c 'cp "$1" "$2" && sync "$2"' cp "$OUT" "$COPY"
done

# The same splice between 4096-aligned files on a copy-on-write XFS (root and mkfs.xfs only).
if [[ $(id -u) == 0 ]] && command -v mkfs.xfs >/dev/null; then
  truncate -s $(( 3 * $(stat -c %s "$BASE") + 3 * $(stat -c %s "$DONOR") )) "$XIMG"
  mkfs.xfs -q -m reflink=1 "$XIMG"
  mkdir -p "$XMNT"
  mount -o loop "$XIMG" "$XMNT"
  "$SPLICE" "$BASE" --align 4096 -o "$XMNT/base.gguf" -q
  "$SPLICE" "$DONOR" --align 4096 -o "$XMNT/donor.gguf" -q
  for ((i = 0; i < RUNS; i++)); do
    rm -f "$XMNT/out.gguf"
    sync
    python3 -c "$EVICT_PY" "$XMNT/base.gguf" "$XMNT/donor.gguf" "$BASE" "$DONOR" "$OUT" "$COPY"
    [[ ${COLD:-0} == 1 ]] || cat "$XMNT/base.gguf" "$XMNT/donor.gguf" >/dev/null
    used=$(df --output=used -B1 "$XMNT" | tail -1)
    run xfs-4k "$SPLICE" "$XMNT/base.gguf" --donor "$XMNT/donor.gguf" --layers "$FIRST-$LAST" \
      -o "$XMNT/out.gguf"
    sync
    echo "xfs-extra $(( $(df --output=used -B1 "$XMNT" | tail -1) - used )) 0" >>"$WORK/times"
  done
else
  echo "splice_bench: not root or no mkfs.xfs: the XFS run is skipped" >&2
fi

OUT_BYTES=$(stat -c %s "$OUT")
BASE_BYTES=$(stat -c %s "$BASE")
python3 - "$WORK/times" "$OUT_BYTES" "$BASE_BYTES" "$FIRST-$LAST" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
out_bytes, base_bytes, layers = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
med = lambda label, col: statistics.median(float(r[col]) for r in rows if r[0] == label)
gib = 1 << 30
copy_s = med("copy", 1)
print(f"base {base_bytes / gib:.2f} GiB, output {out_bytes / gib:.2f} GiB "
      f"(routed experts of layers {layers} spliced); median of {sum(r[0] == 'copy' for r in rows)} runs")
print(f"{'run':<18}{'seconds':>9}{'MiB/s':>10}{'vs copy':>9}{'time/copy':>11}{'peak RSS':>12}")
for label in ("splice", "splice-noverify", "copy", "cp", "xfs-4k"):
    if not any(r[0] == label for r in rows):
        continue
    s = med(label, 1)
    rss = max(int(r[2]) for r in rows if r[0] == label)
    if s == 0:  # under /usr/bin/time's 0.01 s resolution (an XFS splice on an idle machine)
        print(f"{label:<18}{'<0.01':>9}{'>' + format(out_bytes / (1 << 20) / 0.01, '.0f'):>10}"
              f"{'>' + format(copy_s / 0.01, '.0f'):>8}x{'<' + format(0.01 / copy_s, '.3f'):>10}x"
              f"{rss / 1024:>8.1f} MiB")
        continue
    print(f"{label:<18}{s:>9.2f}{out_bytes / (1 << 20) / s:>10.0f}{copy_s / s:>8.2f}x"
          f"{s / copy_s:>10.3f}x{rss / 1024:>8.1f} MiB")
if any(r[0] == "xfs-extra" for r in rows):
    extra = statistics.median(int(r[1]) for r in rows if r[0] == "xfs-extra")
    print(f"xfs-4k took {extra / (1 << 20):.2f} MiB of new disk for a "
          f"{out_bytes / (1 << 20):.0f} MiB output ({100 * extra / out_bytes:.3f}%)")
EOF
