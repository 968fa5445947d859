// Type recipes: a model's per-tensor types as a few PATTERN=TYPE rules that llama-quantize's
// --tensor-type-file reads exactly as gguf-requant does, the compaction that writes them from
// any per-tensor assignment, and the reader of such files.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/format/model.h"
#include "gguf/format/names.h"
#include "gguf/format/select.h"
#include "gguf/format/types.h"
#include "gguf/ops/requant.h"

namespace gguf {

// One tensor of a per-tensor type assignment.
struct RecipeTensor {
  std::string name;
  Role role = Role::kOther;  // rules never mix roles (but for tensors outside any layer)
  // The type a rule must give the tensor; nullopt: no rule may match it (a tensor that is
  // copied, or that something other than the recipe decides).
  std::optional<GgmlType> type;
};

struct RecipeRule {
  // An ECMAScript pattern that reads the same lowercased (llama-quantize lowercases it) and has
  // no whitespace and no '=' (its file format splits on both). regex_search of it finds exactly
  // the tensors in `tensors` among all the names it was made from.
  std::string pattern;
  GgmlType type = GgmlType::F32;
  std::vector<size_t> tensors;  // indices into the assignment it decides, ascending

  // "PATTERN=TYPE", the type in ggml's spelling ("q4_K").
  std::string text() const;
};

// Compacts an assignment into mutually exclusive rules: tensors named blk.N.<kind> are grouped
// by type, role and layer ranges (blk\.(3[7-9]|4[0-2])\.ffn_(gate|up|down)_exps=q4_K), other
// names by type; every rule decides at least one tensor, each typed tensor is matched by exactly
// one rule (so first-match and last-match readers agree) and an untyped one by none. Rules come
// in the order of the first tensor each decides. Throws gguf::Error naming a tensor whose name
// cannot be written as such a pattern.
std::vector<RecipeRule> compact_type_rules(std::span<const RecipeTensor> tensors);

// A model's recipe (gguf-inspect --recipe): a rule for every tensor requant would re-encode
// (is_quantizable), none for the tensors it copies.
struct Recipe {
  std::vector<std::string> files;
  std::vector<RecipeTensor> tensors;  // the model's tensors, in model order
  std::vector<std::vector<int64_t>> shapes;
  std::vector<uint64_t> params, bytes;  // per tensor
  std::vector<RecipeRule> rules;
  size_t copied = 0;  // tensors with no rule (never re-encoded, or not selected)
};

// The recipe of the selected tensors of a model (all when the selector is empty; the others get
// no rule). Throws gguf::Error naming a re-encodable tensor whose type id is not a ggml type a
// rule can name (unknown to this build, or removed).
Recipe extract_recipe(const Model& model, const Selector& selector = {});

// The rules, one "PATTERN=TYPE" per line: what llama-quantize --tensor-type-file reads.
std::string render_recipe_text(const Recipe& r);
// {"files", "rules": [{"pattern", "type", "rule", "tensors": [names], "params", "bytes",
// "bpw"}], "copied": [names]}
std::string render_recipe_json(const Recipe& r);
// "7 rules decide 41 tensors (2.95 bpw); 23 tensors are copied as they are".
std::string recipe_summary(const Recipe& r);

// Reads a --tensor-type-file as llama-quantize does: whitespace-separated PATTERN=TYPE tokens,
// split at the first '=', the pattern lowercased, TYPE a ggml type name in any case; and one
// extension: a token starting with '#' comments out the rest of its line. Usage errors name the
// file, the line and the token.
std::vector<TypeRule> read_tensor_type_file(const std::string& path);
// The same on text already read; `path` names it in messages.
std::vector<TypeRule> parse_tensor_type_file(std::string_view text, const std::string& path);

// --tensor-type values and --tensor-type-file paths as requant rules in command-line order:
// `order` lists "tensor-type" and "tensor-type-file" as the options were given (the rules of a
// file join the list where the file option stands).
std::vector<TypeRule> tensor_type_rules(const std::vector<std::string>& tensor_types,
                                        const std::vector<std::string>& files,
                                        const std::vector<std::string>& order);

// A recipe as requant rules (--recipe-from), one kRecipe rule per recipe rule; `path` names the
// model it is from.
std::vector<TypeRule> recipe_type_rules(const Recipe& r, const std::string& path);

}  // namespace gguf
