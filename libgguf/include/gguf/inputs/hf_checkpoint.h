// A Hugging Face checkpoint as one model: its safetensors shards (from
// model.safetensors.index.json, from a folder, or one file) and its config.json. Each shard is
// a mapped, validated SafetensorsFile; nothing is read into memory beyond the headers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gguf/inputs/safetensors.h"

namespace gguf {

// model.safetensors.index.json: {"metadata": {...}, "weight_map": {"<tensor>": "<shard>", ...}}.
// Only weight_map is read (as llama.cpp's converter does); a shard must be a file name beside
// the index (no directory part). Throws gguf::Error naming `path` for anything else.
struct SafetensorsIndex {
  std::vector<std::string> shards;                         // sorted, unique
  std::vector<std::pair<std::string, size_t>> weight_map;  // tensor -> index into shards
};
SafetensorsIndex parse_safetensors_index(std::string_view text, const std::string& path);

// What the import needs of config.json. Integers absent (or null) in the file stay nullopt.
struct HfConfig {
  std::string path;
  std::string hf_class;    // "architectures"[0] (text_config's when it has one), or ""
  std::string model_type;  // or ""
  std::optional<uint64_t> n_head, n_head_kv, head_dim, n_layers, n_experts;
  std::optional<uint64_t> kv_lora_rank, qk_nope_head_dim, v_head_dim;
};
HfConfig parse_hf_config(std::string_view text, const std::string& path);

class HfCheckpoint {
 public:
  // `input`: a folder (its model.safetensors.index.json, else every *.safetensors in it), an
  // index JSON, or one safetensors file (the whole set when an index beside it lists it).
  // config.json comes from `config_path`, else from beside the input, else there is none.
  static HfCheckpoint open(const std::string& input, const std::string& config_path = {});

  const std::string& path() const { return path_; }              // as given
  const std::string& index_path() const { return index_path_; }  // empty: no index
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  const std::optional<HfConfig>& config() const { return config_; }

 private:
  std::string path_, index_path_;
  std::vector<SafetensorsFile> shards_;
  std::optional<HfConfig> config_;
};

}  // namespace gguf
