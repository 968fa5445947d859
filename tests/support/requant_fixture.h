// Test support for gguf-requant: small DeepSeek-style models (layer 0 dense, routed and shared
// experts, MLA attention; vocabulary 256) written with the library's synthetic generator.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli_run.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"

namespace gguf::testing {

// Every tensor of the plan at `type` (norms and the router stay f32).
inline Plan small_moe_plan(GgmlType type, int layers = 3, int experts = 4) {
  MoeSpec s;
  s.n_layers = layers;
  s.n_experts = experts;
  s.vocab = 256;
  return synth_moe_plan(uniform_types(s, type));
}

// small_moe_plan(f16) written to dir/name; returns its path.
inline std::string write_f16_model(const TempDir& dir, const std::string& name = "in.gguf") {
  return write_plan(small_moe_plan(GgmlType::F16), dir.file(name), {}).paths.front();
}

// A llama model of one f32 tensor 'blk.0.attn_q.weight' of shape [96, 4]: rows that fit a
// 32-element block but not a 256-element one. Written to dir/odd.gguf; returns its path.
inline std::string write_odd_row_model(const TempDir& dir) {
  Plan p;
  p.metadata.set("general.architecture", Value::string("llama"));
  auto data = std::make_shared<std::vector<uint8_t>>(96 * 4 * 4, 0);
  p.tensors.push_back({"blk.0.attn_q.weight", 0, {96, 4}, data->size(), MemoryBytes{data}});
  return write_plan(p, dir.file("odd.gguf"), {}).paths.front();
}

}  // namespace gguf::testing
