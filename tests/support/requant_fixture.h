// Test support for gguf-requant: small DeepSeek-style models (layer 0 dense, routed and shared
// experts, MLA attention; vocabulary 256) written with the library's synthetic generator.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli_run.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/model.h"
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

// The values of a tensor, decoded.
inline std::vector<float> decode_all(const TensorRef& t) {
  std::vector<float> out(t.info->n_elements);
  dequantize(static_cast<GgmlType>(t.info->type_id), t.data(), out);
  return out;
}

// Encodes a tensor independently of the plan machinery: matrix by matrix, with weights.
inline std::vector<uint8_t> encode_reference(
    const TensorRef& t, GgmlType type, const std::function<std::vector<float>(int64_t)>& imp) {
  const auto floats = decode_all(t);
  const int64_t ne0 = t.info->shape[0], ne1 = t.info->shape[1];
  const int64_t n_mat = static_cast<int64_t>(t.info->n_elements) / (ne0 * ne1);
  const uint64_t rb = *row_bytes(type, ne0);
  std::vector<uint8_t> out(rb * ne1 * n_mat);
  for (int64_t m = 0; m < n_mat; ++m) {
    const auto w = imp ? imp(m) : std::vector<float>();
    quantize(type, std::span(floats).subspan(m * ne0 * ne1, ne0 * ne1), ne1, ne0, w,
             std::span(out).subspan(m * ne1 * rb, ne1 * rb));
  }
  return out;
}

}  // namespace gguf::testing
