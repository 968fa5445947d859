// Packed-affine values and their exact q4_1 / q5_1 / f32 form, and the exact q4_0 -> q4_1 /
// q5_0 -> q5_1 block transcoders (the same affine form with min = -8d or -16d). Built with
// -ffp-contract=off (a codec file): the definition code * scale + min is two roundings, never one
// fused. Work is done in element ranges (not rows), so a tensor of one 400M-element row is handled
// in bounded pieces like any other.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/base/fp16.h"
#include "gguf/codecs/affine.h"
#include "gguf/format/file.h"

namespace gguf {
namespace {

static_assert(std::endian::native == std::endian::little,
              "codes, scales and mins are little-endian; they are read in host order");

inline uint16_t u16_at(std::span<const uint8_t> b, uint64_t i) {
  return static_cast<uint16_t>(b[2 * i] | (b[2 * i + 1] << 8));
}

// The bits-bit code of element i (stream bits [i * bits, (i + 1) * bits), least significant
// bit first); the caller guarantees they lie inside c.
inline unsigned code_at(std::span<const uint8_t> c, uint64_t i, unsigned bits) {
  const uint64_t p = i * bits, k = p >> 3;
  const unsigned sh = static_cast<unsigned>(p & 7);
  unsigned v = static_cast<unsigned>(c[k]) >> sh;
  if (sh + bits > 8) v |= static_cast<unsigned>(c[k + 1]) << (8 - sh);
  return v & ((1u << bits) - 1);
}

// Codes of 8 * groups elements starting at element 8 * group0: each run of eight fills exactly
// B whole bytes, read at once; B is a constant so the shifts are too.
template <unsigned B>
void unpack_runs(const uint8_t* c, uint64_t group0, uint64_t groups, uint8_t* out) {
  constexpr uint64_t kMask = (uint64_t{1} << B) - 1;
  for (uint64_t g = 0; g < groups; ++g, out += 8) {
    uint64_t w = 0;
    std::memcpy(&w, c + (group0 + g) * B, B);  // little-endian host (asserted above)
    for (unsigned j = 0; j < 8; ++j) out[j] = static_cast<uint8_t>((w >> (j * B)) & kMask);
  }
}

// Codes of elements [first, first + count) into out: whole runs of eight at once, the ends
// one by one.
void unpack_codes(std::span<const uint8_t> c, unsigned bits, uint64_t first, uint64_t count,
                  uint8_t* out) {
  uint64_t i = first;
  const uint64_t end = first + count;
  for (; i < end && i % 8 != 0; ++i) *out++ = static_cast<uint8_t>(code_at(c, i, bits));
  const uint64_t runs = (end - i) / 8;
  using Unpack = void (*)(const uint8_t*, uint64_t, uint64_t, uint8_t*);
  static constexpr Unpack kUnpack[9] = {nullptr,        unpack_runs<1>, unpack_runs<2>,
                                        unpack_runs<3>, unpack_runs<4>, unpack_runs<5>,
                                        unpack_runs<6>, unpack_runs<7>, unpack_runs<8>};
  kUnpack[bits](c.data(), i / 8, runs, out);
  out += 8 * runs;
  i += 8 * runs;
  for (; i < end; ++i) *out++ = static_cast<uint8_t>(code_at(c, i, bits));
}

struct Views {
  std::span<const uint8_t> codes, scales, mins;
};

Views views(const SafetensorsFile& f, const PackedAffineTensor& t) {
  return {f.data(*t.codes), f.data(*t.scales), f.data(*t.mins)};
}

void check_range(const PackedAffineTensor& t, uint64_t first, uint64_t count) {
  const uint64_t n = t.rows * t.cols;
  if (first > n || count > n - first)
    throw Error(fmt::format("elements {}+{} of '{}' are out of range", first, count,
                            escape_for_terminal(t.name)));
}

// The scale/min pair of element i.
inline uint64_t pair_of(const PackedAffineTensor& t, uint64_t i) {
  return i / t.cols * (t.cols / t.group) + i % t.cols / t.group;
}

}  // namespace

void release_affine_input(const SafetensorsFile& f, const PackedAffineTensor& t, uint64_t first,
                          uint64_t count) {
  if (count == 0) return;
  const uint64_t b0 = first * t.bits / 8, b1 = ((first + count) * t.bits + 7) / 8;
  f.source().release(t.codes->begin + b0, b1 - b0);
  const uint64_t p0 = pair_of(t, first), p1 = pair_of(t, first + count - 1) + 1;
  f.source().release(t.scales->begin + 2 * p0, 2 * (p1 - p0));
  f.source().release(t.mins->begin + 2 * p0, 2 * (p1 - p0));
}

void affine_values(const SafetensorsFile& file, const PackedAffineTensor& t, uint64_t first,
                   uint64_t count, std::span<float> out) {
  check_range(t, first, count);
  if (out.size() != count) throw Error(fmt::format("affine_values: buffer of {}", out.size()));
  const Views v = views(file, t);
  const uint64_t groups = t.cols / t.group;
  constexpr uint64_t kPiece = 4096;
  uint8_t codes[kPiece];
  for (uint64_t done = 0; done < count;) {
    const uint64_t n = std::min(kPiece, count - done);
    unpack_codes(v.codes, t.bits, first + done, n, codes);
    // Runs of one scale/min pair: to the end of the group, the row or the piece.
    for (uint64_t k = 0; k < n;) {
      const uint64_t i = first + done + k, col = i % t.cols;
      const uint64_t g = i / t.cols * groups + col / t.group;
      const uint64_t len = std::min(n - k, t.group - col % t.group);
      const float scale = fp16_to_fp32(u16_at(v.scales, g));
      const float min = fp16_to_fp32(u16_at(v.mins, g));
      float* o = out.data() + done + k;
      for (uint64_t j = 0; j < len; ++j) {
        const float product = static_cast<float>(codes[k + j]) * scale;
        o[j] = product + min;
      }
      k += len;
    }
    done += n;
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
  const unsigned room = requested == GgmlType::Q4_1 ? 4 : 5;
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
  check_range(t, first, count);
  if (type == GgmlType::F32) {
    if (out.size() != 4 * count)
      throw Error(fmt::format("affine_to_type: buffer of {} bytes", out.size()));
    constexpr uint64_t kPiece = 4096;
    float values[kPiece];
    for (uint64_t done = 0; done < count; done += kPiece) {
      const uint64_t n = std::min(kPiece, count - done);
      affine_values(file, t, first + done, n, {values, n});
      std::memcpy(out.data() + 4 * done, values, 4 * n);
    }
    release_affine_input(file, t, first, count);
    return;
  }
  const bool q5 = type == GgmlType::Q5_1;
  const uint64_t block_bytes = q5 ? 24 : 20;
  if (first % 32 != 0 || count % 32 != 0 || out.size() != count / 32 * block_bytes)
    throw Error(
        fmt::format("affine_to_type: elements {}+{} into {} bytes", first, count, out.size()));
  const Views v = views(file, t);
  uint8_t* o = out.data();
  uint8_t codes[32];
  for (uint64_t i0 = first; i0 < first + count; i0 += 32, o += block_bytes) {
    // A block lies in one group (the group is a multiple of 32): its scale and min, bit for bit.
    const uint64_t g = pair_of(t, i0);
    std::memcpy(o, v.scales.data() + 2 * g, 2);
    std::memcpy(o + 2, v.mins.data() + 2 * g, 2);
    unpack_codes(v.codes, t.bits, i0, 32, codes);
    uint8_t* qs = o + (q5 ? 8 : 4);
    uint32_t qh = 0;
    for (unsigned j = 0; j < 16; ++j) {
      const unsigned lo = codes[j], hi = codes[j + 16];
      qs[j] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      qh |= ((lo >> 4) & 1u) << j;
      qh |= ((hi >> 4) & 1u) << (j + 16);
    }
    if (q5)
      for (int k = 0; k < 4; ++k) o[4 + k] = static_cast<uint8_t>(qh >> (8 * k));
  }
  release_affine_input(file, t, first, count);
}

std::optional<uint64_t> transcode_blocks(GgmlType from, GgmlType to, std::span<const uint8_t> src,
                                         std::span<uint8_t> dst) {
  const bool q5 = from == GgmlType::Q5_0 && to == GgmlType::Q5_1;
  if (!q5 && !(from == GgmlType::Q4_0 && to == GgmlType::Q4_1))
    throw Error(fmt::format("transcode_blocks: no transcoder from {} to {}", traits(from).name,
                            traits(to).name));
  // q4_0 {d, qs[16]} -> q4_1 {d, m, qs[16]}; q5_0 {d, qh[4], qs[16]} -> q5_1 {d, m, qh, qs}.
  const uint64_t in = q5 ? 22 : 18, out = q5 ? 24 : 20;
  const float offset = q5 ? -16.0f : -8.0f;
  if (src.size() % in != 0 || dst.size() != src.size() / in * out)
    throw Error(fmt::format("transcode_blocks: {} bytes into {}", src.size(), dst.size()));
  for (uint64_t b = 0; b < src.size() / in; ++b) {
    const uint8_t* s = src.data() + b * in;
    uint8_t* o = dst.data() + b * out;
    uint16_t d;
    std::memcpy(&d, s, 2);
    const float df = fp16_to_fp32(d);
    // -8d is exact in fp32; it must also be an f16 (no overflow) to be stored as the min.
    const float mf = offset * df;
    const uint16_t m = fp32_to_fp16(mf);
    if (!std::isfinite(df) || fp16_to_fp32(m) != mf) return b;
    std::memcpy(o, &d, 2);
    std::memcpy(o + 2, &m, 2);
    std::memcpy(o + 4, s + 2, in - 2);
  }
  return std::nullopt;
}

}  // namespace gguf
