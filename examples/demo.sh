#!/usr/bin/env bash
# The main job of gguf-surgery on a tiny DeepSeek-V4-style MoE (3-D routed-expert tensors):
# build a 2-bit base and a Q4_K donor from the same weights, splice the routed experts of the
# last two layers from the donor into the base byte for byte, then inspect and diff; last,
# publish an in-house 3-bit affine format of one layer's experts as q4_1 without changing a value.
# Usage: examples/demo.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail
build=${1:-build}
work=${2:-$build/demo}
tools=$build/tools
mkdir -p "$work"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

step "1. a tiny DeepSeek-style model at f16 (6 layers, 8 experts, 3-D expert tensors)"
run "$build/examples/make_tiny_moe" -o "$work/tiny-f16.gguf" --recipe f16 --layers 6 --force

step "2. the 2-bit base (the ds4 recipe) in one pass: routed gate/up iq2_xxs, routed down q2_K;"
echo "   attention, shared experts, output q8_0 (no imatrix here: iq2_xxs weighs columns by energy)"
run "$tools/gguf-requant" "$work/tiny-f16.gguf" -o "$work/base-2bit.gguf" \
  --role-type routed-gate,routed-up=iq2_xxs --role-type routed-down=q2_K \
  --role-type attn-proj,shared,output,dense-ffn=q8_0 --force

step "3. the Q4_K donor (same weights)"
run "$tools/gguf-requant" "$work/tiny-f16.gguf" -o "$work/donor-q4k.gguf" --type q4_K --role routed --force

step "4. what the base looks like"
run "$tools/gguf-inspect" "$work/base-2bit.gguf"

step "5. plan the splice: routed experts of layers 4-5 from the donor"
run "$tools/gguf-splice" "$work/base-2bit.gguf" --donor "$work/donor-q4k.gguf" --layers 4-5 --dry-run

step "6. splice (payloads copied byte for byte, output verified by read-back hashes)"
run "$tools/gguf-splice" "$work/base-2bit.gguf" --donor "$work/donor-q4k.gguf" --layers 4-5 \
  -o "$work/mixed.gguf" --force

step "7. the routed experts of the result"
run "$tools/gguf-inspect" -t --role routed "$work/mixed.gguf"

step "8. what changed (gguf-diff exits 1 when files differ)"
run "$tools/gguf-diff" "$work/base-2bit.gguf" "$work/mixed.gguf" || [ $? -eq 1 ]

step "9. which file is closer to the f16 reference, per routed tensor of layers 4-5"
run "$tools/gguf-diff" --values --reference "$work/tiny-f16.gguf" --layers 4-5 --role routed \
  "$work/base-2bit.gguf" "$work/mixed.gguf" || [ $? -eq 1 ]

step "10. an in-house 3-bit affine format (f16 scale and min per 64 columns) of layer 5's routed"
echo "    experts, published on top of the mixed file as q4_1: the same floats, proven by reading back"
run "$build/examples/make_packed_affine" "$work/tiny-f16.gguf" -o "$work/inhouse-3bit.safetensors" \
  --bits 3 --group 64 --layers 5 --role routed --force
run "$tools/gguf-requant" "$work/inhouse-3bit.safetensors" --base "$work/mixed.gguf" \
  -o "$work/published.gguf" --force

step "done: files in $work"
