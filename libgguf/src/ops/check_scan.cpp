// check_model's data scan: NaN/Inf in float payloads and in the scales of quant blocks (where
// each type keeps them: codecs/block_scales.h), in chunks read on all cores.
#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstring>

#include "codecs/block_scales.h"
#include "gguf/base/escape.h"
#include "gguf/base/threads.h"
#include "ops/check_parts.h"

namespace gguf {
namespace {

using namespace detail;  // the block scale layouts (codecs/block_scales.h)

const char* plural(uint64_t n, const char* one, const char* many) { return n == 1 ? one : many; }

template <class W>
void scan_floats(const uint8_t* p, uint64_t n, uint64_t base, W exp_mask, Hits& h) {
  uint64_t c = 0;
  for (uint64_t i = 0; i < n; ++i) c += (load<W>(p + i * sizeof(W)) & exp_mask) == exp_mask;
  if (c == 0) return;
  h.count = c;
  for (uint64_t i = 0; i < n; ++i) {
    const W w = load<W>(p + i * sizeof(W));
    if ((w & exp_mask) == exp_mask) {
      h.first = base + i;
      h.bits = w;
      return;
    }
  }
}

// "nan", "inf" or "-inf" from the bits of a float with the given exponent/mantissa widths.
std::string name_nonfinite(uint64_t bits, int mantissa_bits, int total_bits) {
  if (bits & ((uint64_t{1} << mantissa_bits) - 1)) return "nan";
  return (bits >> (total_bits - 1)) & 1 ? "-inf" : "inf";
}

struct Chunk {
  size_t tensor;  // index into Model::tensors()
  uint64_t first_unit, n_units;
};

class DataScanner {
 public:
  DataScanner(const Model& m, const CheckOptions& o,
              const std::unordered_set<const TensorInfo*>& scannable, std::vector<Problem>& out)
      : model_(m), options_(o), scannable_(scannable), out_(out) {}

  void scan_data() {
    const auto& refs = model_.tensors();
    std::vector<ScanLayout> layouts(refs.size());
    std::vector<Chunk> chunks;
    for (size_t i = 0; i < refs.size(); ++i) {
      const TensorInfo& t = *refs[i].info;
      if (!scannable_.count(&t) || *t.bytes == 0) continue;
      layouts[i] = scan_layout(t.type_id);
      if (layouts[i].scan == Scan::kNone) continue;
      const uint64_t unit = t.type()->type_size;
      const uint64_t units = *t.bytes / unit;
      const uint64_t per_chunk = std::max<uint64_t>(1, options_.chunk_bytes / unit);
      for (uint64_t u = 0; u < units; u += per_chunk)
        chunks.push_back({i, u, std::min(per_chunk, units - u)});
    }
    std::vector<Hits> hits(chunks.size());
    const auto work = [&](const tbb::blocked_range<size_t>& r) {
      for (size_t c = r.begin(); c != r.end(); ++c) {
        const Chunk& ch = chunks[c];
        const TensorRef& ref = refs[ch.tensor];
        const uint64_t unit = ref.info->type()->type_size;
        thread_local std::vector<uint8_t> buf;  // the chunk, read (memory bounded by chunks)
        const uint8_t* p =
            ref.file->source()
                .stream(ref.data_start() + ch.first_unit * unit, ch.n_units * unit, buf)
                .data();
        const ScanLayout& l = layouts[ch.tensor];
        Hits& h = hits[c];
        switch (l.scan) {
          case Scan::kF32:
            scan_floats<uint32_t>(p, ch.n_units, ch.first_unit, 0x7F800000u, h);
            break;
          case Scan::kF16:
            scan_floats<uint16_t>(p, ch.n_units, ch.first_unit, 0x7C00u, h);
            break;
          case Scan::kBF16:
            scan_floats<uint16_t>(p, ch.n_units, ch.first_unit, 0x7F80u, h);
            break;
          case Scan::kF64:
            scan_floats<uint64_t>(p, ch.n_units, ch.first_unit, 0x7FF0000000000000u, h);
            break;
          default:
            scan_blocks(l, p, ch.n_units, unit, ch.first_unit, h);
        }
      }
    };
    tbb::task_arena arena(static_cast<int>(thread_count(options_.threads)));
    arena.execute([&] { tbb::parallel_for(tbb::blocked_range<size_t>(0, chunks.size()), work); });

    // Chunks of a tensor are contiguous and in order: the first hit is the first chunk's.
    for (size_t c = 0; c < chunks.size();) {
      const size_t i = chunks[c].tensor;
      Hits total;
      for (; c < chunks.size() && chunks[c].tensor == i; ++c) {
        if (total.count == 0)
          total = hits[c];
        else
          total.count += hits[c].count;
      }
      if (total.count) report_hits(refs[i], layouts[i], total);
    }
  }

 private:
  const Model& model_;
  const CheckOptions& options_;
  const std::unordered_set<const TensorInfo*>& scannable_;
  std::vector<Problem>& out_;

  void add(const GgufFile& f, std::string object, std::optional<uint64_t> at, std::string msg,
           const char* severity = "error") {
    out_.push_back({f.path(), std::move(object), at, std::move(msg), severity});
  }

  void report_hits(const TensorRef& ref, const ScanLayout& l, const Hits& h) {
    const uint64_t unit = ref.info->type()->type_size;
    uint64_t at = ref.data_start() + h.first * unit;
    std::string msg;
    switch (l.scan) {
      case Scan::kF32:
      case Scan::kF16:
      case Scan::kBF16:
      case Scan::kF64: {
        const int mant = l.scan == Scan::kF32    ? 23
                         : l.scan == Scan::kF16  ? 10
                         : l.scan == Scan::kBF16 ? 7
                                                 : 52;
        msg = fmt::format("{} non-finite {} (first: {} at element {})", h.count,
                          plural(h.count, "value", "values"),
                          name_nonfinite(h.bits, mant, static_cast<int>(unit * 8)), h.first);
        break;
      }
      default: {
        const bool f32 = l.scan == Scan::kQ8K;
        at += l.fields[h.field].at;
        msg = fmt::format("{} {} with a non-finite scale (first: block {}, {} = {})", h.count,
                          plural(h.count, "block", "blocks"), h.first, l.fields[h.field].name,
                          l.scan == Scan::kE8M0
                              ? std::string("nan (E8M0 0xff)")
                              : name_nonfinite(h.bits, f32 ? 23 : 10, f32 ? 32 : 16));
      }
    }
    add(*ref.file, tensor_object(ref.name()), at, std::move(msg));
  }
};

}  // namespace

void detail::scan_data(const Model& model, const CheckOptions& options,
                       const std::unordered_set<const TensorInfo*>& scannable,
                       std::vector<Problem>& out) {
  DataScanner(model, options, scannable, out).scan_data();
}

}  // namespace gguf
