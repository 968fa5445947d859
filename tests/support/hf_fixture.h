// Test support: packed-affine tensors held as one code per element (with their f16 scales and
// mins), written as safetensors under any names, and Hugging Face checkpoints made from a GGUF
// model the way an HF user holds them: HF names, q/k rows in HF's rotate-half order, one tensor
// per expert, shards with model.safetensors.index.json and a config.json. Written here, apart
// from the library's name map and row moves, so the import is checked against its own inverse.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "gguf/base/fp16.h"
#include "gguf/inputs/safetensors.h"

namespace gguf::testing {

struct PackedRows {
  unsigned bits = 4;
  uint64_t group = 32, rows = 0, cols = 0;
  std::vector<uint8_t> codes;          // one per element, row-major
  std::vector<uint16_t> scales, mins;  // f16 bits, cols / group per row

  // The rows `which`, in that order.
  PackedRows rows_of(const std::vector<uint64_t>& which) const {
    PackedRows p{bits, group, which.size(), cols, {}, {}, {}};
    const uint64_t g = cols / group;
    for (uint64_t r : which) {
      p.codes.insert(p.codes.end(), codes.begin() + r * cols, codes.begin() + (r + 1) * cols);
      p.scales.insert(p.scales.end(), scales.begin() + r * g, scales.begin() + (r + 1) * g);
      p.mins.insert(p.mins.end(), mins.begin() + r * g, mins.begin() + (r + 1) * g);
    }
    return p;
  }
  PackedRows row_range(uint64_t first, uint64_t count) const {
    std::vector<uint64_t> w(count);
    for (uint64_t i = 0; i < count; ++i) w[i] = first + i;
    return rows_of(w);
  }
  // The value of element (r, c): code * scale + min in fp32, unfused.
  float value(uint64_t r, uint64_t c) const {
    const uint64_t g = r * (cols / group) + c / group;
    const float product = static_cast<float>(codes[r * cols + c]) * fp16_to_fp32(scales[g]);
    return product + fp16_to_fp32(mins[g]);
  }
};

// An in-house quantizer: per group, min and (max - min) / (2^bits - 1) in f16.
inline PackedRows quantize_rows(const float* w, uint64_t rows, uint64_t cols, unsigned bits = 4,
                                uint64_t group = 32) {
  PackedRows p{bits, group, rows, cols, {}, {}, {}};
  const float top = static_cast<float>((1u << bits) - 1);
  for (uint64_t g = 0; g < rows * cols / group; ++g) {
    const float* x = w + g * group;
    const auto [lo, hi] = std::minmax_element(x, x + group);
    const uint16_t m = fp32_to_fp16(*lo), d = fp32_to_fp16((*hi - *lo) / top);
    p.scales.push_back(d);
    p.mins.push_back(m);
    const float fd = fp16_to_fp32(d), fm = fp16_to_fp32(m);
    for (uint64_t i = 0; i < group; ++i) {
      const float qv = fd > 0 ? std::nearbyint((x[i] - fm) / fd) : 0.0f;
      p.codes.push_back(static_cast<uint8_t>(std::clamp(qv, 0.0f, top)));
    }
  }
  return p;
}

inline PackedRows random_rows(uint64_t seed, uint64_t rows, uint64_t cols, unsigned bits = 4,
                              uint64_t group = 32) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.05f);
  std::vector<float> w(rows * cols);
  for (auto& x : w) x = n(rng);
  return quantize_rows(w.data(), rows, cols, bits, group);
}

// One safetensors file being assembled: packed tensors (NAME.codes / .scales / .mins) and
// plain ones.
class ShardWriter {
 public:
  void add_packed(const std::string& name, const std::vector<int64_t>& shape, const PackedRows& p) {
    const uint64_t n = p.rows * p.cols;
    std::vector<uint8_t> stream((n * p.bits + 7) / 8, 0);
    for (uint64_t i = 0; i < n; ++i)
      for (unsigned b = 0; b < p.bits; ++b)
        if ((p.codes[i] >> b) & 1u) {
          const uint64_t at = i * p.bits + b;
          stream[at / 8] = static_cast<uint8_t>(stream[at / 8] | (1u << (at % 8)));
        }
    std::vector<int64_t> sshape = {static_cast<int64_t>(p.rows),
                                   static_cast<int64_t>(p.cols / p.group)};
    entries_.push_back({name + ".codes", "U8", {static_cast<int64_t>(stream.size())}, stream});
    entries_.push_back({name + ".scales", "F16", sshape, bytes_of(p.scales)});
    entries_.push_back({name + ".mins", "F16", sshape, bytes_of(p.mins)});
    packed_[name] = {
        {"bits", p.bits},           {"group", p.group},           {"shape", shape},
        {"codes", name + ".codes"}, {"scales", name + ".scales"}, {"mins", name + ".mins"}};
  }
  void add_plain(const std::string& name, const std::string& dtype,
                 const std::vector<int64_t>& shape, std::vector<uint8_t> data) {
    entries_.push_back({name, dtype, shape, std::move(data)});
  }
  // The file's tensors as safetensors names them (what an index lists).
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : entries_) out.push_back(e.name);
    return out;
  }
  bool empty() const { return entries_.empty(); }
  void write(const std::string& path) const {
    std::vector<std::pair<std::string, std::string>> meta;
    if (!packed_.empty())
      meta.push_back(
          {"packed_affine", nlohmann::json{{"version", 1}, {"tensors", packed_}}.dump()});
    const auto bytes = serialize_safetensors(entries_, meta);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }

 private:
  template <class T>
  static std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  }
  std::vector<SafetensorsEntry> entries_;
  nlohmann::json packed_ = nlohmann::json::object();
};

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// model.safetensors.index.json for shards (file name -> writer).
inline void write_index(const std::string& path,
                        const std::vector<std::pair<std::string, const ShardWriter*>>& shards) {
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [file, w] : shards)
    for (const auto& n : w->names()) map[n] = file;
  write_text(path, nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump(2));
}

// GGUF row r_new of a llama q/k tensor holds HF row r_old; the HF file lists HF rows, so HF row
// r_old is GGUF row (r_old mod hd) -> 2 * (q mod hd/2) + q / (hd/2) within its head. The inverse
// of the converter's permutation, written from its definition (reshape (H, 2, hd/2) -> swap).
inline std::vector<uint64_t> hf_rows_of_gguf(uint64_t rows, uint64_t heads) {
  const uint64_t hd = rows / heads, half = hd / 2;
  std::vector<uint64_t> which(rows);
  for (uint64_t r_old = 0; r_old < rows; ++r_old) {
    const uint64_t h = r_old / hd, qr = r_old % hd;
    which[r_old] = h * hd + 2 * (qr % half) + qr / half;
  }
  return which;
}

}  // namespace gguf::testing

#include "gguf/format/model.h"

namespace gguf::testing {

// The HF name of a GGUF tensor (expert e of a *_exps tensor), for llama (dense or Mixtral) and
// qwen3moe: the test's own inverse of the name map.
inline std::string hf_name_of(const std::string& gguf, const std::string& arch, int expert = -1) {
  static const std::map<std::string, std::string> kTop = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output.weight", "lm_head.weight"},
      {"output_norm.weight", "model.norm.weight"}};
  if (const auto it = kTop.find(gguf); it != kTop.end()) return it->second;
  const size_t a = gguf.find('.', 4), b = gguf.rfind('.');
  const std::string layer = gguf.substr(4, a - 4), kind = gguf.substr(a + 1, b - a - 1);
  const bool mixtral = arch == "llama";
  std::map<std::string, std::string> k = {
      {"attn_norm", "input_layernorm"},
      {"ffn_norm", "post_attention_layernorm"},
      {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"},
      {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"},
      {"ffn_gate", "mlp.gate_proj"},
      {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
      {"ffn_gate_inp", mixtral ? "block_sparse_moe.gate" : "mlp.gate"}};
  const std::string e = std::to_string(expert);
  k["ffn_gate_exps"] =
      mixtral ? "block_sparse_moe.experts." + e + ".w1" : "mlp.experts." + e + ".gate_proj";
  k["ffn_up_exps"] =
      mixtral ? "block_sparse_moe.experts." + e + ".w3" : "mlp.experts." + e + ".up_proj";
  k["ffn_down_exps"] =
      mixtral ? "block_sparse_moe.experts." + e + ".w2" : "mlp.experts." + e + ".down_proj";
  return "model.layers." + layer + "." + k.at(kind) + gguf.substr(b);
}

// From an f32 GGUF model (llama, dense or Mixtral-style, or qwen3moe) made by synth: every
// matrix but the router quantized to `bits`-bit packed affine (group 32), then written twice
// with the same codes, scales and mins: under GGUF names in GGUF layout (one file,
// gguf_named), and as an HF user holds it (folder: `shards` shards, an index when more than
// one, config.json). Returns the packed tensors by GGUF name.
inline std::map<std::string, PackedRows> write_both_layouts(const Model& base,
                                                            const std::string& gguf_named,
                                                            const std::string& folder,
                                                            int shards = 2, unsigned bits = 4) {
  const std::string arch = base.architecture();
  const auto meta = [&](const std::string& key) {
    return static_cast<int64_t>(*base.metadata().get_uint(arch + "." + key));
  };
  const int64_t heads = meta("attention.head_count"), heads_kv = meta("attention.head_count_kv");
  const bool moe = base.metadata().get_uint(arch + ".expert_count").has_value();
  ShardWriter named;
  std::vector<ShardWriter> hf(static_cast<size_t>(shards));
  std::map<std::string, PackedRows> packed;
  const size_t n_tensors = base.tensors().size();
  size_t i = 0;
  for (const TensorRef& t : base.tensors()) {
    ShardWriter& out = hf[std::min<size_t>(i++ * static_cast<size_t>(shards) / n_tensors,
                                           static_cast<size_t>(shards) - 1)];
    const std::string& name = t.name();
    const auto& ne = t.info->shape;
    const std::vector<int64_t> shape(ne.rbegin(), ne.rend());
    const auto bytes = t.data();
    if (ne.size() == 1 || name.find("ffn_gate_inp") != std::string::npos) {
      named.add_plain(name, "F32", shape, {bytes.begin(), bytes.end()});
      out.add_plain(hf_name_of(name, arch), "F32", shape, {bytes.begin(), bytes.end()});
      continue;
    }
    const uint64_t cols = static_cast<uint64_t>(ne[0]), rows = t.info->n_elements / cols;
    std::vector<float> w(rows * cols);
    std::memcpy(w.data(), bytes.data(), w.size() * 4);
    const PackedRows p = quantize_rows(w.data(), rows, cols, bits);
    packed[name] = p;
    named.add_packed(name, shape, p);
    if (ne.size() == 3) {  // one HF tensor per expert
      const uint64_t per = static_cast<uint64_t>(ne[1]);
      for (int64_t e = 0; e < ne[2]; ++e)
        out.add_packed(hf_name_of(name, arch, static_cast<int>(e)), {ne[1], ne[0]},
                       p.row_range(static_cast<uint64_t>(e) * per, per));
      continue;
    }
    const bool q = name.find(".attn_q.") != std::string::npos;
    const bool k = name.find(".attn_k.") != std::string::npos;
    if (arch == "llama" && (q || k))  // HF keeps q and k in rotate-half order
      out.add_packed(hf_name_of(name, arch), shape,
                     p.rows_of(hf_rows_of_gguf(rows, static_cast<uint64_t>(q ? heads : heads_kv))));
    else
      out.add_packed(hf_name_of(name, arch), shape, p);
  }
  named.write(gguf_named);
  std::vector<std::pair<std::string, const ShardWriter*>> files;
  for (int s = 0; s < shards; ++s) {
    const std::string file = shards == 1 ? "model.safetensors"
                                         : "model-0000" + std::to_string(s + 1) + "-of-0000" +
                                               std::to_string(shards) + ".safetensors";
    hf[static_cast<size_t>(s)].write(folder + "/" + file);
    files.push_back({file, &hf[static_cast<size_t>(s)]});
  }
  if (shards > 1) write_index(folder + "/model.safetensors.index.json", files);
  nlohmann::json config = {{"architectures",
                            {arch == "qwen3moe" ? "Qwen3MoeForCausalLM"
                             : moe              ? "MixtralForCausalLM"
                                                : "LlamaForCausalLM"}},
                           {"model_type", arch == "qwen3moe" ? "qwen3_moe"
                                          : moe              ? "mixtral"
                                                             : "llama"},
                           {"num_attention_heads", heads},
                           {"num_key_value_heads", heads_kv},
                           {"num_hidden_layers", meta("block_count")},
                           {"hidden_size", meta("embedding_length")}};
  if (moe) config[arch == "qwen3moe" ? "num_experts" : "num_local_experts"] = meta("expert_count");
  write_text(folder + "/config.json", config.dump(2));
  return packed;
}

}  // namespace gguf::testing
