// Requant plans: decode each quantizable tensor row-chunk by row-chunk and encode it to the
// target type through the streaming row encoder.
#include "gguf/ops/requant.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/base/fp16.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/names.h"
#include "gguf/ops/check.h"
#include "gguf/ops/exact.h"
#include "gguf/ops/splice.h"
#include "gguf/write/encode.h"
#include "write/writer_internal.h"

namespace gguf {
namespace {

// Decodes rows [first, first + count) of a tensor into out.
void decode_rows(const TensorRef& t, int64_t n_per_row, int64_t first, int64_t count,
                 std::span<float> out) {
  const auto type = static_cast<GgmlType>(t.info->type_id);
  const uint64_t rb = *row_bytes(type, static_cast<uint64_t>(n_per_row));
  const auto data = t.data();
  dequantize(type, data.subspan(static_cast<size_t>(first) * rb, static_cast<size_t>(count) * rb),
             out);
  t.file->source().release(t.data_start() + static_cast<uint64_t>(first) * rb,
                           static_cast<uint64_t>(count) * rb);
}

// Column energy of each matrix of a tensor, computed once per matrix on first use and let go
// once all its rows are encoded, so memory stays bounded by the matrices being encoded (a
// tensor of 400,000 one-row experts would otherwise keep 4 bytes per weight until the end).
class EnergyCache {
 public:
  EnergyCache(TensorRef t, int64_t n_per_row, int64_t rows_per_matrix)
      : t_(t), n_per_row_(n_per_row), rows_per_matrix_(rows_per_matrix) {}
  void done(int64_t mat, int64_t rows) {
    std::lock_guard lock(mu_);
    const auto it = cache_.find(mat);
    if (it == cache_.end()) return;
    Entry& e = it->second;
    e.rows_done += rows;
    if (--e.users == 0 && e.rows_done >= rows_per_matrix_) cache_.erase(it);
  }
  std::span<const float> get(int64_t mat) {
    std::lock_guard lock(mu_);
    auto it = cache_.find(mat);
    if (it == cache_.end()) {
      std::vector<float> w(static_cast<size_t>(n_per_row_), 0.0f);
      constexpr int64_t kRows = 256;
      std::vector<float> buf;
      for (int64_t r = 0; r < rows_per_matrix_; r += kRows) {
        const int64_t n = std::min(kRows, rows_per_matrix_ - r);
        buf.resize(static_cast<size_t>(n * n_per_row_));
        decode_rows(t_, n_per_row_, mat * rows_per_matrix_ + r, n, buf);
        // One float sum per column in row order, as if the matrix were read whole (adding
        // per-piece sums would round differently on matrices of more than 256 rows).
        add_column_energy(buf, n, n_per_row_, w);
      }
      it = cache_.emplace(mat, Entry{std::move(w), 0, 0}).first;
    }
    ++it->second.users;  // one get per task of rows, and one done when they are encoded
    return it->second.energy;
  }

 private:
  struct Entry {
    std::vector<float> energy;
    int64_t rows_done = 0;
    int64_t users = 0;  // tasks holding the span
  };
  TensorRef t_;
  int64_t n_per_row_, rows_per_matrix_;
  std::mutex mu_;
  std::map<int64_t, Entry> cache_;  // node-based: a returned span stays valid while others come
};

}  // namespace

bool is_quantizable(const TensorInfo& t, std::string_view arch) {
  // As llama.cpp's quantizer (llama-quant.cpp): ggml's dimension count, which ignores trailing
  // 1s ([4096, 1] is a vector, as gguf-py may write it), and only tensors named "*weight"
  // (biases, 2-D ones too such as gpt-oss's ffn_*_exps.bias, stay as they are).
  if (ggml_dims(t.shape) < 2) return false;
  if (!t.name.ends_with("weight")) return false;
  // Small or special 2-D weights llama.cpp never quantizes (Mamba and LFM2 convolutions,
  // RWKV mixers, T5 relative-position biases, Gemma 3n's altup/laurel/per-layer projection,
  // BERT position and token-type embeddings, multimodal position embeddings).
  for (std::string_view part : {"ssm_conv1d.weight",
                                "shortconv.conv.weight",
                                "time_mix_first.weight",
                                "time_mix_w0.weight",
                                "time_mix_w1.weight",
                                "time_mix_w2.weight",
                                "time_mix_v0.weight",
                                "time_mix_v1.weight",
                                "time_mix_v2.weight",
                                "time_mix_a0.weight",
                                "time_mix_a1.weight",
                                "time_mix_a2.weight",
                                "time_mix_g1.weight",
                                "time_mix_g2.weight",
                                "time_mix_decay_w1.weight",
                                "time_mix_decay_w2.weight",
                                "time_mix_lerp_fused.weight",
                                "attn_rel_b.weight",
                                "altup",
                                "laurel",
                                "per_layer_model_proj",
                                ".position_embd."})
    if (t.name.find(part) != std::string::npos) return false;
  if (t.name == "position_embd.weight" || t.name == "token_types.weight") return false;
  // Integer tensors (indices, positions, masks) are data, not weights: re-encoding them as
  // floats would change what they mean (and lose precision past 2^24), as llama-quantize knows.
  switch (static_cast<GgmlType>(t.type_id)) {
    case GgmlType::I8:
    case GgmlType::I16:
    case GgmlType::I32:
    case GgmlType::I64:
      return false;
    default:
      break;
  }
  const TensorName tn = classify_tensor(t.name, arch, ggml_dims(t.shape));
  return tn.role != Role::kNorm && tn.role != Role::kRouter;
}

namespace {

// "PATTERN=TYPE" or "ROLES=TYPE" split at the last '=' (a regex may hold one, a type never).
std::pair<std::string_view, std::string_view> split_rule(std::string_view option,
                                                         std::string_view value,
                                                         std::string_view what,
                                                         std::string_view example) {
  const size_t eq = value.rfind('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == value.size())
    usage_error(fmt::format("invalid {} value '{}': expected {}=TYPE, e.g. {}", option,
                            terminal_safe(value), what, example));
  return {value.substr(0, eq), value.substr(eq + 1)};
}

// A rule's type: a ggml type with an encoder (checked here, so that the usage error comes
// before any file is opened), or "keep".
std::optional<GgmlType> rule_type(std::string_view option, std::string_view type,
                                  std::string_view value) {
  std::string lower(type);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "keep") return std::nullopt;
  const auto t = parse_type(type);
  if (!t) usage_error(unknown_type_message(option, type));
  if (!can_encode(*t))
    usage_error(fmt::format("{} '{}': no encoder for {} yet", option, terminal_safe(value),
                            traits(*t).name));
  return t;
}

constexpr std::string_view kOutputName = "output.weight";

bool is_token_embedding_name(std::string_view name) {
  return name == "token_embd.weight" || name == "per_layer_token_embd.weight";
}

// Where a matching rule stands in llama-quantize's order (lower first), or -1 when the rule
// does not match. `pattern_matched`: some kPattern rule matches the name.
int rule_phase(const TypeRule& rule, std::string_view name, const TensorName& tn, bool tied,
               bool pattern_matched) {
  using Kind = TypeRule::Kind;
  switch (rule.kind) {
    case Kind::kTokenEmbedding:
      if (!is_token_embedding_name(name)) return -1;
      // llama-quantize lets a --tensor-type that names the large per-layer table take it (the
      // rule then comes after that pattern, so that a message names it).
      return name == "per_layer_token_embd.weight" && pattern_matched ? 3 : 0;
    case Kind::kOutput:
      if (name == kOutputName) return 1;
      // Tied embeddings: the token embedding is the output too, after the manual overrides.
      if (tied && rule.tied && is_token_embedding_name(name)) return 3;
      return -1;
    case Kind::kPattern:
      return regex_found(name, *rule.regex, rule.pattern, rule.option, true) ? 2 : -1;
    case Kind::kRoles:
      return std::find(rule.roles.begin(), rule.roles.end(), tn.role) != rule.roles.end() ? 4 : -1;
  }
  return -1;
}

std::string type_list(const std::vector<GgmlType>& types) {
  std::vector<std::string_view> names;
  for (GgmlType t : types) names.push_back(traits(t).name);
  if (names.size() <= 1) return fmt::format("{}", fmt::join(names, ""));
  return fmt::format("{} and {}", fmt::join(names.begin(), names.end() - 1, ", "), names.back());
}

std::string role_list(const std::vector<Role>& roles) {
  std::vector<std::string_view> names;
  for (Role r : roles) names.push_back(role_name(r));
  return fmt::format("{}", fmt::join(names, " or "));
}

// What no tensor is, for a rule that matched none: "no tensor " + this.
std::string unmatched(const TypeRule& rule, bool tied) {
  switch (rule.kind) {
    case TypeRule::Kind::kPattern:
      return fmt::format("has a name containing a match for '{}'", terminal_safe(rule.pattern));
    case TypeRule::Kind::kRoles:
      return fmt::format("has role {}", role_list(rule.roles));
    case TypeRule::Kind::kOutput:
      return tied && rule.tied
                 ? "is named output.weight, nor (the model's output being its token embedding) "
                   "token_embd.weight or per_layer_token_embd.weight"
                 : "is named output.weight";
    case TypeRule::Kind::kTokenEmbedding:
      return "is named token_embd.weight or per_layer_token_embd.weight";
  }
  return "";
}

}  // namespace

// As typed: a regex's backslashes are not doubled (controls still are escaped).
std::string TypeRule::describe() const {
  if (value.empty()) return option;
  return fmt::format("{} '{}'", option, terminal_safe(value));
}

TypeRule parse_tensor_type_rule(std::string_view value) {
  constexpr std::string_view kOption = "--tensor-type";
  const auto [pattern, type] = split_rule(kOption, value, "PATTERN", "ffn_down_exps=q2_K");
  TypeRule r;
  r.option = kOption;
  r.value = value;
  r.pattern = pattern;
  r.regex = compile_regex(r.pattern, kOption);
  r.type = rule_type(kOption, type, value);
  return r;
}

TypeRule parse_role_type_rule(std::string_view value) {
  constexpr std::string_view kOption = "--role-type";
  const auto [roles, type] = split_rule(kOption, value, "ROLE[,ROLE...]", "routed-down=q2_K");
  TypeRule r;
  r.kind = TypeRule::Kind::kRoles;
  r.option = kOption;
  r.value = value;
  try {
    r.roles = parse_selector({}, {std::string(roles)}, {}).roles;
  } catch (const Error& e) {
    usage_error(
        fmt::format("invalid {} value '{}': {}", kOption, terminal_safe(value), e.message()));
  }
  r.type = rule_type(kOption, type, value);
  return r;
}

TypeRule leave_output_tensor_rule() {
  TypeRule r = named_type_rule(TypeRule::Kind::kOutput, "--leave-output-tensor", "keep");
  r.value.clear();  // a flag: described by its name alone
  r.tied = false;   // output.weight alone, as in llama-quantize
  return r;
}

TypeRule named_type_rule(TypeRule::Kind kind, std::string_view option, std::string_view type) {
  TypeRule r;
  r.kind = kind;
  r.option = option;
  r.value = type;
  r.type = rule_type(option, type, type);
  return r;
}

RequantResult requant(const Model& model, const RequantOptions& o) {
  RequantResult r;
  r.exact = o.exact;
  const std::string arch = model.architecture();
  if (!o.type && o.rules.empty())
    usage_error(
        "--type is required (the type to re-encode to), or a per-tensor type such as "
        "--tensor-type PATTERN=TYPE");
  if (o.type && !can_encode(*o.type))
    usage_error(fmt::format("--type {}: no encoder for this type yet", traits(*o.type).name));
  for (const TypeRule& rule : o.rules)
    if (rule.kind == TypeRule::Kind::kPattern && !rule.regex)
      throw Error(fmt::format("requant: {} has no compiled pattern (build it with "
                              "parse_tensor_type_rule)",
                              rule.describe()),
                  Error::Kind::kUsage);
  for (const TypeRule& rule : o.rules)
    if (rule.type && !can_encode(*rule.type))
      usage_error(
          fmt::format("{}: no encoder for {} yet", rule.describe(), traits(*rule.type).name));
  // llama-quantize's tied embeddings: a model without output.weight computes its output with
  // the token embedding.
  const bool tied = !model.find(kOutputName);
  const bool any_pattern = std::any_of(o.rules.begin(), o.rules.end(), [](const TypeRule& rule) {
    return rule.kind == TypeRule::Kind::kPattern;
  });
  if (o.exact && o.imatrix)
    usage_error("--imatrix has no use with --exact: exact paths quantize nothing");
  std::vector<bool> selected(model.tensors().size(), false);
  for (size_t i : select_in(model, o.selector)) selected[i] = true;
  r.inputs = model.paths();
  r.bytes_before = model.total_bytes();
  r.plan.metadata = Metadata();
  for (const auto& kv : model.metadata().entries())
    if (!kv.key.starts_with("split.")) r.plan.metadata.append(kv);
  if (auto note = raise_small_alignment(r.plan.metadata)) r.notes.push_back(std::move(*note));
  if (auto note = overlap_warning(model)) r.notes.push_back(std::move(*note));
  bool lossy_note = false;
  std::vector<GgmlType> energy_types, encoded_types;
  const auto add_type = [](std::vector<GgmlType>& v, GgmlType t) {
    if (std::find(v.begin(), v.end(), t) == v.end()) v.push_back(t);
  };
  size_t n_selected = 0, n_quantizable = 0, n_encoded = 0, n_untyped = 0;
  // Per rule: the tensors it decides; a never-re-encoded tensor it matches; for a quantizable
  // tensor it matches that an earlier rule decides, that rule.
  struct RuleUse {
    size_t decided = 0;
    const TensorInfo* never = nullptr;
    const TypeRule* earlier = nullptr;
  };
  std::vector<RuleUse> uses(o.rules.size());
  for (size_t i = 0; i < model.tensors().size(); ++i) {
    const TensorRef& t = model.tensors()[i];
    const TensorInfo& info = *t.info;
    RequantRow row;
    row.name = info.name;
    row.source = t.file->path();
    row.type_before = row.type_after = info.type_id;
    row.bytes_before = row.bytes_after = info.require_bytes(t.file->path());
    info.require_ggml_name(t.file->path());
    PlanTensor pt{info.name, info.type_id, info.shape, row.bytes_before,
                  FileRange{t.file->source_ptr(), t.data_start()}};
    const bool quantizable = selected[i] && is_quantizable(info, arch);
    // The target: the first rule that matches, else --type; nullopt copies the tensor.
    std::optional<GgmlType> want = o.type;
    const TypeRule* decided_by = nullptr;
    // (require_ggml_name above bounds the name a regex runs on to 63 bytes.)
    if (selected[i] && !o.rules.empty()) {
      const TensorName tn = classify_tensor(info.name, arch, ggml_dims(info.shape));
      bool pattern_matched = false;
      if (any_pattern && info.name == "per_layer_token_embd.weight")
        for (const TypeRule& rule : o.rules)
          pattern_matched |= rule.kind == TypeRule::Kind::kPattern &&
                             regex_found(info.name, *rule.regex, rule.pattern, rule.option, true);
      // The matching rules in the order they are tried: by phase, then as given.
      std::vector<std::pair<int, size_t>> order;
      for (size_t k = 0; k < o.rules.size(); ++k)
        if (const int phase = rule_phase(o.rules[k], info.name, tn, tied, pattern_matched);
            phase >= 0)
          order.emplace_back(phase, k);
      std::sort(order.begin(), order.end());
      for (const auto& entry : order) {
        const size_t k = entry.second;
        if (!quantizable) {
          if (!uses[k].never) uses[k].never = &info;
        } else if (decided_by) {
          if (!uses[k].earlier) uses[k].earlier = decided_by;
        } else {
          decided_by = &o.rules[k];
          ++uses[k].decided;
          want = o.rules[k].type;
        }
      }
    }
    if (decided_by) row.rule = decided_by->describe();
    const bool encode = quantizable && want && info.type_id != traits(*want).id;
    n_selected += selected[i];
    n_quantizable += quantizable;
    n_encoded += encode;
    n_untyped += quantizable && !decided_by && !o.type;
    if (!encode) {
      row.action = "copy";
    } else {
      const GgmlType to_type = *want;
      const TypeTraits& target = traits(to_type);
      // Names the rule in messages about the tensor's target.
      const std::string from_rule =
          decided_by ? fmt::format(" (the type {} gives it)", decided_by->describe()) : "";
      const auto src_type = static_cast<GgmlType>(info.type_id);
      if (!can_decode(src_type))
        throw Error(t.file->path(), tensor_object(info.name), info.type_offset(),
                    fmt::format("no decoder for its type {}", type_name(info.type_id)));
      const int64_t n_per_row = info.shape[0];
      const auto rb = row_bytes(to_type, static_cast<uint64_t>(n_per_row));
      if (!rb)
        throw Error(t.file->path(), tensor_object(info.name), info.dims_offset() + 4,  // ne0
                    fmt::format("row length {} is not a multiple of the {} block size {}{}",
                                n_per_row, target.name, target.block_size, from_rule));
      const int64_t nrows = static_cast<int64_t>(info.n_elements) / std::max<int64_t>(1, n_per_row);
      RowEncoder e;
      e.type = to_type;
      e.n_per_row = n_per_row;
      e.nrows = nrows;
      e.rows_per_matrix = info.shape[1];
      e.threads = o.threads;
      e.tensor_name = info.name;
      e.source_path = t.file->path();
      e.source_offset = t.data_start();
      e.source_row_bytes = *row_bytes(src_type, static_cast<uint64_t>(n_per_row));
      const TensorRef ref = t;
      e.rows = [ref, n_per_row](int64_t first, int64_t count, std::span<float> out) {
        decode_rows(ref, n_per_row, first, count, out);
      };
      const int64_t n_mat = nrows / std::max<int64_t>(1, info.shape[1]);
      std::string why;
      const ExactPath exact = o.exact ? exact_path(src_type, to_type, why) : ExactPath::kNone;
      if (o.exact && exact == ExactPath::kNone)
        throw Error(t.file->path(), tensor_object(info.name), info.type_offset(),
                    why + from_rule +
                        " (--layers, --role and --match choose the tensors to move; the others "
                        "are copied)");
      e.exact = exact == ExactPath::kRound;
      if (exact == ExactPath::kTranscode) {
        const uint64_t src_rb = e.source_row_bytes, dst_rb = *rb;
        const std::string path = t.file->path(), name = info.name;
        const uint64_t src_block = traits(src_type).type_size;
        const GgmlType to = to_type;
        pt.source = make_row_producer(
            dst_rb, nrows, name,
            [ref = t, src_type, to, src_rb, dst_rb, path, name, src_block, n_per_row](
                int64_t first, int64_t count, uint8_t* out) {
              const uint64_t f = static_cast<uint64_t>(first), c = static_cast<uint64_t>(count);
              const auto src = ref.data().subspan(f * src_rb, c * src_rb);
              if (const auto bad = transcode_blocks(src_type, to, src, {out, c * dst_rb})) {
                const uint64_t block = f * src_rb / src_block + *bad;
                uint16_t d;
                std::memcpy(&d, src.data() + *bad * src_block, 2);
                throw Error(path, tensor_object(name), ref.data_start() + block * src_block,
                            fmt::format("block {} (row {}): its scale {} makes a min of {} times "
                                        "it, which is not a finite f16: {} cannot hold this "
                                        "block exactly",
                                        block, block * 32 / static_cast<uint64_t>(n_per_row),
                                        fp16_to_fp32(d), src_type == GgmlType::Q5_0 ? -16 : -8,
                                        traits(to).name));
              }
              ref.file->source().release(ref.data_start() + f * src_rb, c * src_rb);
            });
      }
      if (uses_importance(to_type) && !o.exact) {
        const bool have = o.imatrix && o.imatrix->find(info.name);
        if (have) {
          // Validate the entry's length now so the error names the tensor before writing.
          (void)o.imatrix->weights(info.name, n_per_row, n_mat, 0);
          const Imatrix* im = o.imatrix;
          const std::string name = info.name;
          e.importance = [im, name, n_per_row, n_mat](int64_t mat) {
            return im->weights(name, n_per_row, n_mat, mat);
          };
          row.importance = ImportanceSource::kImatrix;
        } else if (requires_importance(to_type)) {
          auto cache = std::make_shared<EnergyCache>(t, n_per_row, info.shape[1]);
          e.importance = [cache](int64_t mat) { return cache->get(mat); };
          e.importance_done = [cache](int64_t mat, int64_t rows) { cache->done(mat, rows); };
          row.importance = ImportanceSource::kColumnEnergy;
          add_type(energy_types, to_type);
        }
      }
      row.type_after = target.id;
      row.bytes_after = *rb * static_cast<uint64_t>(nrows);
      row.action =
          (to_type == GgmlType::F32 || to_type == GgmlType::F16 || to_type == GgmlType::BF16)
              ? "decode"
              : "encode";
      // Decoding to f32 is exact (but for f64 sources), and so is what --exact proves; any
      // other target may round, and rounds again what a quantized source had rounded already.
      row.lossy = (to_type != GgmlType::F32 || src_type == GgmlType::F64) && !o.exact;
      row.requantized = row.lossy && traits(src_type).quantized;
      lossy_note |= row.requantized;
      add_type(encoded_types, to_type);
      pt.type_id = target.id;
      pt.bytes = row.bytes_after;
      if (exact != ExactPath::kTranscode) pt.source = make_encoding_producer(std::move(e));
    }
    r.plan.tensors.push_back(std::move(pt));
    r.rows.push_back(std::move(row));
  }
  // A rule that decides nothing is a mistake in the command line (a misspelt name, a role the
  // architecture does not have, a rule hidden behind an earlier one): say which. llama-quantize's
  // two named overrides are given to every model alike (one has no output.weight, another has
  // token_embd decided by --token-embedding-type): a note for them.
  std::vector<std::string> unused_named;
  for (size_t k = 0; k < o.rules.size(); ++k) {
    if (uses[k].decided) continue;
    const TypeRule& rule = o.rules[k];
    std::string why;
    if (uses[k].earlier)
      why = fmt::format(
          "every tensor it matches that can be re-encoded is given its type by an "
          "earlier rule, {} (the first rule that matches decides)",
          uses[k].earlier->describe());
    else if (uses[k].never)
      why = fmt::format(
          "it matches only tensors that are never re-encoded, such as '{}' (1-D "
          "tensors, biases, norms, the router, integer tensors and the small weights "
          "llama-quantize keeps)",
          escape_for_terminal(uses[k].never->name));
    else
      why = fmt::format("no {} {}", o.selector.empty() ? "tensor" : "selected tensor",
                        unmatched(rule, tied));
    std::string message = fmt::format("{} decides no tensor's type: {}", rule.describe(), why);
    if (rule.kind == TypeRule::Kind::kOutput || rule.kind == TypeRule::Kind::kTokenEmbedding)
      unused_named.push_back(std::move(message));
    else
      throw Error(model.path(), {}, std::nullopt, std::move(message));
  }
  // Writing a copy of the input is never what was asked for (e.g. --role norm, or a file
  // already at the type): say so instead.
  if (n_encoded == 0) {
    const auto the = [](size_t n) {
      return n == 1 ? std::string("the selected tensor")
                    : fmt::format("the {} selected tensors", n);
    };
    std::string at;
    if (o.rules.empty())
      at = fmt::format("already {}", traits(*o.type).name);
    else if (n_untyped == n_quantizable)
      at = "given no type: no rule decides one, and there is no --type";
    else if (o.type || n_untyped == 0)
      at = n_quantizable == 1 ? "already at the type asked for, or kept"
                              : "already at the types asked for, or kept";
    else
      at = "already at the types asked for, kept, or given no type";
    const std::string notes =
        unused_named.empty() ? std::string() : fmt::format(" ({})", fmt::join(unused_named, "; "));
    throw Error(
        model.path(), {}, std::nullopt,
        n_quantizable == 0
            ? fmt::format("nothing to re-encode: {} {} never re-encoded (1-D tensors, "
                          "biases, norms, the router, integer tensors and the small weights "
                          "llama-quantize keeps are always copied){}",
                          the(n_selected), n_selected == 1 ? "is" : "are", notes)
            : fmt::format("nothing to re-encode: {} that can be re-encoded {} {}{}",
                          the(n_quantizable), n_quantizable == 1 ? "is" : "are", at, notes));
  }
  for (auto& note : unused_named) r.notes.push_back(std::move(note));
  if (!energy_types.empty())
    r.notes.push_back(
        fmt::format("{} {} an importance matrix and none was given for some tensors: using each "
                    "matrix's column energy (sum of squared weights) instead",
                    type_list(energy_types), energy_types.size() == 1 ? "needs" : "need"));
  if (lossy_note)
    r.notes.push_back("some tensors were already quantized: re-encoding them adds error");
  for (GgmlType t : encoded_types)
    if (is_activation_only(t))
      r.notes.push_back(fmt::format(
          "{} is a type ggml uses only for activations: llama.cpp loads this file but crashes "
          "computing with its {} tensors",
          traits(t).name, traits(t).name));
  // Truthful metadata: the file type of what holds most weights, and the quantization keys.
  set_file_type_keys(r.plan);
  // The quantize.imatrix.* keys say which matrix the file's tensors were encoded with: set only
  // when an encoder of this run used it. Otherwise the input's keys (an earlier step's) stay.
  const bool imatrix_used = std::any_of(r.rows.begin(), r.rows.end(), [](const RequantRow& row) {
    return row.importance == ImportanceSource::kImatrix;
  });
  std::vector<GgmlType> weighted;
  for (GgmlType t : encoded_types)
    if (uses_importance(t)) weighted.push_back(t);
  if (o.imatrix && !imatrix_used)
    r.notes.push_back(fmt::format(
        "the importance matrix was not used ({}): the quantize.imatrix.* keys are left as they "
        "were",
        weighted.size() == encoded_types.size()
            ? std::string("it has no entry for any re-encoded tensor")
        : !weighted.empty()
            ? fmt::format("it has no entry for any tensor re-encoded to {}", type_list(weighted))
            : fmt::format("{} {} no importance weights", type_list(encoded_types),
                          encoded_types.size() == 1 ? "takes" : "take")));
  if (imatrix_used) {
    for (const char* k : {"quantize.imatrix.file", "quantize.imatrix.dataset",
                          "quantize.imatrix.entries_count", "quantize.imatrix.chunks_count"})
      r.plan.metadata.erase(k);  // an earlier step's, which this run's matrix replaces
    r.plan.metadata.set("quantize.imatrix.file", Value::string(o.imatrix->path()));
    if (!o.imatrix->datasets().empty())
      r.plan.metadata.set("quantize.imatrix.dataset", Value::string(o.imatrix->datasets().front()));
    // As llama-quantize records them: its integer overrides are written as u32, and the chunk
    // count only when the matrix gives one (a legacy .dat without its trailer does not).
    r.plan.metadata.set("quantize.imatrix.entries_count",
                        Value::u32(static_cast<uint32_t>(o.imatrix->size())));
    if (o.imatrix->chunk_count() > 0)
      r.plan.metadata.set("quantize.imatrix.chunks_count",
                          Value::u32(static_cast<uint32_t>(o.imatrix->chunk_count())));
  }
  std::vector<const PlanTensor*> ptrs;
  for (const auto& t : r.plan.tensors) ptrs.push_back(&t);
  r.bytes_after = detail::layout_of(r.plan.metadata, ptrs).file_size;
  return r;
}

}  // namespace gguf
