#!/usr/bin/env bash
# Benchmark of gguf-requant's threading: builds an f16 DeepSeek-style MoE of about 0.8 GB with
# the library's synthetic model generator, requantizes it to q4_K with --threads 1 and
# --threads 2, and prints wall time (best of RUNS), the 2-thread speedup (target >= 1.8x),
# peak RSS (from /usr/bin/time -v), and whether both outputs are byte-identical (cmp).
#
# Usage: bench/requant_bench.sh [BUILD_DIR] [WORK_DIR]
#   BUILD_DIR  a build tree holding tools/gguf-requant and examples/make_tiny_moe
#              (default: build)
#   WORK_DIR   where the model files go (default: a new directory under /var/tmp; removed at
#              the end unless KEEP=1). Needs about 1.5 x the model size free.
# Environment: LAYERS (6: 1 dense + 5 MoE), EXPERTS (12), EMBD (2048), FF (1024) set the size:
# each MoE layer holds 3 x EMBD x FF x EXPERTS routed weights. TYPE (q4_K) is the target type,
# RUNS (3) the repetitions of each thread count (best is reported). KEEP=1 keeps the files and
# reuses the input on the next run with the same WORK_DIR.
set -euo pipefail

BUILD=${1:-build}
WORK=${2:-}
LAYERS=${LAYERS:-6}
EXPERTS=${EXPERTS:-12}
EMBD=${EMBD:-2048}
FF=${FF:-1024}
TYPE=${TYPE:-q4_K}
RUNS=${RUNS:-3}
REQUANT=$BUILD/tools/gguf-requant
GEN=$BUILD/examples/make_tiny_moe
for exe in "$REQUANT" "$GEN" /usr/bin/time python3 cmp; do
  command -v "$exe" >/dev/null || { echo "requant_bench: missing $exe (build first)" >&2; exit 2; }
done
if [[ -z $WORK ]]; then WORK=$(mktemp -d /var/tmp/requant-bench.XXXXXX); fi
mkdir -p "$WORK"
cleanup() { [[ ${KEEP:-0} == 1 ]] || rm -rf "$WORK"; }
trap cleanup EXIT

IN=$WORK/in-f16.gguf
if [[ ! -f $IN ]]; then
  echo "generating $IN ..." >&2
  "$GEN" -o "$IN" --recipe f16 --layers "$LAYERS" --experts "$EXPERTS" --embd "$EMBD" \
    --ff "$FF" --vocab 4096 --threads "$(nproc)" >/dev/null
fi

# run THREADS: one requant; appends "threads seconds maxrss_kib cpu_seconds" to $WORK/times.
run() {
  local threads=$1
  /usr/bin/time -v -o "$WORK/time.txt" \
    "$REQUANT" "$IN" -o "$WORK/out-t$threads.gguf" --type "$TYPE" --threads "$threads" \
    --force >/dev/null
  awk -v t="$threads" '
    /Elapsed \(wall clock\)/ { n = split($NF, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i] }
    /Maximum resident set size/ { r = $NF }
    /User time \(seconds\)|System time \(seconds\)/ { c += $NF }
    END { print t, s, r, c }' "$WORK/time.txt" >>"$WORK/times"
}

: >"$WORK/times"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
# Warm the page cache so every timed run reads its input from memory.
cat "$IN" >/dev/null
# Alternate the thread counts so both see the same background load.
for ((i = 0; i < RUNS; i++)); do
  run 1
  run 2
done
if cmp -s "$WORK/out-t1.gguf" "$WORK/out-t2.gguf"; then SAME=identical; else SAME=DIFFERENT; fi

# On a busy machine the wall-clock speedup is capped by the CPU share we get, not by requant.
# One more --threads 2 run, sampling each thread's CPU time: total / busiest thread is the
# speedup two free cores would give (serial phases run on one thread; a starved thread only
# makes the estimate pessimistic, since work-stealing moves its share to the other).
ESTIMATE=$(python3 - "$REQUANT" "$IN" "$WORK/out-est.gguf" "$TYPE" <<'PYEOF'
import os, subprocess, sys, time
req, inp, out, typ = sys.argv[1:5]
p = subprocess.Popen([req, inp, "-o", out, "--type", typ, "--threads", "2", "--force"],
                     stdout=subprocess.DEVNULL)
ticks = {}
while p.poll() is None:
    try:
        tids = os.listdir(f"/proc/{p.pid}/task")
    except OSError:
        tids = []
    for tid in tids:
        try:
            stat = open(f"/proc/{p.pid}/task/{tid}/stat").read()
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2:].split()
        ticks[tid] = int(f[11]) + int(f[12])  # utime + stime
    time.sleep(0.05)
hz = os.sysconf("SC_CLK_TCK")
busiest, total = max(ticks.values()), sum(ticks.values())
print(f"{total / busiest:.2f}x ({len(ticks)} threads, busiest {busiest / hz:.1f} of "
      f"{total / hz:.1f} CPU s)")
PYEOF
)

python3 - "$WORK/times" "$(stat -c %s "$IN")" "$(stat -c %s "$WORK/out-t1.gguf")" "$TYPE" \
  "$SAME" "$LOAD_BEFORE / $(cut -d' ' -f1-3 /proc/loadavg)" "$ESTIMATE" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1])]
in_bytes, out_bytes, typ, same, load = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
estimate = sys.argv[7]
best = lambda t: min(float(r[1]) for r in rows if r[0] == t)
all_s = lambda t: " ".join(f"{float(r[1]):.1f}" for r in rows if r[0] == t)
rss = lambda t: max(int(r[2]) for r in rows if r[0] == t) / 1024
# CPU seconds / wall seconds of the best run: 2.0 would be two cores busy throughout. Far less
# means other processes had the cores, and the speedup says little about requant itself.
util = lambda t: min((float(r[1]), float(r[3])) for r in rows if r[0] == t)
busy = lambda t: util(t)[1] / util(t)[0]
mib = 1 << 20
print(f"requant f16 -> {typ}: input {in_bytes / mib:.0f} MiB, output {out_bytes / mib:.0f} MiB; "
      f"best of {sum(r[0] == '1' for r in rows)} runs")
print(f"load average (1/5/15 min) before / after: {load}")
print(f"{'threads':<8}{'best s':>8}{'MiB/s in':>10}{'cores busy':>11}{'peak RSS':>12}   all runs (s)")
for t in ("1", "2"):
    print(f"{t:<8}{best(t):>8.1f}{in_bytes / mib / best(t):>10.1f}{busy(t):>11.2f}"
          f"{rss(t):>8.1f} MiB   {all_s(t)}")
print(f"2-thread speedup: {best('1') / best('2'):.2f}x wall clock (target >= 1.8x); outputs {same}")
print(f"2-core speedup from per-thread CPU time (total / busiest thread): {estimate}")
EOF
[[ $SAME == identical ]]
