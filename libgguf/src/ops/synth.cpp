// Synthetic DeepSeek-style MoE models (names follow llama.cpp's deepseek2 conventions plus the
// ds4 attention tensors).
#include "gguf/ops/synth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "gguf/base/error.h"
#include "gguf/codecs/codecs.h"
#include "gguf/write/encode.h"

namespace gguf {
namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Trained-looking structure on top of gaussian rows: a few outlier columns (about 1 in 32,
// 4-12x), uneven column and row scales, and experts of different magnitude.
void add_structure(const std::string& name, uint64_t seed, int64_t n_per_row,
                   int64_t rows_per_matrix, int64_t first, int64_t count, float* out) {
  const uint64_t base = mix(name_hash(name) ^ mix(seed ^ 0x5eedull));
  const auto unit = [](uint64_t h) { return static_cast<float>(h >> 40) * 0x1p-24f; };
  std::vector<float> col(static_cast<size_t>(n_per_row));
  for (int64_t c = 0; c < n_per_row; ++c) {
    const uint64_t h = mix(base + static_cast<uint64_t>(c));
    col[static_cast<size_t>(c)] = (h & 31) == 0 ? 4.0f + 8.0f * unit(mix(h)) : 0.5f + unit(h);
  }
  for (int64_t r = 0; r < count; ++r) {
    const int64_t row = first + r, expert = row / std::max<int64_t>(1, rows_per_matrix);
    const float k = (0.6f + 0.8f * unit(mix(base ^ (static_cast<uint64_t>(row) << 1)))) *
                    (0.5f + 1.5f * unit(mix(base + 0x9E37ull * static_cast<uint64_t>(expert + 1))));
    for (int64_t c = 0; c < n_per_row; ++c)
      out[r * n_per_row + c] *= k * col[static_cast<size_t>(c)];
  }
}

struct Builder {
  unsigned threads = 1;
  uint64_t seed = 1;
  Plan plan;
  bool structured = false;

  void add(const std::string& name, std::vector<int64_t> shape, GgmlType type, float scale,
           float offset = 0.0f) {
    int64_t rows = 1;
    for (size_t i = 1; i < shape.size(); ++i) rows *= shape[i];
    const int64_t n_per_row = shape[0];
    PlanTensor t;
    t.name = name;
    t.type_id = static_cast<uint32_t>(type);
    t.shape = shape;
    const auto rb = row_bytes(type, static_cast<uint64_t>(n_per_row));
    if (!rb)
      throw Error(fmt::format("synthetic tensor '{}': row length {} does not fit type {}", name,
                              n_per_row, traits(type).name));
    t.bytes = *rb * static_cast<uint64_t>(rows);
    RowEncoder e;
    e.type = type;
    e.n_per_row = n_per_row;
    e.nrows = rows;
    e.rows_per_matrix = shape.size() > 1 ? shape[1] : 1;
    e.threads = threads;
    e.tensor_name = name;
    const bool structure = structured && shape.size() > 1;
    e.rows = [name, seed = seed, n_per_row, scale, offset, structure, rpm = e.rows_per_matrix](
                 int64_t first, int64_t count, std::span<float> out) {
      synth_rows(name, seed, n_per_row, first, count, scale, out.data());
      if (structure) add_structure(name, seed, n_per_row, rpm, first, count, out.data());
      if (offset != 0.0f)
        for (auto& x : out) x += offset;
    };
    if (requires_importance(type)) {
      // No calibration data here: weight columns by their energy (the documented fallback).
      auto imp = std::make_shared<std::vector<float>>(static_cast<size_t>(n_per_row), 1.0f);
      e.importance = [imp](int64_t) { return std::span<const float>(*imp); };
    }
    t.source = make_encoding_producer(std::move(e));
    plan.tensors.push_back(std::move(t));
  }
};

}  // namespace

void synth_rows(const std::string& tensor, uint64_t seed, int64_t n_per_row, int64_t first,
                int64_t count, float scale, float* out) {
  const uint64_t base = mix(name_hash(tensor) ^ mix(seed));
  for (int64_t r = 0; r < count; ++r) {
    uint64_t s = mix(base + static_cast<uint64_t>(first + r));
    for (int64_t i = 0; i < n_per_row; i += 2) {
      // Box-Muller on two 24-bit uniforms: gaussian-like weights.
      s = mix(s + 0x9E3779B97F4A7C15ull);
      const float u1 = (static_cast<float>(s >> 40) + 1.0f) * 0x1p-24f;
      const float u2 = static_cast<float>((s >> 16) & 0xFFFFFF) * 0x1p-24f;
      const float rad = std::sqrt(-2.0f * std::log(u1));
      out[r * n_per_row + i] = scale * rad * std::cos(6.2831853f * u2);
      if (i + 1 < n_per_row) out[r * n_per_row + i + 1] = scale * rad * std::sin(6.2831853f * u2);
    }
  }
}

MoeSpec ds4_recipe(MoeSpec s) {
  s.routed_gate_up = GgmlType::IQ2_XXS;
  s.routed_down = GgmlType::Q2_K;
  s.attn_proj = GgmlType::Q8_0;
  s.shared = GgmlType::Q8_0;
  s.output = GgmlType::Q8_0;
  s.embedding = GgmlType::F16;
  s.dense = GgmlType::Q8_0;
  return s;
}

MoeSpec uniform_types(MoeSpec s, GgmlType t) {
  s.routed_gate_up = s.routed_down = s.attn_proj = s.shared = s.output = s.embedding = s.dense = t;
  return s;
}

Plan synth_moe_plan(const MoeSpec& s) {
  Builder b{s.threads, s.seed, {}, s.structured};
  Metadata& m = b.plan.metadata;
  const std::string arch = "deepseek2";
  m.set("general.architecture", Value::string(arch));
  m.set("general.name", Value::string(s.name));
  m.set("general.quantization_version", Value::u32(2));
  if (s.alignment != 32) m.set("general.alignment", Value::u32(s.alignment));
  m.set(arch + ".block_count", Value::u32(static_cast<uint32_t>(s.n_layers)));
  m.set(arch + ".context_length", Value::u32(4096));
  m.set(arch + ".embedding_length", Value::u32(static_cast<uint32_t>(s.n_embd)));
  m.set(arch + ".feed_forward_length", Value::u32(static_cast<uint32_t>(s.n_ff_dense)));
  m.set(arch + ".attention.head_count", Value::u32(static_cast<uint32_t>(s.n_head)));
  m.set(arch + ".attention.q_lora_rank", Value::u32(static_cast<uint32_t>(s.q_lora)));
  m.set(arch + ".attention.kv_lora_rank", Value::u32(static_cast<uint32_t>(s.kv_lora)));
  m.set(arch + ".leading_dense_block_count", Value::u32(static_cast<uint32_t>(s.n_dense_layers)));
  m.set(arch + ".expert_count", Value::u32(static_cast<uint32_t>(s.n_experts)));
  m.set(arch + ".expert_used_count", Value::u32(static_cast<uint32_t>(s.n_expert_used)));
  m.set(arch + ".expert_feed_forward_length", Value::u32(static_cast<uint32_t>(s.n_ff_exp)));
  m.set(arch + ".expert_shared_count", Value::u32(1));
  m.set(arch + ".rope.freq_base", Value::f32(10000.0f));
  m.set(arch + ".attention.layer_norm_rms_epsilon", Value::f32(1e-6f));
  m.set("tokenizer.ggml.model", Value::string("gpt2"));
  m.set("tokenizer.ggml.pre", Value::string("deepseek-v3"));
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int i = 0; i < s.vocab; ++i) {
    tokens.push_back(i < 256 ? fmt::format("<0x{:02X}>", i) : fmt::format("tok{}", i));
    scores.push_back(-static_cast<float>(i));
    types.push_back(i < 256 ? 6 : 1);
  }
  m.set("tokenizer.ggml.tokens", Value::string_array(std::move(tokens)));
  m.set("tokenizer.ggml.scores", Value::array_of<float>(ValueType::kF32, scores));
  m.set("tokenizer.ggml.token_type", Value::array_of<int32_t>(ValueType::kI32, types));
  // A BPE vocabulary has merges (llama.cpp refuses a gpt2 one without): "tok" + "1" and the like.
  std::vector<std::string> merges;
  for (int i = 256; i < std::min(s.vocab, 266); ++i)
    merges.push_back(fmt::format("tok {}", i - 256));
  m.set("tokenizer.ggml.merges", Value::string_array(std::move(merges)));
  m.set("tokenizer.ggml.bos_token_id", Value::u32(0));
  m.set("tokenizer.ggml.eos_token_id", Value::u32(1));

  const int64_t e = s.n_embd, f = s.n_ff_exp, x = s.n_experts;
  b.add("token_embd.weight", {e, s.vocab}, s.embedding, 0.02f);
  for (int l = 0; l < s.n_layers; ++l) {
    const auto n = [l](const char* kind, const char* suffix = "weight") {
      return fmt::format("blk.{}.{}.{}", l, kind, suffix);
    };
    b.add(n("attn_norm"), {e}, GgmlType::F32, 0.1f, 1.0f);
    b.add(n("attn_q_a"), {e, s.q_lora}, s.attn_proj, 0.02f);
    b.add(n("attn_q_a_norm"), {s.q_lora}, GgmlType::F32, 0.1f, 1.0f);
    b.add(n("attn_q_b"), {s.q_lora, s.n_head * s.head_dim}, s.attn_proj, 0.02f);
    b.add(n("attn_kv"), {e, s.kv_lora}, s.attn_proj, 0.02f);
    b.add(n("attn_kv_a_norm"), {s.kv_lora}, GgmlType::F32, 0.1f, 1.0f);
    b.add(n("attn_output_a"), {s.n_head * s.head_dim, s.q_lora}, s.attn_proj, 0.02f);
    b.add(n("attn_output_b"), {s.q_lora, e}, s.attn_proj, 0.02f);
    b.add(n("attn_sinks"), {s.n_head}, GgmlType::F32, 0.1f);
    b.add(n("indexer_k"), {e, s.head_dim}, GgmlType::F16, 0.02f);
    b.add(n("ffn_norm"), {e}, GgmlType::F32, 0.1f, 1.0f);
    if (l < s.n_dense_layers) {
      b.add(n("ffn_gate"), {e, s.n_ff_dense}, s.dense, 0.02f);
      b.add(n("ffn_up"), {e, s.n_ff_dense}, s.dense, 0.02f);
      b.add(n("ffn_down"), {s.n_ff_dense, e}, s.dense, 0.02f);
      continue;
    }
    b.add(n("ffn_gate_inp"), {e, x}, GgmlType::F32, 0.02f);
    b.add(n("exp_probs_b", "bias"), {x}, GgmlType::F32, 0.01f);
    b.add(n("ffn_gate_exps"), {e, f, x}, s.routed_gate_up, 0.02f);
    b.add(n("ffn_up_exps"), {e, f, x}, s.routed_gate_up, 0.02f);
    b.add(n("ffn_down_exps"), {f, e, x}, s.routed_down, 0.02f);
    b.add(n("ffn_gate_shexp"), {e, f}, s.shared, 0.02f);
    b.add(n("ffn_up_shexp"), {e, f}, s.shared, 0.02f);
    b.add(n("ffn_down_shexp"), {f, e}, s.shared, 0.02f);
  }
  b.add("output_norm.weight", {e}, GgmlType::F32, 0.1f, 1.0f);
  b.add("output.weight", {e, s.vocab}, s.output, 0.02f);
  return b.plan;
}

Plan synth_llama_moe_plan(const LlamaMoeSpec& s) {
  const bool qwen = s.arch == "qwen3moe";
  if (s.vocab < 259 || s.n_head <= 0 || s.n_head_kv <= 0 || s.n_head % s.n_head_kv != 0 ||
      s.n_embd % s.n_head != 0 || s.n_expert_used > s.n_experts || s.n_layers <= 0 ||
      s.head_dim < 0 || (s.arch != "llama" && !qwen) || (qwen && s.dense))
    throw Error("synthetic llama MoE: inconsistent spec", Error::Kind::kUsage);
  Builder b{s.threads, s.seed, {}, s.structured};
  Metadata& m = b.plan.metadata;
  const std::string& arch = s.arch;
  const auto u32 = [](int v) { return Value::u32(static_cast<uint32_t>(v)); };
  const int head_dim = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  m.set("general.architecture", Value::string(arch));
  m.set("general.name", Value::string(s.name));
  m.set("general.quantization_version", Value::u32(2));
  m.set(arch + ".block_count", u32(s.n_layers));
  m.set(arch + ".context_length", Value::u32(2048));
  m.set(arch + ".embedding_length", u32(s.n_embd));
  m.set(arch + ".feed_forward_length", u32(s.n_ff));
  m.set(arch + ".attention.head_count", u32(s.n_head));
  m.set(arch + ".attention.head_count_kv", u32(s.n_head_kv));
  m.set(arch + ".rope.dimension_count", u32(head_dim));
  m.set(arch + ".rope.freq_base", Value::f32(10000.0f));
  m.set(arch + ".attention.layer_norm_rms_epsilon", Value::f32(1e-5f));
  if (qwen) {
    m.set(arch + ".attention.key_length", u32(head_dim));
    m.set(arch + ".attention.value_length", u32(head_dim));
    m.set(arch + ".expert_feed_forward_length", u32(s.n_ff));
  }
  if (!s.dense) {
    m.set(arch + ".expert_count", u32(s.n_experts));
    m.set(arch + ".expert_used_count", u32(s.n_expert_used));
  }
  m.set(arch + ".vocab_size", u32(s.vocab));
  // SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then plain pieces.
  m.set("tokenizer.ggml.model", Value::string("llama"));
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int i = 0; i < s.vocab; ++i) {
    if (i < 3) {
      tokens.push_back(i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
      types.push_back(i == 0 ? 2 : 3);  // unknown, control
    } else if (i < 259) {
      tokens.push_back(fmt::format("<0x{:02X}>", i - 3));
      types.push_back(6);  // byte
    } else {
      tokens.push_back(fmt::format("\u2581t{}", i));
      types.push_back(1);  // normal
    }
    scores.push_back(-static_cast<float>(i));
  }
  m.set("tokenizer.ggml.tokens", Value::string_array(std::move(tokens)));
  m.set("tokenizer.ggml.scores", Value::array_of<float>(ValueType::kF32, scores));
  m.set("tokenizer.ggml.token_type", Value::array_of<int32_t>(ValueType::kI32, types));
  m.set("tokenizer.ggml.unknown_token_id", Value::u32(0));
  m.set("tokenizer.ggml.bos_token_id", Value::u32(1));
  m.set("tokenizer.ggml.eos_token_id", Value::u32(2));

  const int64_t e = s.n_embd, f = s.n_ff, x = s.n_experts, kv = s.n_head_kv * head_dim;
  const int64_t qd = s.n_head * head_dim;
  size_t overridden = 0;
  const auto add = [&](const std::string& name, std::vector<int64_t> shape, GgmlType type,
                       float scale, float offset = 0.0f) {
    const auto it = s.types.find(name);
    if (it != s.types.end()) ++overridden, type = it->second;
    b.add(name, std::move(shape), type, scale, offset);
  };
  add("token_embd.weight", {e, s.vocab}, s.weights, 0.5f);
  for (int l = 0; l < s.n_layers; ++l) {
    const auto n = [l](const char* kind) { return fmt::format("blk.{}.{}.weight", l, kind); };
    add(n("attn_norm"), {e}, GgmlType::F32, 0.1f, 1.0f);
    add(n("attn_q"), {e, qd}, s.weights, 0.05f);
    add(n("attn_k"), {e, kv}, s.weights, 0.05f);
    add(n("attn_v"), {e, kv}, s.weights, 0.05f);
    add(n("attn_output"), {qd, e}, s.weights, 0.05f);
    if (qwen) {
      add(n("attn_q_norm"), {head_dim}, GgmlType::F32, 0.1f, 1.0f);
      add(n("attn_k_norm"), {head_dim}, GgmlType::F32, 0.1f, 1.0f);
    }
    add(n("ffn_norm"), {e}, GgmlType::F32, 0.1f, 1.0f);
    if (s.dense) {
      add(n("ffn_gate"), {e, f}, s.weights, 0.05f);
      add(n("ffn_up"), {e, f}, s.weights, 0.05f);
      add(n("ffn_down"), {f, e}, s.weights, 0.05f);
      continue;
    }
    add(n("ffn_gate_inp"), {e, x}, GgmlType::F32, 0.1f);
    add(n("ffn_gate_exps"), {e, f, x}, s.weights, 0.05f);
    add(n("ffn_up_exps"), {e, f, x}, s.weights, 0.05f);
    add(n("ffn_down_exps"), {f, e, x}, s.weights, 0.05f);
  }
  add("output_norm.weight", {e}, GgmlType::F32, 0.1f, 1.0f);
  add("output.weight", {e, s.vocab}, s.weights, 0.05f);
  if (overridden != s.types.size())
    for (const auto& [name, type] : s.types)
      if (std::none_of(b.plan.tensors.begin(), b.plan.tensors.end(),
                       [&n = name](const PlanTensor& t) { return t.name == n; }))
        throw Error(fmt::format("synthetic llama MoE: no tensor '{}'", name), Error::Kind::kUsage);
  return b.plan;
}

}  // namespace gguf
