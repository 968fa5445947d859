// Hugging Face checkpoints: the shard index, config.json, and the shards opened as one model
// (every tensor the index lists must be in its shard, and every shard's tensor in the index).
#include "gguf/inputs/hf_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "base/json_checked.h"
#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/format/file.h"
#include "gguf/io/source.h"

namespace gguf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::string_view kIndexName = "model.safetensors.index.json";

std::string q_name(std::string_view s) {
  return fmt::format("'{}'", escape_for_terminal(s.substr(0, 200)));
}

// A small JSON file read whole: index and config files are kilobytes (a 1 GiB cap keeps a wrong
// argument from exhausting memory).
std::string read_text(const std::string& path) {
  const auto source = open_file_source(path);
  if (source->size() > (uint64_t{1} << 30))
    throw Error(path, {}, std::nullopt,
                fmt::format("{} bytes: too large for a JSON index or config", source->size()));
  const auto b = source->bytes(0, source->size());
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

std::optional<uint64_t> config_uint(const json& doc, const std::string& path,
                                    std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    const auto it = doc.find(k);
    if (it == doc.end() || it->is_null()) continue;
    if (!it->is_number_unsigned() || it->get<uint64_t>() == 0 ||
        it->get<uint64_t>() > (uint64_t{1} << 40))
      throw Error(path, key_object(k), std::nullopt,
                  fmt::format("must be a positive integer, found {}", it->dump().substr(0, 100)));
    return it->get<uint64_t>();
  }
  return std::nullopt;
}

}  // namespace

SafetensorsIndex parse_safetensors_index(std::string_view text, const std::string& path) {
  const json doc = detail::parse_json_checked(text, path, {}, 0, 16, "index");
  if (!doc.is_object()) throw Error(path, {}, 0, "a safetensors index is a JSON object");
  const auto map = doc.find("weight_map");
  if (map == doc.end() || !map->is_object())
    throw Error(path, {}, std::nullopt,
                "no \"weight_map\" object (tensor name -> shard file): not a safetensors index");
  std::set<std::string> names;
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it->is_string())
      throw Error(path, tensor_object(it.key()), std::nullopt,
                  fmt::format("its shard must be a file name (a string), found {}",
                              it->dump().substr(0, 100)));
    const std::string& shard = it->get_ref<const std::string&>();
    // Shards live beside the index: a path could reach any file on the machine.
    if (shard.empty() || shard == "." || shard == ".." ||
        shard.find_first_of(std::string_view("/\\\0", 3)) != std::string::npos)
      throw Error(path, tensor_object(it.key()), std::nullopt,
                  fmt::format("shard {} is not a file name beside the index", q_name(shard)));
    names.insert(shard);
  }
  if (names.empty()) throw Error(path, {}, std::nullopt, "the weight_map lists no tensor");
  SafetensorsIndex index;
  index.shards.assign(names.begin(), names.end());
  for (auto it = map->begin(); it != map->end(); ++it) {
    const auto at = std::lower_bound(index.shards.begin(), index.shards.end(),
                                     it->get_ref<const std::string&>());
    index.weight_map.emplace_back(it.key(), static_cast<size_t>(at - index.shards.begin()));
  }
  return index;
}

HfConfig parse_hf_config(std::string_view text, const std::string& path) {
  const json doc = detail::parse_json_checked(text, path, {}, 0, 32, "config");
  if (!doc.is_object()) throw Error(path, {}, 0, "config.json is not a JSON object");
  HfConfig c;
  c.path = path;
  // Multimodal configs keep the language model's own in text_config (as the converter reads it).
  const json* arch_doc = &doc;
  if (const auto tc = doc.find("text_config");
      tc != doc.end() && tc->is_object() && tc->contains("architectures"))
    arch_doc = &*tc;
  if (const auto a = arch_doc->find("architectures"); a != arch_doc->end()) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string())
      throw Error(path, key_object("architectures"), std::nullopt,
                  "must be an array of class names (strings)");
    c.hf_class = (*a)[0].get<std::string>();
  }
  if (const auto m = doc.find("model_type"); m != doc.end()) {
    if (!m->is_string())
      throw Error(path, key_object("model_type"), std::nullopt, "must be a string");
    c.model_type = m->get<std::string>();
  }
  c.n_head = config_uint(doc, path, {"num_attention_heads", "n_head", "n_heads"});
  c.n_head_kv = config_uint(doc, path, {"num_key_value_heads", "n_kv_heads"});
  c.head_dim = config_uint(doc, path, {"head_dim"});
  c.n_layers = config_uint(doc, path, {"num_hidden_layers", "n_layers", "n_layer", "num_layers"});
  c.n_experts = config_uint(doc, path, {"num_local_experts", "num_experts", "n_routed_experts"});
  c.kv_lora_rank = config_uint(doc, path, {"kv_lora_rank"});
  c.qk_nope_head_dim = config_uint(doc, path, {"qk_nope_head_dim"});
  c.v_head_dim = config_uint(doc, path, {"v_head_dim"});
  return c;
}

HfCheckpoint HfCheckpoint::open(const std::string& input, const std::string& config_path) {
  HfCheckpoint cp;
  cp.path_ = input;
  std::error_code ec;
  fs::path dir;
  std::vector<std::string> files;  // shard paths
  std::optional<SafetensorsIndex> index;
  const auto load_index = [&](const std::string& p) {
    cp.index_path_ = p;
    index = parse_safetensors_index(read_text(p), p);
    for (const auto& s : index->shards) files.push_back((dir / s).string());
  };
  if (fs::is_directory(input, ec)) {
    dir = input;
    if (fs::exists(dir / kIndexName, ec)) {
      load_index((dir / kIndexName).string());
    } else {
      for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".safetensors" && !fs::is_directory(e.path(), ec))
          files.push_back(e.path().string());
      std::sort(files.begin(), files.end());
      if (files.empty())
        throw Error(input, {}, std::nullopt,
                    fmt::format("the folder holds no {} and no *.safetensors file", kIndexName));
    }
  } else {
    dir = fs::path(input).parent_path();
    if (input.ends_with(".json")) {
      load_index(input);
    } else {
      // A shard of a set: the whole set, when the index beside it lists it.
      const fs::path beside = dir / kIndexName;
      if (fs::exists(beside, ec)) {
        const std::string p = beside.string();
        SafetensorsIndex i = parse_safetensors_index(read_text(p), p);
        const std::string me = fs::path(input).filename().string();
        if (std::binary_search(i.shards.begin(), i.shards.end(), me)) load_index(p);
      }
      if (files.empty()) files.push_back(input);
    }
  }
  if (index)
    for (size_t i = 0; i < files.size(); ++i)
      if (!fs::exists(files[i], ec))
        throw Error(cp.index_path_, {}, std::nullopt,
                    fmt::format("shard {} is listed in the index but absent ({}: {})",
                                q_name(index->shards[i]), escape_for_terminal(files[i]),
                                std::strerror(ENOENT)));
  reserve_open_files(files.size());
  for (const auto& f : files) cp.shards_.push_back(SafetensorsFile::open(f));

  if (index) {
    for (const auto& [name, shard] : index->weight_map)
      if (!cp.shards_[shard].find(name))
        throw Error(cp.index_path_, tensor_object(name), std::nullopt,
                    fmt::format("the index places it in shard {}, which does not hold it",
                                q_name(index->shards[shard])));
    std::map<std::string_view, size_t> where;
    for (const auto& [name, shard] : index->weight_map) where.emplace(name, shard);
    for (size_t s = 0; s < cp.shards_.size(); ++s)
      for (const auto& t : cp.shards_[s].tensors())
        if (const auto it = where.find(t.name); it == where.end() || it->second != s)
          throw Error(
              cp.shards_[s].path(), tensor_object(t.name), cp.shards_[s].entry_offset(t.name),
              fmt::format("not listed for this shard in the index {}", q_name(cp.index_path_)));
  } else if (cp.shards_.size() > 1) {
    std::map<std::string_view, size_t> seen;
    for (size_t s = 0; s < cp.shards_.size(); ++s)
      for (const auto& t : cp.shards_[s].tensors())
        if (const auto [it, fresh] = seen.emplace(t.name, s); !fresh)
          throw Error(cp.shards_[s].path(), tensor_object(t.name),
                      cp.shards_[s].entry_offset(t.name),
                      fmt::format("also in {}: a tensor name must be unique in a checkpoint",
                                  q_name(cp.shards_[it->second].path())));
  }

  std::string cfg = config_path;
  if (cfg.empty() && fs::exists(dir / "config.json", ec)) cfg = (dir / "config.json").string();
  if (!cfg.empty()) cp.config_ = parse_hf_config(read_text(cfg), cfg);
  return cp;
}

}  // namespace gguf
