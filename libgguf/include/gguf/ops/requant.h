// gguf-requant as a function: a plan that re-encodes the quantizable tensors of a model, each to
// the ggml type its rules give it (streamed, chunked, multi-threaded), and copies every other
// tensor byte for byte.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gguf/format/model.h"
#include "gguf/format/names.h"
#include "gguf/format/select.h"
#include "gguf/format/types.h"
#include "gguf/inputs/imatrix.h"
#include "gguf/write/plan.h"
#include "gguf/write/plan_report.h"
#include "gguf/write/writer.h"

namespace gguf {

// A per-tensor type, as llama-quantize's --tensor-type, --output-tensor-type and
// --token-embedding-type give them: the tensors it matches get `type`.
struct TypeRule {
  enum class Kind {
    kPattern,         // a regex searched anywhere in the name (--tensor-type)
    kRoles,           // tensors of these roles (--role-type)
    kOutput,          // output.weight; with tied embeddings (no output.weight) the token
                      // embedding tables instead (--output-tensor-type, --leave-output-tensor)
    kTokenEmbedding,  // token_embd.weight and per_layer_token_embd.weight
    kRecipe,          // the tensors one rule of another model's recipe decides there, by name
                      // (--recipe-from; tried last)
  };
  Kind kind = Kind::kPattern;
  std::string option;   // the option it came from, e.g. "--tensor-type", for messages
  std::string value;    // what was given, e.g. "ffn_down_exps=q2_K"; empty for a flag
  std::string pattern;  // kPattern
  std::optional<std::regex> regex;
  std::vector<Role> roles;       // kRoles
  std::optional<GgmlType> type;  // nullopt: "keep", copy the tensor as it is
  // kOutput: also the token embedding of a model without output.weight (false for
  // --leave-output-tensor, which is about output.weight alone).
  bool tied = true;
  // The file the rule was read from: a --tensor-type-file, or --recipe-from's model.
  std::string file;
  // kRecipe: the names the rule decides in that model, with their shapes there (a tensor takes
  // the type only when its shape is the same).
  std::shared_ptr<const std::unordered_map<std::string, std::vector<int64_t>>> names;

  // "--tensor-type 'ffn_down_exps=q2_K'", for messages (the value as typed, through
  // terminal_safe).
  std::string describe() const;
};

// "PATTERN=TYPE" (split at the last '='; TYPE any case, or "keep"): the tensors whose name
// contains a match of PATTERN. Usage error on bad syntax, an invalid regex, an unknown type or
// one without an encoder.
TypeRule parse_tensor_type_rule(std::string_view value);
// "ROLE[,ROLE...]=TYPE" (roles as --role takes them, "routed" included): tensors of these roles.
TypeRule parse_role_type_rule(std::string_view value);
// --output-tensor-type TYPE (kind kOutput) or --token-embedding-type TYPE (kTokenEmbedding);
// `option` names it in messages.
TypeRule named_type_rule(TypeRule::Kind kind, std::string_view option, std::string_view type);
// --leave-output-tensor: output.weight kept as it is (never a tied model's token embedding).
TypeRule leave_output_tensor_rule();

struct RequantOptions {
  // The type of every selected quantizable tensor that no rule decides; nullopt: such tensors
  // are copied as they are (then `rules` must not be empty).
  std::optional<GgmlType> type;
  Selector selector;                 // restricts which tensors are re-encoded (others copied)
  const Imatrix* imatrix = nullptr;  // importance weights; nullptr = none
  unsigned threads = 1;
  // Re-encode only along exact paths (gguf/exact.h); a tensor that has none is an error.
  bool exact = false;
  // Per-tensor types. On each selected quantizable tensor they are tried in llama-quantize's
  // order, each kind in the order given: kTokenEmbedding (except that a kPattern rule matching
  // per_layer_token_embd.weight takes that one), kOutput on output.weight, kPattern, kOutput on
  // tied token embeddings, kRoles, kRecipe. The first that matches decides the tensor's type,
  // ahead of `type`. A kPattern or kRoles rule that decides no tensor is an error; for kOutput,
  // kTokenEmbedding and kRecipe it is a note (part of the error when nothing is left to
  // re-encode). A kRecipe rule deciding a tensor whose shape differs from the recipe model's is
  // an error naming both; the names of its rules the model lacks are a note. The output records
  // the files of kPattern rules read from a file (quantize.tensor_type_file, an array of
  // strings) and the recipe model (quantize.recipe_from); both keys of an earlier step go.
  std::vector<TypeRule> rules = {};
  // --align: the output's general.alignment (check_align_option); else the input's stays
  // (raised to 32).
  std::optional<uint32_t> alignment = {};
};

// How a tensor's importance weights were obtained.
enum class ImportanceSource { kNone, kImatrix, kColumnEnergy };

// A row of the plan report: kCopy, kEncode or kDecode (to f32, f16, bf16).
struct RequantRow : PlanRow {
  bool lossy = false;        // values may change: any target but f32, unless --exact proves them
  bool requantized = false;  // lossy, and the source was already quantized (error adds up)
  ImportanceSource importance = ImportanceSource::kNone;
  std::string rule;  // the rule that gave the tensor its type (TypeRule::describe()) or empty
};

struct RequantResult {
  Plan plan;
  std::vector<RequantRow> rows;
  std::vector<std::string> inputs;  // every file read, so the output never replaces one
  uint64_t bytes_before = 0, bytes_after = 0;
  std::vector<std::string> notes;  // said once each (fallbacks, lossy re-encodes)
  bool exact = false;              // planned with RequantOptions::exact
};

// True when requant may re-encode this tensor, by llama-quantize's rule: a name ending in
// "weight", two or more dimensions as ggml counts them (trailing 1s do not count), not a norm,
// not the MoE router (ffn_gate_inp), not one of the small weights llama.cpp never quantizes
// (ssm_conv1d, time_mix_*, altup, ...), not an integer type (i8, i16, i32, i64); requant also
// needs it selected.
bool is_quantizable(const TensorInfo& t, std::string_view arch);

// Builds the plan. Throws gguf::Error for a tensor whose row length does not fit its target's
// block size (naming it; there is no silent fallback type), a source type that cannot be
// decoded, a rule that decides no tensor, or nothing to re-encode; a usage error for a target
// type without an encoder.
RequantResult requant(const Model& model, const RequantOptions& options);

struct ExactProof;
// `exact`: the proof of a --exact run (null otherwise, or when not written or not verified).
std::string render_requant_text(const RequantResult& r, const WriteResult* written,
                                const ExactProof* exact = nullptr);
std::string render_requant_json(const RequantResult& r, const WriteResult* written,
                                const ExactProof* exact = nullptr);

}  // namespace gguf
