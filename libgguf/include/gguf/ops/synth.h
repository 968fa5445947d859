// Synthetic models shaped like real ones (a scaled-down DeepSeek-V4-style MoE with 3-D expert
// tensors), for the demo, tests and benchmarks. Weights are deterministic in the seed.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "gguf/format/types.h"
#include "gguf/write/plan.h"

namespace gguf {

struct MoeSpec {
  std::string name = "tiny-ds4";
  int n_layers = 4;
  int n_dense_layers = 1;  // leading layers with a dense FFN instead of experts
  int n_experts = 8;
  int n_expert_used = 2;
  int n_embd = 256;
  int n_ff_exp = 256;
  int n_ff_dense = 512;
  int q_lora = 256;
  int kv_lora = 256;
  int n_head = 4;
  int head_dim = 64;
  int vocab = 1024;
  uint32_t alignment = 32;
  uint64_t seed = 1;
  // Types by role (the ds4 recipe by default, scaled down).
  GgmlType routed_gate_up = GgmlType::F32;
  GgmlType routed_down = GgmlType::F32;
  GgmlType attn_proj = GgmlType::F32;
  GgmlType shared = GgmlType::F32;
  GgmlType output = GgmlType::F32;
  GgmlType embedding = GgmlType::F32;
  GgmlType dense = GgmlType::F32;
  unsigned threads = 1;
  // Weights with trained-looking structure (outlier columns, uneven row, column and expert
  // scales) instead of i.i.d. gaussians: what makes some tensors worth more bits than others.
  bool structured = false;
};

// The ds4 recipe's types on top of spec (gate/up iq2_xxs, down q2_K, attention projections,
// shared experts and output q8_0, embedding f16); with imatrix-free fallback where needed.
MoeSpec ds4_recipe(MoeSpec spec);
// Every quantizable tensor at one type (e.g. q4_K for a "donor").
MoeSpec uniform_types(MoeSpec spec, GgmlType t);

// A plan for the model: tensors are produced on the fly (quantized from deterministic
// gaussian weights), so a large model needs no memory.
Plan synth_moe_plan(const MoeSpec& spec);

// A small Mixtral-style model: llama.cpp's "llama" architecture with routed experts as 3-D
// tensors (ffn_{gate,up,down}_exps) and an SPM vocabulary of byte tokens, complete enough for
// llama.cpp itself to load and run, so end-to-end tests can check what the tools write against
// the real inference code. All matrices at `weights` (norms and the router stay f32).
// With dense, a plain llama (ffn_{gate,up,down}, no experts); with arch "qwen3moe", a Qwen3-MoE
// (q/k norms, head_dim of its own, expert FFN width n_ff).
struct LlamaMoeSpec {
  std::string arch = "llama";  // or "qwen3moe"
  bool dense = false;          // llama only
  int head_dim = 0;            // 0: n_embd / n_head
  std::string name = "tiny-mixtral";
  int n_layers = 2;
  int n_experts = 4;
  int n_expert_used = 2;
  int n_embd = 256;
  int n_ff = 256;
  int n_head = 4;
  int n_head_kv = 2;
  int vocab = 512;  // at least 259: <unk>, <s>, </s> and the 256 byte tokens
  uint64_t seed = 1;
  GgmlType weights = GgmlType::F32;
  std::map<std::string, GgmlType> types;  // per-tensor exceptions to `weights`, by name
  unsigned threads = 1;
  bool structured = false;  // as MoeSpec::structured
};
Plan synth_llama_moe_plan(const LlamaMoeSpec& spec);

// The deterministic float weights of one tensor of the synthetic model (what the plan
// quantizes), rows [first, first + count); useful to check encodes independently.
void synth_rows(const std::string& tensor, uint64_t seed, int64_t n_per_row, int64_t first,
                int64_t count, float scale, float* out);

}  // namespace gguf
