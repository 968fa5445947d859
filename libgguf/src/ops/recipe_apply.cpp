// Recipes as requant rules: --recipe-from's model's recipe, --tensor-type and
// --tensor-type-file in command-line order, and the provenance keys they leave in the output.
#include "ops/recipe_apply.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/ops/recipe.h"

namespace gguf {

std::vector<TypeRule> recipe_type_rules(const Recipe& r, const std::string& path) {
  std::vector<TypeRule> out;
  for (const auto& rule : r.rules) {
    auto names = std::make_shared<std::unordered_map<std::string, std::vector<int64_t>>>();
    for (size_t i : rule.tensors) names->emplace(r.tensors[i].name, r.shapes[i]);
    TypeRule t;
    t.kind = TypeRule::Kind::kRecipe;
    t.option = "--recipe-from";
    t.value = rule.text();
    t.pattern = rule.pattern;
    t.type = rule.type;
    t.file = path;
    t.names = std::move(names);
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<TypeRule> tensor_type_rules(const std::vector<std::string>& tensor_types,
                                        const std::vector<std::string>& files,
                                        const std::vector<std::string>& order) {
  std::vector<TypeRule> out;
  size_t next_type = 0, next_file = 0;
  const auto add_type = [&] { out.push_back(parse_tensor_type_rule(tensor_types[next_type++])); };
  const auto add_file = [&] {
    const std::string& path = files[next_file++];
    for (auto& r : read_tensor_type_file(path)) {
      r.file = path;
      out.push_back(std::move(r));
    }
  };
  for (const auto& o : order) {
    if (o == "tensor-type" && next_type < tensor_types.size()) add_type();
    if (o == "tensor-type-file" && next_file < files.size()) add_file();
  }
  // Whatever the order did not place (it should place all) keeps its option's order.
  while (next_type < tensor_types.size()) add_type();
  while (next_file < files.size()) add_file();
  return out;
}

std::optional<std::string> recipe_names_missing(const Model& model,
                                                const std::vector<TypeRule>& rules) {
  std::vector<std::string> missing;
  std::string file;
  for (const auto& r : rules) {
    if (r.kind != TypeRule::Kind::kRecipe || !r.names) continue;
    file = r.file;
    for (const auto& [name, shape] : *r.names)
      if (!model.find(name)) missing.push_back(name);
  }
  if (missing.empty()) return std::nullopt;
  std::sort(missing.begin(), missing.end());
  constexpr size_t kListed = 4;
  std::string list;
  for (size_t i = 0; i < missing.size() && i < kListed; ++i)
    list += fmt::format("{}'{}'", i ? ", " : "", escape_for_terminal(missing[i]));
  if (missing.size() > kListed) list += ", ...";
  return fmt::format("{} tensor{} that the recipe of '{}' decides {} not in the input: {}",
                     missing.size(), missing.size() == 1 ? "" : "s", escape_for_terminal(file),
                     missing.size() == 1 ? "is" : "are", list);
}

void set_recipe_keys(Metadata& m, const std::vector<TypeRule>& rules) {
  m.erase("quantize.tensor_type_file");
  m.erase("quantize.recipe_from");
  std::vector<std::string> files;
  std::string recipe_from;
  for (const auto& r : rules) {
    if (r.kind == TypeRule::Kind::kRecipe) recipe_from = r.file;
    if (r.kind == TypeRule::Kind::kPattern && !r.file.empty() &&
        std::find(files.begin(), files.end(), r.file) == files.end())
      files.push_back(r.file);
  }
  if (!files.empty()) m.set("quantize.tensor_type_file", Value::string_array(files));
  if (!recipe_from.empty()) m.set("quantize.recipe_from", Value::string(recipe_from));
}

}  // namespace gguf
