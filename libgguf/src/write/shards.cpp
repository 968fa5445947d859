// Shard assignment of write_plan: which tensors go into which file of a split set, named as
// llama.cpp names shards, each with its split keys.
#include "write/shards.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "gguf/format/file.h"
#include "gguf/format/model.h"

namespace gguf::detail {
namespace {

constexpr uint64_t kMaxShards = 65535;  // split.count is a u16

Metadata split_keys(uint64_t no, uint64_t count, uint64_t total) {
  Metadata m;
  m.set(detail::kSplitNo, Value::u16(static_cast<uint16_t>(no)));
  m.set(detail::kSplitCount, Value::u16(static_cast<uint16_t>(count)));
  m.set(detail::kSplitTensors, Value::i32(static_cast<int32_t>(total)));
  return m;
}

void append_all(Metadata& to, const Metadata& from) {
  for (const auto& kv : from.entries()) to.set(kv.key, kv.value);
}

// Greedy assignment in plan order: a tensor starts a new shard when adding it would exceed a
// limit, so every shard holds at least one tensor and only a single oversized tensor makes a
// shard larger than split_max_size.
std::vector<std::vector<size_t>> group_tensors(const Plan& plan, const Metadata& base,
                                               const WriteOptions& o) {
  const uint64_t a = detail::plan_alignment(base);
  const uint64_t keys = detail::metadata_bytes(split_keys(0, 1, 0));
  Metadata align_only;
  if (const KeyValue* kv = find_key_as_ggml(base, "general.alignment"))
    align_only.set(kv->key, kv->value);
  const uint64_t first_fixed = 24 + detail::metadata_bytes(base) + keys;
  const uint64_t other_fixed = 24 + keys + detail::metadata_bytes(align_only);
  std::vector<std::vector<size_t>> groups(1);
  uint64_t fixed = first_fixed, infos = 0, data = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const PlanTensor& t = plan.tensors[i];
    const uint64_t info = detail::tensor_info_bytes(t);
    const uint64_t padded = detail::pad_to(t.bytes, a);
    if (!groups.back().empty()) {
      const bool too_many = o.split_max_tensors && groups.back().size() >= o.split_max_tensors;
      const bool too_big =
          o.split_max_size &&
          detail::pad_to(fixed + infos + info, a) + data + padded > o.split_max_size;
      if (too_many || too_big) {
        groups.emplace_back();
        fixed = other_fixed;
        infos = data = 0;
      }
    }
    groups.back().push_back(i);
    infos += info;
    data += padded;
  }
  return groups;
}

}  // namespace

std::vector<Shard> assign_shards(const Plan& plan, const Metadata& base, const std::string& path,
                                 const WriteOptions& o) {
  std::vector<Shard> shards;
  const bool given = !o.split_tensor_counts.empty();
  if (given && (o.split_max_size || o.split_max_tensors))
    throw Error("write_plan: split_tensor_counts excludes split_max_size and split_max_tensors",
                Error::Kind::kUsage);
  if (!given && !o.split_max_size && !o.split_max_tensors) {
    shards.push_back({path, base, {}, {}, {}});
    for (size_t i = 0; i < plan.tensors.size(); ++i) shards[0].plan_index.push_back(i);
  } else {
    std::vector<std::vector<size_t>> groups;
    if (given) {
      uint64_t total = 0;
      for (uint64_t c : o.split_tensor_counts) total += std::min<uint64_t>(c, UINT32_MAX);
      if (total != plan.tensors.size())
        throw Error(fmt::format("write_plan: split_tensor_counts cover {} tensors, the plan has {}",
                                total, plan.tensors.size()));
      size_t next = 0;
      for (uint64_t c : o.split_tensor_counts) {
        groups.emplace_back();
        for (uint64_t k = 0; k < c; ++k) groups.back().push_back(next++);
      }
    } else {
      groups = group_tensors(plan, base, o);
    }
    const uint64_t n = groups.size();
    if (n > kMaxShards)
      throw Error(path, {}, std::nullopt,
                  fmt::format("split output needs {} shards; split.count is a u16 (at most {})", n,
                              kMaxShards),
                  Error::Kind::kUsage);
    if (plan.tensors.size() > static_cast<uint64_t>(INT32_MAX))
      throw Error(path, {}, std::nullopt,
                  fmt::format("split output of {} tensors; split.tensors.count is an i32",
                              plan.tensors.size()));
    const std::string prefix =
        path.ends_with(".gguf") ? path.substr(0, path.size() - 5) : std::string(path);
    for (uint64_t s = 0; s < n; ++s) {
      Shard sh;
      sh.path = split_path(prefix, static_cast<int>(s + 1), static_cast<int>(n));
      if (s == 0) {
        sh.metadata = base;
        append_all(sh.metadata, split_keys(s, n, plan.tensors.size()));
      } else {
        sh.metadata = split_keys(s, n, plan.tensors.size());
        if (const KeyValue* kv = find_key_as_ggml(base, "general.alignment"))
          sh.metadata.set(kv->key, kv->value);
      }
      sh.plan_index = groups[s];
      shards.push_back(std::move(sh));
    }
  }
  for (auto& sh : shards) {
    for (size_t i : sh.plan_index) sh.tensors.push_back(&plan.tensors[i]);
    sh.layout = detail::layout_of(sh.metadata, sh.tensors);
  }
  return shards;
}

}  // namespace gguf::detail
