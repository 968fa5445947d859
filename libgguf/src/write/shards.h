// Internal: how write_plan cuts a plan into the files of a split set (shards.cpp).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "gguf/write/writer.h"
#include "write/serialize.h"

namespace gguf::detail {

// One output file of a plan: its path, its metadata (split keys added), tensors and layout.
struct Shard {
  std::string path;
  Metadata metadata;
  std::vector<const PlanTensor*> tensors;
  std::vector<size_t> plan_index;  // into Plan::tensors
  Layout layout;
};

// The files plan is written to at path: one, or a split set as o asks (split_tensor_counts,
// split_max_size, split_max_tensors); base is the plan's metadata without split keys.
std::vector<Shard> assign_shards(const Plan& plan, const Metadata& base, const std::string& path,
                                 const WriteOptions& o);

}  // namespace gguf::detail
