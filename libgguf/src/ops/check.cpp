// check_model: what ggml's gguf reader and llama.cpp's loader demand of a file beyond what the
// lenient reader enforces, plus a streaming scan of tensor data for NaN/Inf values and scales.
#include "gguf/ops/check.h"

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <numeric>
#include <unordered_set>

#include "gguf/base/escape.h"
#include "gguf/format/names.h"
#include "gguf/write/plan.h"

namespace gguf {

std::string format_problem(const Problem& p) {
  std::string out;
  if (!p.path.empty()) out += fmt::format("{}: ", escape_for_terminal(p.path));
  if (!p.object.empty()) out += fmt::format("{}: ", p.object);
  if (p.offset) out += fmt::format("at byte {}: ", *p.offset);
  return out + p.message;
}

namespace {

constexpr const char* kLayoutRule =
    "ggml requires each tensor's data to follow the previous one's in header order, padded to "
    "the alignment";
constexpr const char* kQuantVersion = "general.quantization_version";

uint64_t pad(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

const char* plural(uint64_t n, const char* one, const char* many) { return n == 1 ? one : many; }

// ---- data scanning ----

// How a type's payload can hold a non-finite number.
enum class Scan { kNone, kF32, kF16, kBF16, kF64, kHalfScales, kQ8K, kIQ1M, kE8M0 };

struct ScaleField {
  uint16_t at;  // byte offset inside the block
  const char* name;
};

struct ScanLayout {
  Scan scan = Scan::kNone;
  ScaleField fields[2] = {};
  int n_fields = 0;
};

// Byte offsets of the fp16 scales inside each block (ggml-common.h block layouts). mxfp4's E8M0
// exponent byte 0xFF is the format's NaN: ggml's decoder reads it as 2^127, but
// ggml_validate_row_data (llama.cpp's tensor check) refuses it. nvfp4's UE4M3 scales are valid
// for every byte (ggml checks nothing), so they are not listed.
ScanLayout scan_layout(uint32_t type) {
  using T = GgmlType;
  const auto half = [](ScaleField a) { return ScanLayout{Scan::kHalfScales, {a, {}}, 1}; };
  const auto halves = [](ScaleField a, ScaleField b) {
    return ScanLayout{Scan::kHalfScales, {a, b}, 2};
  };
  switch (static_cast<T>(type)) {
    case T::F32:
      return {Scan::kF32};
    case T::F16:
      return {Scan::kF16};
    case T::BF16:
      return {Scan::kBF16};
    case T::F64:
      return {Scan::kF64};
    case T::Q4_1:
    case T::Q5_1:
      return halves({0, "d"}, {2, "m"});
    case T::Q8_1:
      return halves({0, "d"}, {2, "s"});
    case T::Q4_K:
    case T::Q5_K:
      return halves({0, "d"}, {2, "dmin"});
    case T::Q2_K:
      return halves({80, "d"}, {82, "dmin"});
    case T::Q3_K:
      return half({108, "d"});
    case T::Q6_K:
      return half({208, "d"});
    case T::TQ1_0:
      return half({52, "d"});
    case T::TQ2_0:
      return half({64, "d"});
    case T::Q4_0:
    case T::Q5_0:
    case T::Q8_0:
    case T::IQ2_XXS:
    case T::IQ2_XS:
    case T::IQ2_S:
    case T::IQ3_XXS:
    case T::IQ3_S:
    case T::IQ1_S:
    case T::IQ4_NL:
    case T::IQ4_XS:
    case T::Q1_0:
    case T::Q2_0:
      return half({0, "d"});
    case T::Q8_K:
      return {Scan::kQ8K, {{0, "d"}, {}}, 1};
    case T::IQ1_M:
      return {Scan::kIQ1M, {{48, "scale"}, {}}, 1};
    case T::MXFP4:
      return {Scan::kE8M0, {{0, "e"}, {}}, 1};
    default:
      return {};
  }
}

template <class W>
W load(const uint8_t* p) {
  W w;
  std::memcpy(&w, p, sizeof(W));
  return w;
}

// iq1_m keeps its fp16 block scale in the top nibbles of the four u16 words at byte 48.
uint16_t iq1m_scale(const uint8_t* block) {
  const auto s = [&](int i) { return load<uint16_t>(block + 48 + 2 * i); };
  return static_cast<uint16_t>((s(0) >> 12) | ((s(1) >> 8) & 0x00F0) | ((s(2) >> 4) & 0x0F00) |
                               (s(3) & 0xF000));
}

// Finds non-finite numbers in [p, p + n units): counts them, remembers the first.
struct Hits {
  uint64_t count = 0;
  uint64_t first = UINT64_MAX;  // unit index inside the tensor
  int field = 0;
  uint64_t bits = 0;  // the offending number's bits
};

template <class W>
void scan_floats(const uint8_t* p, uint64_t n, uint64_t base, W exp_mask, Hits& h) {
  uint64_t c = 0;
  for (uint64_t i = 0; i < n; ++i) c += (load<W>(p + i * sizeof(W)) & exp_mask) == exp_mask;
  if (c == 0) return;
  h.count = c;
  for (uint64_t i = 0; i < n; ++i) {
    const W w = load<W>(p + i * sizeof(W));
    if ((w & exp_mask) == exp_mask) {
      h.first = base + i;
      h.bits = w;
      return;
    }
  }
}

void scan_blocks(const ScanLayout& l, const uint8_t* p, uint64_t n, uint64_t block_bytes,
                 uint64_t base, Hits& h) {
  for (uint64_t b = 0; b < n; ++b) {
    const uint8_t* blk = p + b * block_bytes;
    for (int k = 0; k < l.n_fields; ++k) {
      uint64_t bits;
      bool bad;
      if (l.scan == Scan::kQ8K) {
        bits = load<uint32_t>(blk);
        bad = (bits & 0x7F800000u) == 0x7F800000u;
      } else if (l.scan == Scan::kE8M0) {
        bits = blk[l.fields[k].at];
        bad = bits == 0xFF;
      } else {
        bits = l.scan == Scan::kIQ1M ? iq1m_scale(blk) : load<uint16_t>(blk + l.fields[k].at);
        bad = (bits & 0x7C00u) == 0x7C00u;
      }
      if (!bad) continue;
      if (h.count++ == 0) h.first = base + b, h.field = k, h.bits = bits;
      break;  // count blocks, not fields
    }
  }
}

// "nan", "inf" or "-inf" from the bits of a float with the given exponent/mantissa widths.
std::string name_nonfinite(uint64_t bits, int mantissa_bits, int total_bits) {
  if (bits & ((uint64_t{1} << mantissa_bits) - 1)) return "nan";
  return (bits >> (total_bits - 1)) & 1 ? "-inf" : "inf";
}

// ---- metadata key types ----

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

struct Chunk {
  size_t tensor;  // index into Model::tensors()
  uint64_t first_unit, n_units;
};

class Checker {
 public:
  Checker(const Model& m, const CheckOptions& o) : model_(m), options_(o) {}

  std::vector<Problem> run() {
    for (const auto& shard : model_.shards()) check_shard(*shard);
    check_architecture();
    check_key_types();
    check_required_keys();
    check_quantization_version();
    check_expert_types();
    if (options_.scan_data) scan_data();
    return std::move(out_);
  }

 private:
  const Model& model_;
  const CheckOptions& options_;
  std::vector<Problem> out_;
  std::unordered_set<const TensorInfo*> scannable_;  // tensors whose data lies in their file

  void add(const GgufFile& f, std::string object, std::optional<uint64_t> at, std::string msg,
           const char* severity = "error") {
    out_.push_back({f.path(), std::move(object), at, std::move(msg), severity});
  }

  void check_shard(const GgufFile& f) {
    for (const KeyValue& kv : f.metadata().entries())
      if (const size_t nul = kv.key.find('\0'); nul != std::string::npos)
        add(f, key_object(kv.key), kv.offset,
            fmt::format("key contains a NUL byte; ggml's lookups by name see it as '{}', other "
                        "readers may not",
                        escape_for_terminal(kv.key.substr(0, nul))));
    check_alignment(f);
    bool layout_known = true;
    for (const TensorInfo& t : f.tensors()) layout_known &= check_tensor(f, t);
    // An unsized or out-of-bounds tensor (already reported) hides where the next should start.
    if (layout_known) check_layout(f);
  }

  // The entry of key (with its byte offset, which Metadata::find does not give) as ggml and
  // llama.cpp look it up, or nullptr.
  static const KeyValue* entry(const GgufFile& f, std::string_view key) {
    return find_key_as_ggml(f.metadata(), key);
  }

  void check_alignment(const GgufFile& f) {
    const KeyValue* kv = entry(f, "general.alignment");
    if (!kv) return;
    const std::string obj = key_object(kv->key);
    if (kv->value.type() != ValueType::kU32)
      return add(f, obj, kv->type_offset(),
                 fmt::format("general.alignment must be u32, found {}",
                             value_type_name(kv->value.type())));
    const uint64_t a = *kv->value.as_uint();
    if (a == 0 || !std::has_single_bit(a))
      return add(f, obj, kv->value_offset(),
                 fmt::format("general.alignment must be a non-zero power of two, found {}", a));
    if (a >= kGgmlTensorAlignment) return;
    for (const TensorInfo& t : f.tensors()) {
      if (f.data_start(t) % kGgmlTensorAlignment == 0) continue;
      return add(f, obj, kv->value_offset(),
                 fmt::format("general.alignment {} lets tensor data start off a 32-byte boundary "
                             "('{}' at byte {}); llama.cpp aborts when it memory-maps the file "
                             "(ggml's CPU backend asserts 32-byte alignment)",
                             a, escape_for_terminal(t.name), f.data_start(t)));
    }
  }

  // Returns false when the tensor's data range is unknown or outside the file.
  bool check_tensor(const GgufFile& f, const TensorInfo& t) {
    const std::string obj = tensor_object(t.name);
    if (t.name.empty())
      add(f, obj, t.info_offset,
          "empty tensor name; llama.cpp's loader refuses a tensor it does not know");
    if (t.name.size() > kMaxNameBytes)
      add(f, obj, t.info_offset,
          fmt::format("name is {} bytes; ggml requires fewer than {}", t.name.size(),
                      kMaxNameBytes + 1));
    if (const size_t nul = t.name.find('\0'); nul != std::string::npos)
      add(f, obj, t.info_offset,
          fmt::format("name contains a NUL byte at position {}; ggml would read it as '{}'", nul,
                      escape_for_terminal(t.name.substr(0, nul))));
    if (t.shape.size() > kMaxDims)
      add(f, obj, t.dims_offset(),
          fmt::format("n_dims {} exceeds ggml's maximum of {}", t.shape.size(), kMaxDims));
    const TypeTraits* tr = find_type(t.type_id);
    if (!tr)
      add(f, obj, t.type_offset(),
          fmt::format("unknown type id {}; ggml refuses ids outside 0-{}", t.type_id,
                      kTypeCount - 1));
    else if (tr->removed)
      add(f, obj, t.type_offset(),
          fmt::format("type id {} ({}) was removed from ggml, which refuses it", t.type_id,
                      tr->name));
    else if (is_activation_only(static_cast<GgmlType>(t.type_id)))
      // ggml's CPU backend has no matrix product or row lookup with these as weights: llama.cpp
      // loads such a file, then crashes (SIGSEGV, or a fatal error in get_rows).
      add(f, obj, t.type_offset(),
          fmt::format("type {} is one ggml uses only for activations: llama.cpp loads the file "
                      "but crashes computing with this tensor",
                      tr->name),
          "warning");
    if (!t.bytes) return false;
    // The reader refuses the next two; a partially parsed file may still carry them.
    if (t.offset % f.alignment() != 0) {
      add(f, obj, t.data_offset_field(),
          fmt::format("data offset {} is not a multiple of the alignment {}", t.offset,
                      f.alignment()));
      return false;
    }
    const uint64_t size = f.file_size();
    const uint64_t start = f.data_offset() + t.offset;
    if (t.offset > size || f.data_offset() > size - t.offset || *t.bytes > size - start) {
      add(f, obj, t.data_offset_field(),
          fmt::format("data runs past end of file (needs {} bytes at offset {}, file has {})",
                      *t.bytes, t.offset, size));
      return false;
    }
    scannable_.insert(&t);
    return true;
  }

  // ggml's rule is "offset == running sum of padded sizes in header order"; rather than report
  // the first mismatch and every later one, name the facts behind it: overlapping data, data
  // out of header order, and unused bytes. None of the three holds exactly when the rule does.
  void check_layout(const GgufFile& f) {
    const auto& ts = f.tensors();
    const uint64_t a = f.alignment();
    const auto end = [&](size_t i) { return ts[i].offset + *ts[i].bytes; };
    const auto desc = [&](size_t i) {
      return fmt::format("tensor '{}' (offset {}, {} bytes)", escape_for_terminal(ts[i].name),
                         ts[i].offset, *ts[i].bytes);
    };
    std::vector<size_t> by_offset(ts.size());
    std::iota(by_offset.begin(), by_offset.end(), size_t{0});
    std::stable_sort(by_offset.begin(), by_offset.end(),
                     [&](size_t x, size_t y) { return ts[x].offset < ts[y].offset; });

    // Overlaps, reported on the tensor that comes later in the header.
    std::vector<std::string> overlap(ts.size());
    for (auto& [i, what] : data_overlaps(f)) overlap[i] = std::move(what);
    std::vector<std::string> found(ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      if (!overlap[i].empty()) {
        found[i] = overlap[i];
      } else if (i > 0 && ts[i].offset < pad(end(i - 1), a)) {
        found[i] = fmt::format("data at offset {} starts before the end of the previous {}",
                               ts[i].offset, desc(i - 1));
      }
    }
    // Unused bytes: the data section must be covered without holes up to the last tensor.
    uint64_t covered = 0;
    for (size_t i : by_offset) {
      if (ts[i].offset > covered && found[i].empty())
        found[i] = covered == 0 ? fmt::format(
                                      "{} unused bytes at the start of the data section before "
                                      "this tensor's data (offset {})",
                                      ts[i].offset, ts[i].offset)
                                : fmt::format(
                                      "{} unused bytes before this tensor's data (offset {}; the "
                                      "data before it ends at {} after padding)",
                                      ts[i].offset - covered, ts[i].offset, covered);
      covered = std::max(covered, pad(end(i), a));
    }
    for (size_t i = 0; i < ts.size(); ++i)
      if (!found[i].empty())
        add(f, tensor_object(ts[i].name), f.data_start(ts[i]),
            fmt::format("{}; {}", found[i], kLayoutRule));
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

  // ds4 quantizes the routed gate and up experts of a layer to one type and its kernels rely
  // on it; a splice that mixes them loads in llama.cpp but not in ds4.
  void check_expert_types() {
    const std::string arch = model_.architecture();
    std::map<int, const TensorRef*> first;
    for (const TensorRef& t : model_.tensors()) {
      const TensorName tn = classify_tensor(t.name(), arch, ggml_dims(t.info->shape));
      if (!tn.layer || !tn.is_gate_or_up_weight()) continue;
      const auto [it, fresh] = first.emplace(*tn.layer, &t);
      if (fresh || it->second->info->type_id == t.info->type_id) continue;
      add(*t.file, tensor_object(t.name()), t.info->type_offset(),
          fmt::format("type {} differs from {} of tensor '{}' in layer {}; ds4 requires the "
                      "routed gate and up experts of a layer to share one type",
                      type_name(t.info->type_id), type_name(it->second->info->type_id),
                      escape_for_terminal(it->second->name()), *tn.layer),
          "warning");
    }
  }

  void scan_data() {
    const auto& refs = model_.tensors();
    std::vector<ScanLayout> layouts(refs.size());
    std::vector<Chunk> chunks;
    for (size_t i = 0; i < refs.size(); ++i) {
      const TensorInfo& t = *refs[i].info;
      if (!scannable_.count(&t) || *t.bytes == 0) continue;
      layouts[i] = scan_layout(t.type_id);
      if (layouts[i].scan == Scan::kNone) continue;
      const uint64_t unit = t.type()->type_size;
      const uint64_t units = *t.bytes / unit;
      const uint64_t per_chunk = std::max<uint64_t>(1, options_.chunk_bytes / unit);
      for (uint64_t u = 0; u < units; u += per_chunk)
        chunks.push_back({i, u, std::min(per_chunk, units - u)});
    }
    std::vector<Hits> hits(chunks.size());
    const auto work = [&](const tbb::blocked_range<size_t>& r) {
      for (size_t c = r.begin(); c != r.end(); ++c) {
        const Chunk& ch = chunks[c];
        const TensorRef& ref = refs[ch.tensor];
        const uint64_t unit = ref.info->type()->type_size;
        thread_local std::vector<uint8_t> buf;  // the chunk, read (memory bounded by chunks)
        const uint8_t* p =
            ref.file->source()
                .stream(ref.data_start() + ch.first_unit * unit, ch.n_units * unit, buf)
                .data();
        const ScanLayout& l = layouts[ch.tensor];
        Hits& h = hits[c];
        switch (l.scan) {
          case Scan::kF32:
            scan_floats<uint32_t>(p, ch.n_units, ch.first_unit, 0x7F800000u, h);
            break;
          case Scan::kF16:
            scan_floats<uint16_t>(p, ch.n_units, ch.first_unit, 0x7C00u, h);
            break;
          case Scan::kBF16:
            scan_floats<uint16_t>(p, ch.n_units, ch.first_unit, 0x7F80u, h);
            break;
          case Scan::kF64:
            scan_floats<uint64_t>(p, ch.n_units, ch.first_unit, 0x7FF0000000000000u, h);
            break;
          default:
            scan_blocks(l, p, ch.n_units, unit, ch.first_unit, h);
        }
      }
    };
    tbb::task_arena arena(options_.threads ? static_cast<int>(options_.threads)
                                           : tbb::task_arena::automatic);
    arena.execute([&] { tbb::parallel_for(tbb::blocked_range<size_t>(0, chunks.size()), work); });

    // Chunks of a tensor are contiguous and in order: the first hit is the first chunk's.
    for (size_t c = 0; c < chunks.size();) {
      const size_t i = chunks[c].tensor;
      Hits total;
      for (; c < chunks.size() && chunks[c].tensor == i; ++c) {
        if (total.count == 0)
          total = hits[c];
        else
          total.count += hits[c].count;
      }
      if (total.count) report_hits(refs[i], layouts[i], total);
    }
  }

  void report_hits(const TensorRef& ref, const ScanLayout& l, const Hits& h) {
    const uint64_t unit = ref.info->type()->type_size;
    uint64_t at = ref.data_start() + h.first * unit;
    std::string msg;
    switch (l.scan) {
      case Scan::kF32:
      case Scan::kF16:
      case Scan::kBF16:
      case Scan::kF64: {
        const int mant = l.scan == Scan::kF32    ? 23
                         : l.scan == Scan::kF16  ? 10
                         : l.scan == Scan::kBF16 ? 7
                                                 : 52;
        msg = fmt::format("{} non-finite {} (first: {} at element {})", h.count,
                          plural(h.count, "value", "values"),
                          name_nonfinite(h.bits, mant, static_cast<int>(unit * 8)), h.first);
        break;
      }
      default: {
        const bool f32 = l.scan == Scan::kQ8K;
        at += l.fields[h.field].at;
        msg = fmt::format("{} {} with a non-finite scale (first: block {}, {} = {})", h.count,
                          plural(h.count, "block", "blocks"), h.first, l.fields[h.field].name,
                          l.scan == Scan::kE8M0
                              ? std::string("nan (E8M0 0xff)")
                              : name_nonfinite(h.bits, f32 ? 23 : 10, f32 ? 32 : 16));
      }
    }
    add(*ref.file, tensor_object(ref.name()), at, std::move(msg));
  }
};

}  // namespace

std::optional<std::pair<uint64_t, std::string>> first_nonfinite_scale(
    GgmlType type, std::span<const uint8_t> blocks) {
  const ScanLayout l = scan_layout(static_cast<uint32_t>(type));
  if (l.scan != Scan::kHalfScales && l.scan != Scan::kQ8K && l.scan != Scan::kIQ1M &&
      l.scan != Scan::kE8M0)
    return {};
  const uint64_t unit = traits(type).type_size;
  Hits h;
  scan_blocks(l, blocks.data(), blocks.size() / unit, unit, 0, h);
  if (h.count == 0) return {};
  return std::pair<uint64_t, std::string>{h.first, l.fields[h.field].name};
}

std::vector<std::pair<size_t, std::string>> data_overlaps(const GgufFile& f) {
  const auto& ts = f.tensors();
  const auto end = [&](size_t i) { return ts[i].offset + *ts[i].bytes; };
  const auto desc = [&](size_t i) {
    return fmt::format("tensor '{}' (offset {}, {} bytes)", escape_for_terminal(ts[i].name),
                       ts[i].offset, *ts[i].bytes);
  };
  std::vector<size_t> by_offset;
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i].bytes && *ts[i].bytes > 0) by_offset.push_back(i);
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [&](size_t x, size_t y) { return ts[x].offset < ts[y].offset; });
  std::map<size_t, std::string> found;  // by the later tensor's index: header order
  size_t owner = SIZE_MAX;              // the tensor reaching furthest so far
  for (size_t i : by_offset) {
    if (owner != SIZE_MAX && ts[i].offset < end(owner)) {
      const size_t later = std::max(i, owner), earlier = std::min(i, owner);
      const bool same = ts[i].offset == ts[owner].offset && end(i) == end(owner);
      found[later] =
          fmt::format("{} {}", same ? "shares its data with" : "data overlaps", desc(earlier));
    }
    if (owner == SIZE_MAX || end(i) > end(owner)) owner = i;
  }
  return {found.begin(), found.end()};
}

std::optional<std::string> overlap_warning(const Model& m) {
  for (const auto& f : m.shards()) {
    const auto o = data_overlaps(*f);
    if (o.empty()) continue;
    return fmt::format(
        "'{}': tensor '{}' {}: ggml's reader refuses such a file; the output gives each tensor "
        "its own copy of the bytes{}",
        escape_for_terminal(f->path()), escape_for_terminal(f->tensors()[o.front().first].name),
        o.front().second,
        o.size() > 1 ? fmt::format(" ({} overlapping tensors in all)", o.size()) : "");
  }
  return std::nullopt;
}

std::span<const KeyTypeRule> llama_key_type_rules() { return kKeyRules; }

std::vector<Problem> check_model(const Model& model, const CheckOptions& options) {
  return Checker(model, options).run();
}

}  // namespace gguf
