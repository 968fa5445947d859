// Requant's plan of one re-encoded tensor: rows decoded chunk by chunk and encoded through the
// streaming row encoder, importance from the imatrix or each matrix's column energy.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "gguf/base/error.h"
#include "gguf/base/fp16.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/names.h"
#include "gguf/ops/exact.h"
#include "gguf/write/encode.h"
#include "ops/requant_parts.h"

namespace gguf {
namespace {

// Decodes rows [first, first + count) of a tensor into out.
void decode_rows(const TensorRef& t, int64_t n_per_row, int64_t first, int64_t count,
                 std::span<float> out) {
  const auto type = static_cast<GgmlType>(t.info->type_id);
  const uint64_t rb = *row_bytes(type, static_cast<uint64_t>(n_per_row));
  const auto data = t.data();
  dequantize(type, data.subspan(static_cast<size_t>(first) * rb, static_cast<size_t>(count) * rb),
             out);
  t.file->source().release(t.data_start() + static_cast<uint64_t>(first) * rb,
                           static_cast<uint64_t>(count) * rb);
}

// Column energy of each matrix of a tensor, computed once per matrix on first use and let go
// once all its rows are encoded, so memory stays bounded by the matrices being encoded (a
// tensor of 400,000 one-row experts would otherwise keep 4 bytes per weight until the end).
class EnergyCache {
 public:
  EnergyCache(TensorRef t, int64_t n_per_row, int64_t rows_per_matrix)
      : t_(t), n_per_row_(n_per_row), rows_per_matrix_(rows_per_matrix) {}
  void done(int64_t mat, int64_t rows) {
    std::lock_guard lock(mu_);
    const auto it = cache_.find(mat);
    if (it == cache_.end()) return;
    Entry& e = it->second;
    e.rows_done += rows;
    if (--e.users == 0 && e.rows_done >= rows_per_matrix_) cache_.erase(it);
  }
  std::span<const float> get(int64_t mat) {
    std::lock_guard lock(mu_);
    auto it = cache_.find(mat);
    if (it == cache_.end()) {
      std::vector<float> w(static_cast<size_t>(n_per_row_), 0.0f);
      constexpr int64_t kRows = 256;
      std::vector<float> buf;
      for (int64_t r = 0; r < rows_per_matrix_; r += kRows) {
        const int64_t n = std::min(kRows, rows_per_matrix_ - r);
        buf.resize(static_cast<size_t>(n * n_per_row_));
        decode_rows(t_, n_per_row_, mat * rows_per_matrix_ + r, n, buf);
        // One float sum per column in row order, as if the matrix were read whole (adding
        // per-piece sums would round differently on matrices of more than 256 rows).
        add_column_energy(buf, n, n_per_row_, w);
      }
      it = cache_.emplace(mat, Entry{std::move(w), 0, 0}).first;
    }
    ++it->second.users;  // one get per task of rows, and one done when they are encoded
    return it->second.energy;
  }

 private:
  struct Entry {
    std::vector<float> energy;
    int64_t rows_done = 0;
    int64_t users = 0;  // tasks holding the span
  };
  TensorRef t_;
  int64_t n_per_row_, rows_per_matrix_;
  std::mutex mu_;
  std::map<int64_t, Entry> cache_;  // node-based: a returned span stays valid while others come
};

}  // namespace

bool is_quantizable(const TensorInfo& t, std::string_view arch) {
  // As llama.cpp's quantizer (llama-quant.cpp): ggml's dimension count, which ignores trailing
  // 1s ([4096, 1] is a vector, as gguf-py may write it), and only tensors named "*weight"
  // (biases, 2-D ones too such as gpt-oss's ffn_*_exps.bias, stay as they are).
  if (ggml_dims(t.shape) < 2) return false;
  if (!t.name.ends_with("weight")) return false;
  // Small or special 2-D weights llama.cpp never quantizes (Mamba and LFM2 convolutions,
  // RWKV mixers, T5 relative-position biases, Gemma 3n's altup/laurel/per-layer projection,
  // BERT position and token-type embeddings, multimodal position embeddings).
  for (std::string_view part : {"ssm_conv1d.weight",
                                "shortconv.conv.weight",
                                "time_mix_first.weight",
                                "time_mix_w0.weight",
                                "time_mix_w1.weight",
                                "time_mix_w2.weight",
                                "time_mix_v0.weight",
                                "time_mix_v1.weight",
                                "time_mix_v2.weight",
                                "time_mix_a0.weight",
                                "time_mix_a1.weight",
                                "time_mix_a2.weight",
                                "time_mix_g1.weight",
                                "time_mix_g2.weight",
                                "time_mix_decay_w1.weight",
                                "time_mix_decay_w2.weight",
                                "time_mix_lerp_fused.weight",
                                "attn_rel_b.weight",
                                "altup",
                                "laurel",
                                "per_layer_model_proj",
                                ".position_embd."})
    if (t.name.find(part) != std::string::npos) return false;
  if (t.name == "position_embd.weight" || t.name == "token_types.weight") return false;
  // Integer tensors (indices, positions, masks) are data, not weights: re-encoding them as
  // floats would change what they mean (and lose precision past 2^24), as llama-quantize knows.
  switch (static_cast<GgmlType>(t.type_id)) {
    case GgmlType::I8:
    case GgmlType::I16:
    case GgmlType::I32:
    case GgmlType::I64:
      return false;
    default:
      break;
  }
  const TensorName tn = classify_tensor(t.name, arch, ggml_dims(t.shape));
  return tn.role != Role::kNorm && tn.role != Role::kRouter;
}

namespace detail {

void plan_encode(const TensorRef& t, GgmlType to, const TypeRule* decided_by,
                 const RequantOptions& o, RequantRow& row, PlanTensor& pt, EncodeNotes& notes) {
  const auto add_type = [](std::vector<GgmlType>& v, GgmlType type) {
    if (std::find(v.begin(), v.end(), type) == v.end()) v.push_back(type);
  };
  const GgmlType to_type = to;
  const TensorInfo& info = *t.info;
  const TypeTraits& target = traits(to_type);
  // Names the rule in messages about the tensor's target.
  const std::string from_rule =
      decided_by ? fmt::format(" (the type {} gives it)", decided_by->describe()) : "";
  const auto src_type = static_cast<GgmlType>(info.type_id);
  if (!can_decode(src_type))
    throw Error(t.file->path(), tensor_object(info.name), info.type_offset(),
                fmt::format("no decoder for its type {}", type_name(info.type_id)));
  const int64_t n_per_row = info.shape[0];
  const auto rb = row_bytes(to_type, static_cast<uint64_t>(n_per_row));
  if (!rb)
    throw Error(t.file->path(), tensor_object(info.name), info.dims_offset() + 4,  // ne0
                fmt::format("row length {} is not a multiple of the {} block size {}{}", n_per_row,
                            target.name, target.block_size, from_rule));
  const int64_t nrows = static_cast<int64_t>(info.n_elements) / std::max<int64_t>(1, n_per_row);
  RowEncoder e;
  e.type = to_type;
  e.n_per_row = n_per_row;
  e.nrows = nrows;
  e.rows_per_matrix = info.shape[1];
  e.threads = o.threads;
  e.tensor_name = info.name;
  e.source_path = t.file->path();
  e.source_offset = t.data_start();
  e.source_row_bytes = *row_bytes(src_type, static_cast<uint64_t>(n_per_row));
  const TensorRef ref = t;
  e.rows = [ref, n_per_row](int64_t first, int64_t count, std::span<float> out) {
    decode_rows(ref, n_per_row, first, count, out);
  };
  const int64_t n_mat = nrows / std::max<int64_t>(1, info.shape[1]);
  std::string why;
  const ExactPath exact = o.exact ? exact_path(src_type, to_type, why) : ExactPath::kNone;
  if (o.exact && exact == ExactPath::kNone)
    throw Error(t.file->path(), tensor_object(info.name), info.type_offset(),
                why + from_rule +
                    " (--layers, --role and --match choose the tensors to move; the others "
                    "are copied)");
  e.exact = exact == ExactPath::kRound;
  if (exact == ExactPath::kTranscode) {
    const uint64_t src_rb = e.source_row_bytes, dst_rb = *rb;
    const std::string path = t.file->path(), name = info.name;
    const uint64_t src_block = traits(src_type).type_size;
    const GgmlType to = to_type;
    pt.source = make_row_producer(
        dst_rb, nrows, name,
        [ref = t, src_type, to, src_rb, dst_rb, path, name, src_block, n_per_row](
            int64_t first, int64_t count, uint8_t* out) {
          const uint64_t f = static_cast<uint64_t>(first), c = static_cast<uint64_t>(count);
          const auto src = ref.data().subspan(f * src_rb, c * src_rb);
          if (const auto bad = transcode_blocks(src_type, to, src, {out, c * dst_rb})) {
            const uint64_t block = f * src_rb / src_block + *bad;
            uint16_t d;
            std::memcpy(&d, src.data() + *bad * src_block, 2);
            throw Error(
                path, tensor_object(name), ref.data_start() + block * src_block,
                fmt::format("block {} (row {}): its scale {} makes a min of {} times "
                            "it, which is not a finite f16: {} cannot hold this "
                            "block exactly",
                            block, block * 32 / static_cast<uint64_t>(n_per_row), fp16_to_fp32(d),
                            src_type == GgmlType::Q5_0 ? -16 : -8, traits(to).name));
          }
          ref.file->source().release(ref.data_start() + f * src_rb, c * src_rb);
        });
  }
  if (uses_importance(to_type) && !o.exact) {
    const bool have = o.imatrix && o.imatrix->find(info.name);
    if (have) {
      // Validate the entry's length now so the error names the tensor before writing.
      (void)o.imatrix->weights(info.name, n_per_row, n_mat, 0);
      const Imatrix* im = o.imatrix;
      const std::string name = info.name;
      e.importance = [im, name, n_per_row, n_mat](int64_t mat) {
        return im->weights(name, n_per_row, n_mat, mat);
      };
      row.importance = ImportanceSource::kImatrix;
    } else if (requires_importance(to_type)) {
      auto cache = std::make_shared<EnergyCache>(t, n_per_row, info.shape[1]);
      e.importance = [cache](int64_t mat) { return cache->get(mat); };
      e.importance_done = [cache](int64_t mat, int64_t rows) { cache->done(mat, rows); };
      row.importance = ImportanceSource::kColumnEnergy;
      add_type(notes.energy_types, to_type);
    }
  }
  row.type_after = target.id;
  row.bytes_after = *rb * static_cast<uint64_t>(nrows);
  row.action = (to_type == GgmlType::F32 || to_type == GgmlType::F16 || to_type == GgmlType::BF16)
                   ? PlanAction::kDecode
                   : PlanAction::kEncode;
  // Decoding to f32 is exact (but for f64 sources), and so is what --exact proves; any
  // other target may round, and rounds again what a quantized source had rounded already.
  row.lossy = (to_type != GgmlType::F32 || src_type == GgmlType::F64) && !o.exact;
  row.requantized = row.lossy && traits(src_type).quantized;
  notes.requantized |= row.requantized;
  add_type(notes.encoded_types, to_type);
  pt.type_id = target.id;
  pt.bytes = row.bytes_after;
  if (exact != ExactPath::kTranscode) pt.source = make_encoding_producer(std::move(e));
}

}  // namespace detail
}  // namespace gguf
