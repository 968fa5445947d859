#!/usr/bin/env bash
# Benchmark of the budgeted mix planner (gguf-requant --target-size): on a DeepSeek-shaped f16
# MoE with structured weights (make_tiny_moe --structured), the wall time of planning alone
# (--dry-run: the sampled measurement and the solver), of planning and writing, and of one full
# quantization to the cheapest default candidate (iq1_m) and to q2_K, all with the same
# threads; then the planner's evidence reports from the test binary (model error of planned vs
# uniform mixes; mean KL in real llama.cpp and its rank correlation with the model error).
#
# Usage: bench/planner_bench.sh [BUILD_DIR] [WORK_DIR]
#   BUILD_DIR  a build tree with tools/gguf-requant, examples/make_tiny_moe and tests/gguf_tests
#   WORK_DIR   where the files go (default: a new directory under /var/tmp, removed at the end
#              unless KEEP=1)
# Environment: LAYERS (5), EXPERTS (8), EMBD (1024), FF (512), THREADS (2).
set -euo pipefail

BUILD=${1:-build}
WORK=${2:-}
LAYERS=${LAYERS:-5}
EXPERTS=${EXPERTS:-8}
EMBD=${EMBD:-1024}
FF=${FF:-512}
THREADS=${THREADS:-2}
REQUANT=$BUILD/tools/gguf-requant
GEN=$BUILD/examples/make_tiny_moe
TESTS=$BUILD/tests/gguf_tests
for exe in "$REQUANT" "$GEN" "$TESTS"; do
  [[ -x $exe ]] || { echo "planner_bench: missing $exe (build first)" >&2; exit 2; }
done
if [[ -z $WORK ]]; then WORK=$(mktemp -d /var/tmp/planner-bench.XXXXXX); fi
mkdir -p "$WORK"
cleanup() { [[ ${KEEP:-0} == 1 ]] || rm -rf "$WORK"; }
trap cleanup EXIT

IN=$WORK/in-f16.gguf
[[ -f $IN ]] || "$GEN" -o "$IN" --recipe f16 --structured --layers "$LAYERS" \
  --experts "$EXPERTS" --embd "$EMBD" --ff "$FF" --vocab 4096 --threads "$THREADS" >/dev/null

seconds() {  # wall seconds of a command (its output discarded)
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null
  t1=$(date +%s.%N)
  python3 -c "print(f'{$t1 - $t0:.2f}')"
}

echo "model: $(stat -c %s "$IN") bytes f16 ($LAYERS layers, $EXPERTS experts, embd $EMBD, ff $FF); threads $THREADS"
t_q2=$(seconds "$REQUANT" "$IN" -o "$WORK/u.gguf" --type q8_0 --role-type routed=q2_K -j "$THREADS" --force -q)
SIZE=$(stat -c %s "$WORK/u.gguf")
t_iq1=$(seconds "$REQUANT" "$IN" -o "$WORK/iq1.gguf" --type iq1_m -j "$THREADS" --force -q)
t_q2k=$(seconds "$REQUANT" "$IN" -o "$WORK/q2.gguf" --type q2_K -j "$THREADS" --force -q)
t_plan=$(seconds "$REQUANT" "$IN" -o "$WORK/p.gguf" --target-size "$SIZE" --dry-run -j "$THREADS")
t_plan_q=$(seconds "$REQUANT" "$IN" -o "$WORK/p.gguf" --target-size "$SIZE" -j "$THREADS" \
  --candidates q2_K,q3_K,q4_K,q5_K,q6_K,q8_0 --dry-run)
t_write=$(seconds "$REQUANT" "$IN" -o "$WORK/p.gguf" --target-size "$SIZE" -j "$THREADS" --force -q)
echo "budget: $SIZE bytes (routed q2_K + rest q8_0); planned file $(stat -c %s "$WORK/p.gguf") bytes"
printf '%-52s %8s s\n' "full quantization to iq1_m (cheapest candidate)" "$t_iq1" \
  "full quantization to q2_K" "$t_q2k" \
  "uniform mix routed q2_K + rest q8_0" "$t_q2" \
  "plan only, default candidates (--dry-run)" "$t_plan" \
  "plan only, k-quant candidates + q8_0 (--dry-run)" "$t_plan_q" \
  "plan and write, default candidates" "$t_write"
python3 -c "print(f'planning / full iq1_m quantization: {$t_plan / $t_iq1:.2f}')"

"$TESTS" --gtest_also_run_disabled_tests \
  --gtest_filter='planner.DISABLED_UniformMixReport:LlamaE2E.DISABLED_PlannerKlReport' |
  grep -v '^\[\|^Running\|^Note\|^$'
