// A model: one GGUF file, or a split set (<base>-00001-of-00004.gguf ...) opened as one.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "gguf/format/file.h"
#include "gguf/format/select.h"

namespace gguf {

struct TensorRef {
  const GgufFile* file;
  size_t shard;  // index into Model::shards()
  const TensorInfo* info;

  const std::string& name() const { return info->name; }
  uint64_t data_start() const { return file->data_start(*info); }
  std::span<const uint8_t> data() const { return file->tensor_data(*info); }
};

// Parsed pieces of a split-set file name.
struct SplitName {
  std::string prefix;  // everything before "-00001-of-00004.gguf"
  int index = 0;       // 1-based, as in the name
  int count = 0;
};
std::optional<SplitName> parse_split_name(const std::string& path);
std::string split_path(const std::string& prefix, int index, int count);

class Model {
 public:
  // Opens path; a split-set name opens every shard (a missing shard is an error naming it).
  static Model open(const std::string& path);
  // Builds a model from already-parsed files (first = shard 0); validates split keys.
  static Model from_files(std::vector<std::shared_ptr<const GgufFile>> shards);

  const std::vector<std::shared_ptr<const GgufFile>>& shards() const { return shards_; }
  const GgufFile& first() const { return *shards_.front(); }
  const Metadata& metadata() const { return first().metadata(); }
  const std::string& path() const { return first().path(); }
  std::vector<std::string> paths() const;
  const std::vector<TensorRef>& tensors() const { return tensors_; }
  const TensorRef* find(std::string_view name) const;
  std::string architecture() const;  // general.architecture or ""
  uint64_t total_bytes() const;      // sum of file sizes

 private:
  std::vector<std::shared_ptr<const GgufFile>> shards_;
  std::vector<TensorRef> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

// How many tensors each shard holds, in order: the WriteOptions::split_tensor_counts that
// write a plan of the model's tensors, in the model's order, in the same shards (--keep-split).
// A single file gives {n}, which would write a set of one shard (OUT-00001-of-00001.gguf): the
// tools pass it only for a model of several shards.
std::vector<uint64_t> shard_tensor_counts(const Model& model);

// Indices into model.tensors() that the selector picks (all when it is empty); roles are
// classified with each tensor's dimension count. Errors as select_tensors().
std::vector<size_t> select_in(const Model& model, const Selector& selector);

}  // namespace gguf
