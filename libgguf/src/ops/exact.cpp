// gguf-requant --exact: which type pairs have an exact path, and the proof by reading back.
#include "gguf/ops/exact.h"

#include <fmt/format.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <numeric>

#include "gguf/base/error.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/file.h"

namespace gguf {

ExactPath exact_path(GgmlType from, GgmlType to, std::string& why) {
  why.clear();
  // Every path goes through f32 (and the proof compares f32 values), which f64 exceeds.
  if (from == GgmlType::F64) {
    why = fmt::format(
        "no exact path from f64 to {}: f64 values are wider than f32's, which "
        "--exact moves values through",
        traits(to).name);
    return ExactPath::kNone;
  }
  if (to == GgmlType::F32) return ExactPath::kDecode;
  if (to == GgmlType::F16 || to == GgmlType::BF16) return ExactPath::kRound;
  if ((from == GgmlType::Q4_0 && to == GgmlType::Q4_1) ||
      (from == GgmlType::Q5_0 && to == GgmlType::Q5_1))
    return ExactPath::kTranscode;
  why = fmt::format(
      "no exact path from {} to {}: --exact moves values to f32, to f16 or bf16 when every value "
      "is one of theirs, and q4_0 to q4_1, q5_0 to q5_1",
      traits(from).name, traits(to).name);
  return ExactPath::kNone;
}

ExactProof prove_exact(const Model& source, const RequantResult& result, const Model& written,
                       unsigned threads, std::span<const std::string> names) {
  ExactProof proof;
  for (const RequantRow& row : result.rows) {
    if (row.action == PlanAction::kCopy) continue;
    const TensorRef* a = source.find(row.name);
    const TensorRef* b = written.find(row.name);
    const std::string obj = tensor_object(row.name);
    if (!a || !b)
      throw Error(names.empty() ? written.path() : names[0], obj, std::nullopt,
                  "reading back: the tensor is missing");
    const std::string path = b->shard < names.size() ? names[b->shard] : b->file->path();
    const auto ta = static_cast<GgmlType>(a->info->type_id);
    const auto tb = static_cast<GgmlType>(b->info->type_id);
    if (b->info->type_id != row.type_after || b->info->shape != a->info->shape)
      throw Error(path, obj, b->info->info_offset,
                  fmt::format("reading back: {} where {} was written", traits(tb).name,
                              type_name(row.type_after)));
    // Pieces of whole blocks of both types (both divide 256 or are 32-element types).
    const uint64_t n = a->info->n_elements;
    const uint64_t block = std::lcm<uint64_t>(traits(ta).block_size, traits(tb).block_size);
    const uint64_t piece = std::max<uint64_t>(block, (uint64_t{1} << 18) / block * block);
    const uint64_t pieces = (n + piece - 1) / piece;
    const auto da = a->data(), db = b->data();
    const uint64_t ba = traits(ta).type_size, bb = traits(tb).type_size;
    const uint64_t ea = traits(ta).block_size, eb = traits(tb).block_size;
    std::mutex mu;
    uint64_t bad = UINT64_MAX, zeros = 0;
    float bad_a = 0, bad_b = 0;
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, std::max(1u, threads));
    tbb::parallel_for(uint64_t{0}, pieces, [&](uint64_t k) {
      const uint64_t e0 = k * piece, m = std::min(piece, n - e0);
      std::vector<float> va(m), vb(m);
      dequantize(ta, da.subspan(e0 / ea * ba, m / ea * ba), va);
      dequantize(tb, db.subspan(e0 / eb * bb, m / eb * bb), vb);
      uint64_t z = 0, first = UINT64_MAX;
      for (uint64_t i = 0; i < m; ++i) {
        if (va[i] == vb[i]) {
          z += va[i] == 0 && std::signbit(va[i]) != std::signbit(vb[i]);
        } else if (!(std::isnan(va[i]) && std::isnan(vb[i])) && first == UINT64_MAX) {
          first = i;
        }
      }
      a->file->source().release(a->data_start() + e0 / ea * ba, m / ea * ba);
      b->file->source().release(b->data_start() + e0 / eb * bb, m / eb * bb);
      std::lock_guard lock(mu);
      zeros += z;
      if (first != UINT64_MAX && e0 + first < bad)
        bad = e0 + first, bad_a = va[first], bad_b = vb[first];
    });
    if (bad != UINT64_MAX)
      throw Error(path, obj, b->data_start() + bad / eb * bb,
                  fmt::format("reading back: element {} is {} in {}, {} in the source ({}): {} "
                              "cannot hold it",
                              bad, float_with_bits(bad_b), type_name(row.type_after),
                              float_with_bits(bad_a), type_name(row.type_before),
                              type_name(row.type_after)));
    ++proof.tensors;
    proof.values += n;
    proof.zeros_sign_changed += zeros;
  }
  return proof;
}

}  // namespace gguf
