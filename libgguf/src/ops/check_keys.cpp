// check_model's key checks: which metadata keys llama.cpp's loader reads with which type, and
// which it cannot do without (kKeyRules, confirmed against libllama).
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>

#include "gguf/base/escape.h"
#include "ops/check_parts.h"

namespace gguf {
namespace {

constexpr const char* kQuantVersion = "general.quantization_version";

// The table behind llama_key_type_rules(). Each entry was confirmed by loading a file with
// only that key retyped in libllama (node-llama-cpp 3.21.1; llama_e2e_test repeats it for every
// rule a llama model reaches). Keys llama.cpp does not type-check (general.quantization_version,
// tokenizer.chat_template, cls_token_id, ...) are not listed; general.architecture and
// general.alignment have checks of their own.
constexpr ValueType kU32 = ValueType::kU32, kF32 = ValueType::kF32, kBool = ValueType::kBool,
                    kStr = ValueType::kString, kI32 = ValueType::kI32;
constexpr KeyForm kPerLayer = KeyForm::kPerLayer, kArray = KeyForm::kArray;
constexpr uint8_t kLlama = kArchLlama, kDeepseek2 = kArchDeepseek2;

constexpr KeyTypeRule kKeyRules[] = {
    {"general.name", kStr},
    {"general.file_type", kU32},
    {".block_count", kU32},
    {".context_length", kU32},
    {".embedding_length", kU32},
    {".embedding_length_out", kU32},
    {".feed_forward_length", kU32, kPerLayer},
    {".expert_count", kU32},
    {".expert_used_count", kU32, kPerLayer},
    {".expert_group_count", kU32},
    {".expert_group_used_count", kU32},
    {".nextn_predict_layers", kU32},
    {".pooling_type", kU32},
    {".attention.head_count", kU32, kPerLayer},
    {".attention.head_count_kv", kU32, kPerLayer},
    {".attention.causal", kBool},
    {".attention.key_length", kU32},
    {".attention.value_length", kU32},
    {".attention.key_length_swa", kU32},
    {".attention.value_length_swa", kU32},
    {".rope.dimension_count", kU32},
    {".rope.dimension_count_swa", kU32},
    {".rope.freq_base", kF32},
    {".rope.scale_linear", kF32},
    {".rope.scaling.type", kStr},
    {".rope.scaling.factor", kF32},
    {".rope.scaling.attn_factor", kF32},
    {".rope.scaling.alpha", kF32},
    {".rope.scaling.finetuned", kBool},
    {".rope.scaling.original_context_length", kU32},
    {".classifier.output_labels", kStr, kArray},
    {".vocab_size", kU32, KeyForm::kScalar, kLlama | kDeepseek2},
    {".attention.layer_norm_rms_epsilon", kF32, KeyForm::kScalar, kLlama | kDeepseek2},
    {".attention.q_lora_rank", kU32, KeyForm::kScalar, kDeepseek2},
    {".attention.kv_lora_rank", kU32, KeyForm::kScalar, kDeepseek2},
    {".attention.key_length_mla", kU32, KeyForm::kScalar, kDeepseek2},
    {".attention.value_length_mla", kU32, KeyForm::kScalar, kDeepseek2},
    {".attention.temperature_length", kU32, KeyForm::kScalar, kDeepseek2},
    {".attention.temperature_scale", kF32, KeyForm::kScalar, kDeepseek2},
    {".leading_dense_block_count", kU32, KeyForm::kScalar, kDeepseek2},
    {".expert_feed_forward_length", kU32, kPerLayer, kDeepseek2},
    {".expert_shared_count", kU32, KeyForm::kScalar, kDeepseek2},
    {".expert_weights_scale", kF32, KeyForm::kScalar, kDeepseek2},
    {".expert_weights_norm", kBool, KeyForm::kScalar, kDeepseek2},
    {".expert_gating_func", kU32, KeyForm::kScalar, kDeepseek2},
    {".rope.scaling.yarn_log_multiplier", kF32, KeyForm::kScalar, kDeepseek2},
    {"tokenizer.ggml.model", kStr},
    {"tokenizer.ggml.pre", kStr},
    {"tokenizer.ggml.tokens", kStr, kArray},
    {"tokenizer.ggml.scores", kF32, kArray, kAnyArch, kI32},
    {"tokenizer.ggml.token_type", kI32, kArray},
    {"tokenizer.ggml.merges", kStr, kArray},
    {"tokenizer.ggml.suppress_tokens", kI32, kArray},
    {"tokenizer.ggml.token_type_count", kU32},
    {"tokenizer.ggml.add_space_prefix", kBool},
    {"tokenizer.ggml.remove_extra_whitespaces", kBool},
    {"tokenizer.ggml.add_bos_token", kBool},
    {"tokenizer.ggml.add_eos_token", kBool},
    {"tokenizer.ggml.add_sep_token", kBool},
    {"tokenizer.ggml.normalizer.lowercase", kBool},
    {"tokenizer.ggml.normalizer.strip_accents", kBool},
    {"tokenizer.ggml.unknown_token_id", kU32},
    {"tokenizer.ggml.bos_token_id", kU32},
    {"tokenizer.ggml.eos_token_id", kU32},
    {"tokenizer.ggml.eot_token_id", kU32},
    {"tokenizer.ggml.eom_token_id", kU32},
    {"tokenizer.ggml.seperator_token_id", kU32},
    {"tokenizer.ggml.padding_token_id", kU32},
    {"tokenizer.ggml.mask_token_id", kU32},
    {"tokenizer.ggml.fim_pre_token_id", kU32},
    {"tokenizer.ggml.fim_suf_token_id", kU32},
    {"tokenizer.ggml.fim_mid_token_id", kU32},
    {"tokenizer.ggml.fim_pad_token_id", kU32},
    {"tokenizer.ggml.fim_rep_token_id", kU32},
    {"tokenizer.ggml.fim_sep_token_id", kU32},
    {"tokenizer.ggml.prefix_token_id", kU32},
    {"tokenizer.ggml.suffix_token_id", kU32},
    {"tokenizer.ggml.middle_token_id", kU32},
};

// "i32", "array of u32", "array of string".
std::string type_text(const Value& v) {
  if (!v.is_array()) return std::string(value_type_name(v.type()));
  return fmt::format("array of {}", value_type_name(v.array_type()));
}

class KeyChecker {
 public:
  KeyChecker(const Model& m, std::vector<Problem>& out) : model_(m), out_(out) {}

  void run() {
    check_architecture();
    check_key_types();
    check_required_keys();
    check_quantization_version();
  }

 private:
  const Model& model_;
  std::vector<Problem>& out_;

  void add(const GgufFile& f, std::string object, std::optional<uint64_t> at, std::string msg,
           const char* severity = "error") {
    out_.push_back({f.path(), std::move(object), at, std::move(msg), severity});
  }

  // The entry of key (with its byte offset, which Metadata::find does not give) as ggml and
  // llama.cpp look it up, or nullptr.
  static const KeyValue* entry(const GgufFile& f, std::string_view key) {
    return find_key_as_ggml(f.metadata(), key);
  }

  // llama.cpp's loader reads general.architecture first and refuses a model without it (an
  // imatrix or other non-model GGUF says so in general.type and is left alone).
  void check_architecture() {
    const GgufFile& f = model_.first();
    const KeyValue* type = entry(f, "general.type");
    const KeyValue* arch = entry(f, "general.architecture");
    if (type && type->value.as_string() && *type->value.as_string() != "model") return;
    if (!arch)
      return add(f, key_object("general.architecture"), std::nullopt,
                 "missing; llama.cpp's loader refuses a model without its architecture");
    if (arch->value.type() != ValueType::kString)
      add(f, key_object("general.architecture"), arch->type_offset(),
          fmt::format("general.architecture must be a string, found {}",
                      value_type_name(arch->value.type())));
  }

  // Keys of kKeyRules in another type than llama.cpp reads them with; only in a model (an
  // imatrix, an adapter or another kind of GGUF is read by other code).
  // A model file: general.type absent or "model" (an imatrix, an adapter or another kind of
  // GGUF is read by other code).
  static bool is_model_file(const GgufFile& f) {
    const KeyValue* type = entry(f, "general.type");
    return !type || (type->value.as_string() && *type->value.as_string() == "model");
  }
  // general.architecture when it is a string, else null.
  static const std::string* architecture_of(const GgufFile& f) {
    const KeyValue* arch_kv = entry(f, "general.architecture");
    return arch_kv ? arch_kv->value.as_string() : nullptr;
  }

  void check_key_types() {
    const GgufFile& f = model_.first();
    if (!is_model_file(f)) return;
    const std::string* arch = architecture_of(f);
    const uint8_t arch_bit = !arch                  ? 0
                             : *arch == "llama"     ? kLlama
                             : *arch == "deepseek2" ? kDeepseek2
                                                    : 0;
    const auto find = [&](std::string_view key) -> const KeyValue* {
      if (!key.starts_with('.')) return entry(f, key);
      return arch ? entry(f, *arch + std::string(key)) : nullptr;
    };
    std::optional<uint64_t> layers;  // block_count, when it is a u32
    if (const KeyValue* b = find(".block_count"); b && b->value.type() == kU32)
      layers = b->value.as_uint();
    // Read only when the first layer has attention heads (none when the key is missing).
    bool heads = false;
    if (const KeyValue* h = find(".attention.head_count")) {
      const Value first =
          h->value.is_array() && h->value.array_size() > 0 ? h->value.element(0) : h->value;
      heads = first.as_uint() != std::optional<uint64_t>(0);
    }
    const KeyValue* tokenizer_kv = find("tokenizer.ggml.model");
    const std::string* tokenizer = tokenizer_kv ? tokenizer_kv->value.as_string() : nullptr;
    // A model without a vocabulary: llama.cpp reads no other tokenizer key.
    const bool no_vocab = tokenizer && (*tokenizer == "none" || *tokenizer == "no_vocab");
    for (const KeyTypeRule& rule : kKeyRules) {
      if (rule.archs != kAnyArch && !(rule.archs & arch_bit)) continue;
      if (no_vocab && rule.key.starts_with("tokenizer.") && rule.key != "tokenizer.ggml.model")
        continue;
      const KeyValue* kv = find(rule.key);
      if (!kv) continue;
      const std::string_view k = rule.key;
      if ((k == ".attention.key_length" || k == ".attention.value_length" ||
           k == ".rope.dimension_count") &&
          !heads)
        continue;
      // Read only when rope.scaling.factor is absent; q_lora_rank not for DeepSeek's "lite"
      // models; merges only by the BPE tokenizers.
      if (k == ".rope.scale_linear" && find(".rope.scaling.factor")) continue;
      if (k == ".attention.q_lora_rank" && layers &&
          (*layers == 26 || *layers == 27 || *layers == 48))
        continue;
      if (k == "tokenizer.ggml.merges" &&
          !(tokenizer &&
            (*tokenizer == "gpt2" || *tokenizer == "hybriddna" || *tokenizer == "whitespace")))
        continue;
      const Value& v = kv->value;
      const std::string obj = key_object(kv->key);
      const std::string name = escape_for_terminal(kv->key);
      std::string want;
      switch (rule.form) {
        case KeyForm::kScalar:
          if (v.type() == rule.type) continue;
          want = value_type_name(rule.type);
          break;
        case KeyForm::kArray:
          // A label list that is not an array is ignored by llama.cpp.
          if (!v.is_array() && k == ".classifier.output_labels") continue;
          if (v.is_array() && (v.array_type() == rule.type || v.array_type() == rule.alt)) continue;
          want = rule.alt == kNoAltType
                     ? fmt::format("an array of {}", value_type_name(rule.type))
                     : fmt::format("an array of {} or {}", value_type_name(rule.type),
                                   value_type_name(rule.alt));
          break;
        case KeyForm::kPerLayer:
          if (v.type() == kU32) continue;
          if (v.is_array() &&
              (v.array_type() == kU32 || v.array_type() == kI32 || v.array_type() == kBool)) {
            if (!layers || v.array_size() == *layers) continue;
            add(f, obj, kv->type_offset(),
                fmt::format("{} has {} entries; llama.cpp's loader wants one per layer ({}, as "
                            "{}.block_count says)",
                            name, v.array_size(), *layers, escape_for_terminal(*arch)));
            continue;
          }
          want = "u32, or an array of u32, i32 or bool with one entry per layer";
          break;
      }
      add(f, obj, kv->type_offset(),
          fmt::format("{} must be {}, found {}; llama.cpp's loader refuses the model", name, want,
                      type_text(v)));
    }
  }

  // Keys llama.cpp's loader cannot do without, for a language model: the three
  // hyperparameters every architecture reads, and the vocabulary every model load reads (the
  // messages in parentheses are libllama 3.21.1's). A language model is a model file with a
  // vocabulary of its own, or one of an architecture we know (llama, deepseek2) with some of
  // its hyperparameters; other GGUFs (an mmproj, say, or a bare container of tensors) have
  // keys of their own, or none.
  void check_required_keys() {
    const GgufFile& f = model_.first();
    if (!is_model_file(f)) return;
    const std::string* arch = architecture_of(f);
    if (!arch || arch->empty()) return;
    const KeyValue* tokenizer_kv = entry(f, "tokenizer.ggml.model");
    const bool known = *arch == "llama" || *arch == "deepseek2";
    const std::string prefix = *arch + ".";
    const auto& es = f.metadata().entries();
    const bool hyperparameters = std::any_of(
        es.begin(), es.end(), [&](const KeyValue& kv) { return kv.key.starts_with(prefix); });
    if (!tokenizer_kv && !entry(f, "tokenizer.ggml.tokens") && !(known && hyperparameters)) return;
    const auto missing = [&](const std::string& key, std::string_view why) {
      add(f, key_object(key), std::nullopt,
          fmt::format("missing; llama.cpp's loader refuses the model without it ({})", why));
    };
    // A vocabulary-only file (no tensors: llama-tokenize loads one with vocab_only, which
    // reads no hyperparameter) needs only the vocabulary.
    if (!model_.tensors().empty()) {
      for (const char* k : {".context_length", ".embedding_length", ".block_count"}) {
        const std::string key = *arch + k;
        if (!entry(f, key)) missing(key, fmt::format("key not found in model: {}", key));
      }
      // And llama's own: its norms' epsilon.
      if (const std::string key = "llama.attention.layer_norm_rms_epsilon";
          *arch == "llama" && !entry(f, key))
        missing(key, fmt::format("key not found in model: {}", key));
    }
    if (!tokenizer_kv) return missing("tokenizer.ggml.model", "it reads every model's vocabulary");
    const std::string* tokenizer = tokenizer_kv->value.as_string();
    if (!tokenizer || *tokenizer == "none" || *tokenizer == "no_vocab") return;
    if (!entry(f, "tokenizer.ggml.tokens"))
      missing("tokenizer.ggml.tokens", "cannot find tokenizer vocab in model file");
    if (*tokenizer == "gpt2" && !entry(f, "tokenizer.ggml.merges"))
      missing("tokenizer.ggml.merges",
              "a gpt2 (BPE) vocabulary: cannot find tokenizer merges in model file");
  }

  void check_quantization_version() {
    const TensorRef* quantized = nullptr;
    for (const TensorRef& t : model_.tensors()) {
      const TypeTraits* tr = sized_type(t.info->type_id);
      if (tr && tr->quantized) {
        quantized = &t;
        break;
      }
    }
    const GgufFile& f = model_.first();
    const KeyValue* kv = entry(f, kQuantVersion);
    // Warnings: writers of quantized files (llama-quantize, gguf-py) record it, as u32, but
    // llama.cpp's loader reads it not at all (libllama 3.21.1 loads a file without it).
    if (!kv) {
      if (quantized)
        add(f, key_object(kQuantVersion), std::nullopt,
            fmt::format("missing, but tensor '{}' is quantized ({}); quantized GGUFs record "
                        "general.quantization_version (u32, currently 2), though llama.cpp's "
                        "loader does not read it",
                        escape_for_terminal(quantized->name()),
                        type_name(quantized->info->type_id)),
            "warning");
      return;
    }
    if (kv->value.type() != ValueType::kU32)
      return add(f, key_object(kQuantVersion), kv->type_offset(),
                 fmt::format("general.quantization_version must be u32, found {} (llama.cpp's "
                             "loader does not read it; other readers may refuse it)",
                             value_type_name(kv->value.type())),
                 "warning");
    if (const uint64_t v = *kv->value.as_uint(); v != 2)
      add(f, key_object(kQuantVersion), kv->value_offset(),
          fmt::format("general.quantization_version is {}; ggml's quantized formats are at "
                      "version 2",
                      v),
          "warning");
  }
};

}  // namespace

std::span<const KeyTypeRule> llama_key_type_rules() { return kKeyRules; }

void detail::check_keys(const Model& model, std::vector<Problem>& out) {
  KeyChecker(model, out).run();
}

}  // namespace gguf
