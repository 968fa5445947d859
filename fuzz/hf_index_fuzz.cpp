// libFuzzer target over what a Hugging Face checkpoint import reads as JSON: the shard index
// (model.safetensors.index.json) and config.json, and the name map over every tensor name the
// index lists. Any input may make the parsers throw gguf::Error; nothing else may escape,
// crash or read out of bounds, and the index's invariants must hold when it is accepted.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gguf/base/error.h"
#include "gguf/inputs/hf_checkpoint.h"
#include "gguf/inputs/hf_names.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  volatile size_t sink = 0;
  try {
    const gguf::SafetensorsIndex index = gguf::parse_safetensors_index(text, "fuzz.json");
    if (index.shards.empty()) __builtin_trap();
    for (size_t i = 1; i < index.shards.size(); ++i)
      if (!(index.shards[i - 1] < index.shards[i])) __builtin_trap();  // sorted, unique
    for (const auto& s : index.shards)
      if (s.empty() || s.find('/') != std::string::npos || s == "..") __builtin_trap();
    for (const auto& [name, shard] : index.weight_map) {
      if (shard >= index.shards.size()) __builtin_trap();
      for (const char* arch : {"llama", "qwen2moe", "qwen3moe", "deepseek2"})
        if (const auto m = gguf::map_hf_name(arch, name)) sink = sink + m->gguf.size();
      sink = sink + gguf::hf_name_dropped(name);
    }
  } catch (const gguf::Error& e) {
    sink = sink + e.message().size();
  }
  try {
    const gguf::HfConfig c = gguf::parse_hf_config(text, "config.json");
    sink = sink + c.hf_class.size() + c.model_type.size() + c.n_head.value_or(0);
    if (const auto a = gguf::hf_architecture_of_class(c.hf_class)) sink = sink + a->size();
  } catch (const gguf::Error& e) {
    sink = sink + e.message().size();
  }
  return 0;
}
