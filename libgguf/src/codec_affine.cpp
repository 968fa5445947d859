// Packed-affine values and their exact q4_1 / q5_1 / f32 form. Built with -ffp-contract=off
// (a codec file): the definition code * scale + min is two roundings, never one fused.
#include <fmt/format.h>

#include <cstring>

#include "gguf/affine.h"
#include "gguf/error.h"
#include "gguf/file.h"
#include "gguf/fp16.h"

namespace gguf {
namespace {

// The bits-bit code at stream bit p (least significant bit first). The caller guarantees
// p + bits <= 8 * bytes.size().
inline unsigned code_at(std::span<const uint8_t> c, uint64_t p, unsigned bits) {
  const uint64_t k = p >> 3;
  const unsigned sh = static_cast<unsigned>(p & 7);
  unsigned v = static_cast<unsigned>(c[k]) >> sh;
  if (sh + bits > 8) v |= static_cast<unsigned>(c[k + 1]) << (8 - sh);
  return v & ((1u << bits) - 1);
}

inline uint16_t u16_at(std::span<const uint8_t> b, uint64_t i) {
  return static_cast<uint16_t>(b[2 * i] | (b[2 * i + 1] << 8));
}

struct Views {
  std::span<const uint8_t> codes, scales, mins;
};

Views views(const SafetensorsFile& f, const PackedAffineTensor& t) {
  return {f.data(*t.codes), f.data(*t.scales), f.data(*t.mins)};
}

void check_rows(const PackedAffineTensor& t, uint64_t first, uint64_t count, size_t out_size,
                uint64_t per_row) {
  if (first > t.rows || count > t.rows - first || out_size != count * per_row)
    throw Error(fmt::format("affine rows {}+{} of '{}' out of range or wrong buffer", first, count,
                            t.name));
}

// The stream bits of rows [first, first + count) lie in their own bytes: hand those pages back
// once used, so a 100 GB import keeps a bounded resident set.
void release_rows(const SafetensorsFile& f, const PackedAffineTensor& t, uint64_t first,
                  uint64_t count) {
  const uint64_t b0 = first * t.cols * t.bits / 8, b1 = ((first + count) * t.cols * t.bits + 7) / 8;
  f.source().release(t.codes->begin + b0, b1 - b0);
  const uint64_t g = t.cols / t.group;
  f.source().release(t.scales->begin + 2 * first * g, 2 * count * g);
  f.source().release(t.mins->begin + 2 * first * g, 2 * count * g);
}

}  // namespace

void affine_values(const SafetensorsFile& file, const PackedAffineTensor& t, uint64_t first,
                   uint64_t count, std::span<float> out) {
  check_rows(t, first, count, out.size(), t.cols);
  const Views v = views(file, t);
  const uint64_t groups = t.cols / t.group;
  for (uint64_t r = 0; r < count; ++r) {
    const uint64_t row = first + r;
    for (uint64_t c = 0; c < t.cols; ++c) {
      const uint64_t i = row * t.cols + c, g = row * groups + c / t.group;
      const float scale = fp16_to_fp32(u16_at(v.scales, g));
      const float min = fp16_to_fp32(u16_at(v.mins, g));
      const float code = static_cast<float>(code_at(v.codes, i * t.bits, t.bits));
      const float product = code * scale;
      out[r * t.cols + c] = product + min;
    }
  }
}

std::optional<GgmlType> affine_target(const PackedAffineTensor& t,
                                      std::optional<GgmlType> requested, std::string& why) {
  why.clear();
  if (requested == GgmlType::F32) return GgmlType::F32;
  if (requested && requested != GgmlType::Q4_1 && requested != GgmlType::Q5_1) {
    why = fmt::format("{} cannot hold affine codes exactly (q4_1, q5_1 and f32 can)",
                      traits(*requested).name);
    return std::nullopt;
  }
  if (t.group % 32 != 0) {
    why = fmt::format(
        "its group of {} columns is not a multiple of 32, the block of q4_1 and q5_1, so a block "
        "would need two scales; --type f32 holds it exactly",
        t.group);
    return std::nullopt;
  }
  const unsigned room = requested == GgmlType::Q5_1 ? 5 : requested == GgmlType::Q4_1 ? 4 : 5;
  if (t.bits > room) {
    why = requested ? fmt::format("its {}-bit codes do not fit {}'s {}-bit codes{}", t.bits,
                                  traits(*requested).name, room,
                                  t.bits == 5 ? "; q5_1 holds them exactly"
                                              : "; --type f32 holds them exactly")
                    : fmt::format(
                          "its {}-bit codes do not fit q4_1 (4 bits) or q5_1 (5 bits); "
                          "--type f32 holds them exactly",
                          t.bits);
    return std::nullopt;
  }
  if (requested) return requested;
  return t.bits <= 4 ? GgmlType::Q4_1 : GgmlType::Q5_1;
}

void affine_to_type(const SafetensorsFile& file, const PackedAffineTensor& t, GgmlType type,
                    uint64_t first, uint64_t count, std::span<uint8_t> out) {
  std::string why;
  if (affine_target(t, type, why) != type) throw Error({}, tensor_object(t.name), {}, why);
  if (type == GgmlType::F32) {
    check_rows(t, first, count, out.size(), t.cols * 4);
    std::vector<float> values(static_cast<size_t>(count * t.cols));
    affine_values(file, t, first, count, values);
    std::memcpy(out.data(), values.data(), out.size());
    release_rows(file, t, first, count);
    return;
  }
  const bool q5 = type == GgmlType::Q5_1;
  const uint64_t block_bytes = q5 ? 24 : 20, blocks = t.cols / 32, groups = t.cols / t.group;
  check_rows(t, first, count, out.size(), blocks * block_bytes);
  const Views v = views(file, t);
  uint8_t* o = out.data();
  for (uint64_t r = 0; r < count; ++r) {
    const uint64_t row = first + r;
    for (uint64_t b = 0; b < blocks; ++b, o += block_bytes) {
      const uint64_t g = row * groups + b * 32 / t.group;
      const uint64_t i0 = row * t.cols + b * 32;
      // d and m: the group's f16 scale and min, bit for bit.
      std::memcpy(o, v.scales.data() + 2 * g, 2);
      std::memcpy(o + 2, v.mins.data() + 2 * g, 2);
      uint8_t* qs = o + (q5 ? 8 : 4);
      uint32_t qh = 0;
      for (unsigned j = 0; j < 16; ++j) {
        const unsigned lo = code_at(v.codes, (i0 + j) * t.bits, t.bits);
        const unsigned hi = code_at(v.codes, (i0 + j + 16) * t.bits, t.bits);
        qs[j] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
        qh |= ((lo >> 4) & 1u) << j;
        qh |= ((hi >> 4) & 1u) << (j + 16);
      }
      if (q5)
        for (int k = 0; k < 4; ++k) o[4 + k] = static_cast<uint8_t>(qh >> (8 * k));
    }
  }
  release_rows(file, t, first, count);
}

}  // namespace gguf
