// Test support for gguf-requant: small DeepSeek-style models (layer 0 dense, routed and shared
// experts, MLA attention; vocabulary 256) written with the library's synthetic generator.
#pragma once

#include <string>

#include "cli_run.h"
#include "gguf/synth.h"
#include "gguf/writer.h"

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

}  // namespace gguf::testing
