// libFuzzer target over type recipes, the files people download and hand to gguf-requant
// --tensor-type-file (and llama-quantize): the reader (tokens, '#' comments, lowercased patterns
// compiled as regexes, type names) and the rules searched in tensor names; then the compaction
// gguf-inspect --recipe and --plan-out write, on an assignment drawn from the same bytes (one
// tensor name a line): the rules it writes must read back and decide exactly the tensors they
// were made for. Any input may make the reader or the compaction throw gguf::Error; nothing
// else may escape, crash or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/base/error.h"
#include "gguf/format/names.h"
#include "gguf/format/select.h"
#include "gguf/format/types.h"
#include "gguf/ops/recipe.h"

namespace {

const char* const kNames[] = {
    "token_embd.weight",           "blk.0.attn_q.weight",       "blk.3.ffn_gate_exps.weight",
    "blk.42.ffn_down_exps.weight", "blk.7.ffn_up_shexp.weight", "output.weight",
    "blk.12.ffn_gate_inp.weight",  "BLK.1.Attn_K.weight",       "a\xff\x01 b=c#d"};

// Up to 32 distinct non-empty lines of the input, each with a type (or none) drawn from its
// bytes.
std::vector<gguf::RecipeTensor> assignment(std::string_view text) {
  std::vector<gguf::RecipeTensor> out;
  std::set<std::string_view> seen;
  while (!text.empty() && out.size() < 32) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.empty() || line.size() > 256 || !seen.insert(line).second) continue;
    gguf::RecipeTensor t;
    t.name = std::string(line);
    t.role = gguf::classify_tensor(line).role;
    const unsigned pick = static_cast<unsigned char>(line.back()) % 4;
    if (pick != 3)
      t.type = pick == 0   ? gguf::GgmlType::Q2_K
               : pick == 1 ? gguf::GgmlType::Q4_K
                           : gguf::GgmlType::Q8_0;
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  volatile size_t sink = 0;
  try {
    for (const gguf::TypeRule& r : gguf::parse_tensor_type_file(text, "fuzz.txt")) {
      if (!r.regex || !r.type) __builtin_trap();
      for (const char* name : kNames)
        sink = sink + gguf::regex_found(name, *r.regex, r.pattern, r.option, true);
    }
  } catch (const gguf::Error& e) {
    sink = sink + e.message().size();
  }

  const std::vector<gguf::RecipeTensor> tensors = assignment(text);
  std::vector<gguf::RecipeRule> rules;
  try {
    rules = gguf::compact_type_rules(tensors);
  } catch (const gguf::Error& e) {  // a name no pattern can be written for
    sink = sink + e.message().size();
    return 0;
  }
  std::string recipe;
  for (const auto& r : rules) recipe += r.text() + "\n";
  // What the compaction writes must read back (an exception here escapes: a finding).
  const std::vector<gguf::TypeRule> back = gguf::parse_tensor_type_file(recipe, "compact.txt");
  if (back.size() != rules.size()) __builtin_trap();
  for (size_t i = 0; i < tensors.size(); ++i) {
    size_t hits = 0;
    for (size_t k = 0; k < back.size(); ++k) {
      if (!std::regex_search(tensors[i].name, *back[k].regex)) continue;
      ++hits;
      if (back[k].type != tensors[i].type) __builtin_trap();  // the wrong rule decides it
    }
    if (hits != (tensors[i].type ? 1u : 0u)) __builtin_trap();  // exactly one rule, or none
  }
  return 0;
}
