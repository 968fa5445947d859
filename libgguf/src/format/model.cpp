// Opening split sets as one model, with the split.* keys checked across shards.
#include "gguf/format/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <unordered_map>

#include "gguf/base/escape.h"
#include "io/output_file.h"

namespace gguf {

std::optional<SplitName> parse_split_name(const std::string& path) {
  static const std::regex re(R"((.*)-([0-9]{5})-of-([0-9]{5})\.gguf)");
  std::smatch m;
  if (!std::regex_match(path, m, re)) return std::nullopt;
  SplitName s{m[1].str(), std::stoi(m[2].str()), std::stoi(m[3].str())};
  if (s.count < 1 || s.index < 1 || s.index > s.count) return std::nullopt;
  return s;
}

std::string split_path(const std::string& prefix, int index, int count) {
  return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, index, count);
}

namespace {

// A split key's value and the byte its value is at (nullopt when the key is absent).
struct SplitKey {
  uint64_t value;
  uint64_t at;
};

std::optional<SplitKey> split_key(const GgufFile& f, const char* key, ValueType want) {
  const auto& entries = f.metadata().entries();
  const auto kv =
      std::find_if(entries.begin(), entries.end(), [&](const KeyValue& e) { return e.key == key; });
  if (kv == entries.end()) return std::nullopt;
  const Value* v = &kv->value;
  const uint64_t at = kv->value_offset();
  if (v->type() != want || !v->as_uint()) {
    // A negative value of the right type is named by its value, not by its type.
    const bool typed = v->type() == want;
    const std::string found = typed ? fmt::format("{}", v->as_int().value_or(0))
                                    : std::string(value_type_name(v->type()));
    throw Error(
        f.path(), key_object(key), typed ? at : kv->type_offset(),
        fmt::format("{} must be a non-negative {}, found {}", key, value_type_name(want), found));
  }
  return SplitKey{*v->as_uint(), at};
}

// A file that an interrupted --force replacement set aside for path (the writer's
// hidden_name_pattern(path, "old")), if there is one: for the message about a missing shard.
std::string set_aside_file(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path pattern(detail::hidden_name_pattern(path, "old"));
  const std::string name_pattern = pattern.filename().string();
  const std::string_view prefix(name_pattern.data(), name_pattern.size() - 6);  // no XXXXXX
  std::error_code ec;
  const fs::path dir = pattern.parent_path().empty() ? fs::path(".") : pattern.parent_path();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() == name_pattern.size() && name.starts_with(prefix))
      return (pattern.parent_path() / name).string();
  }
  return {};
}

}  // namespace

Model Model::open(const std::string& path) {
  const auto split = parse_split_name(path);
  if (!split || split->count == 1) return from_files({GgufFile::open(path)});
  // A file merely named like a shard, without split keys, is a whole model (ggml loads it).
  auto named = GgufFile::open(path);
  const Value* declared = named->metadata().find("split.count");
  if (!declared && !named->metadata().find("split.no")) return from_files({std::move(named)});
  // So is one whose split.count says the set is this one file, whatever its name says
  // (llama.cpp goes by the key); from_files checks the keys' types.
  if (declared && declared->as_uint() == uint64_t{1}) return from_files({std::move(named)});
  std::vector<std::shared_ptr<const GgufFile>> shards;
  reserve_open_files(static_cast<uint64_t>(split->count));  // a descriptor each
  for (int i = 1; i <= split->count; ++i) {
    const std::string p = split_path(split->prefix, i, split->count);
    if (p == path) {
      shards.push_back(named);
      continue;
    }
    if (!std::filesystem::exists(p)) {
      std::string what = fmt::format("shard {} of {} of the split set is missing", i, split->count);
      if (const std::string aside = set_aside_file(p); !aside.empty())
        what += fmt::format(
            "; '{}' beside it is a shard that an interrupted --force replacement set aside",
            escape_for_terminal(aside));
      throw Error(p, {}, std::nullopt, what);
    }
    shards.push_back(GgufFile::open(p));
  }
  return from_files(std::move(shards));
}

Model Model::from_files(std::vector<std::shared_ptr<const GgufFile>> shards) {
  if (shards.empty()) throw Error("a model needs at least one file");
  Model m;
  m.shards_ = std::move(shards);
  const size_t n = m.shards_.size();
  uint64_t total = 0;
  std::optional<SplitKey> declared_total;  // the first shard's split.tensors.count
  for (size_t i = 0; i < n; ++i) {
    const GgufFile& f = *m.shards_[i];
    const auto count = split_key(f, "split.count", ValueType::kU16);
    const auto no = split_key(f, "split.no", ValueType::kU16);
    const auto tensors = split_key(f, "split.tensors.count", ValueType::kI32);
    if (n == 1) {
      if (count && count->value > 1)
        throw Error(f.path(), key_object("split.count"), count->at,
                    fmt::format("file is shard {} of a split set of {}; open the set by its "
                                "first shard's name (<prefix>-00001-of-{:05d}.gguf)",
                                no ? no->value + 1 : 1, count->value, count->value));
      continue;
    }
    const auto at = [](const std::optional<SplitKey>& k) {
      return k ? std::optional<uint64_t>(k->at) : std::nullopt;
    };
    const auto text = [](const std::optional<SplitKey>& k) {
      return k ? fmt::format("{}", k->value) : std::string("missing");
    };
    if (!count || count->value != n)
      throw Error(f.path(), key_object("split.count"), at(count),
                  fmt::format("split.count is {}, expected {}", text(count), n));
    if (!no || no->value != i)
      throw Error(f.path(), key_object("split.no"), at(no),
                  fmt::format("split.no is {}, expected {}", text(no), i));
    if (i == 0) {
      declared_total = tensors;
    } else if (tensors && declared_total && tensors->value != declared_total->value) {
      // gguf-split writes the same total into every shard: these come from different sets.
      throw Error(f.path(), key_object("split.tensors.count"), tensors->at,
                  fmt::format("split.tensors.count is {}, but the first shard ('{}') says {}",
                              tensors->value, escape_for_terminal(m.shards_[0]->path()),
                              declared_total->value));
    }
    total += f.tensors().size();
  }
  if (n > 1 && declared_total && declared_total->value != total)
    throw Error(m.path(), key_object("split.tensors.count"), declared_total->at,
                fmt::format("split.tensors.count is {}, but the shards hold {} tensors",
                            declared_total->value, total));
  uint64_t total_elements = 0;  // each shard's sum fits int64 (the reader); so must the set's
  for (size_t s = 0; s < n; ++s) {
    const GgufFile& f = *m.shards_[s];
    for (const auto& t : f.tensors()) {
      if (t.n_elements > static_cast<uint64_t>(INT64_MAX) - total_elements)
        throw Error(f.path(), tensor_object(t.name), t.dims_offset(),
                    fmt::format("the shards up to this tensor hold more than {} elements in total",
                                INT64_MAX));
      total_elements += t.n_elements;
      const auto [it, fresh] = m.index_.emplace(t.name, m.tensors_.size());
      if (!fresh) {
        const TensorRef& prev = m.tensors_[it->second];
        throw Error(f.path(), tensor_object(t.name), t.info_offset,
                    fmt::format("tensor also defined in shard {} ('{}')", prev.shard + 1,
                                escape_for_terminal(prev.file->path())));
      }
      m.tensors_.push_back({&f, s, &t});
    }
  }
  return m;
}

std::vector<std::string> Model::paths() const {
  std::vector<std::string> out;
  for (const auto& s : shards_) out.push_back(s->path());
  return out;
}

const TensorRef* Model::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::string Model::architecture() const {
  return metadata().get_string("general.architecture").value_or("");
}

uint64_t Model::total_bytes() const {
  uint64_t s = 0;
  for (const auto& f : shards_) s += f->file_size();
  return s;
}

std::vector<size_t> select_in(const Model& model, const Selector& selector) {
  std::vector<size_t> all(model.tensors().size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  if (selector.empty()) return all;
  std::vector<std::string> names;
  std::vector<int> dims;
  for (const auto& t : model.tensors()) {
    names.push_back(t.name());
    dims.push_back(ggml_dims(t.info->shape));
  }
  return select_tensors(selector, names, dims, model.architecture(), model.path());
}

std::vector<uint64_t> shard_tensor_counts(const Model& model) {
  std::vector<uint64_t> counts(model.shards().size(), 0);
  for (const TensorRef& t : model.tensors()) ++counts[t.shard];
  return counts;
}

}  // namespace gguf
