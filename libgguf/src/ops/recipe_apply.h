// What requant needs from recipes beyond the rules themselves: the note about names a
// --recipe-from model has and the input lacks, and the provenance keys of recipe rules.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gguf/format/metadata.h"
#include "gguf/format/model.h"
#include "gguf/ops/requant.h"

namespace gguf {

// "N tensors that 'donor.gguf''s recipe decides are not in the input: 'a', 'b', ..." when the
// kRecipe rules name tensors `model` does not have; nullopt otherwise.
std::optional<std::string> recipe_names_missing(const Model& model,
                                                const std::vector<TypeRule>& rules);

// Removes an earlier step's quantize.tensor_type_file and quantize.recipe_from, then records
// this run's: the --tensor-type-file paths in order (array of strings) and the --recipe-from
// model (string), when rules came from them.
void set_recipe_keys(Metadata& m, const std::vector<TypeRule>& rules);

}  // namespace gguf
