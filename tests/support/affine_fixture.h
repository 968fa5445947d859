// Test support: packed-affine safetensors files made from random codes, scales and mins, with
// the values they define computed here, apart from the library (its bit packing and value
// code are not used, so a test compares two independent readings of the format).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "gguf/base/fp16.h"
#include "gguf/inputs/safetensors.h"
#include "gguf/io/source.h"

namespace gguf::testing {

// A safetensors file parsed from bytes in memory (named m.safetensors).
inline SafetensorsFile parse_bytes(const std::vector<uint8_t>& bytes) {
  return SafetensorsFile::parse(memory_source(bytes, "m.safetensors"));
}

// How scales and mins are drawn.
enum class AffineValues {
  kWeights,  // scales 1e-4..0.05 of either sign, mins -0.5..0.5 (a quantizer's output)
  kEdges,    // also zeros, -0, f16 subnormals, the largest finite f16 values
  kSpecial,  // also infinities and NaNs
};

struct AffineTensorData {
  unsigned bits = 0;
  uint64_t group = 0, rows = 0, cols = 0;
  std::vector<unsigned> codes;         // one per element
  std::vector<uint16_t> scales, mins;  // f16 bits, rows * cols / group
};

// Bit for bit, except that any NaN matches any NaN: NaN + NaN keeps one operand's payload, and
// which one is the compiler's choice of operand order (it differs between ggml, the library
// and this fixture, and between builds).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0 && !(std::isnan(a[i]) && std::isnan(b[i]))) return false;
  return true;
}

class AffineFile {
 public:
  explicit AffineFile(uint64_t seed) : rng_(seed) {}

  // A packed tensor `name` of row-major `shape` (the last dimension is the columns), stored as
  // name.codes / name.scales / name.mins.
  void add_packed(const std::string& name, unsigned bits, uint64_t group,
                  const std::vector<int64_t>& shape, AffineValues values = AffineValues::kWeights) {
    AffineTensorData d;
    d.bits = bits;
    d.group = group;
    d.cols = static_cast<uint64_t>(shape.back());
    uint64_t n = 1;
    for (auto s : shape) n *= static_cast<uint64_t>(s);
    d.rows = n / d.cols;
    std::uniform_int_distribution<unsigned> code(0, (1u << bits) - 1);
    for (uint64_t i = 0; i < n; ++i) d.codes.push_back(code(rng_));
    const uint64_t pairs = n / group;
    for (uint64_t i = 0; i < pairs; ++i) {
      d.scales.push_back(draw(values, 0.0001f, 0.05f, true));
      d.mins.push_back(draw(values, 0.0f, 0.5f, true));
    }
    // The code stream, least significant bit first, bit by bit.
    std::vector<uint8_t> stream((n * bits + 7) / 8, 0);
    for (uint64_t i = 0; i < n; ++i)
      for (unsigned b = 0; b < bits; ++b)
        if ((d.codes[i] >> b) & 1u) {
          const uint64_t p = i * bits + b;
          stream[p / 8] = static_cast<uint8_t>(stream[p / 8] | (1u << (p % 8)));
        }
    std::vector<int64_t> sshape = shape;
    sshape.back() = static_cast<int64_t>(d.cols / group);
    entries_.push_back({name + ".codes", "U8", {static_cast<int64_t>(stream.size())}, stream});
    entries_.push_back({name + ".scales", "F16", sshape, bytes_of(d.scales)});
    entries_.push_back({name + ".mins", "F16", sshape, bytes_of(d.mins)});
    packed_[name] = {{"bits", bits},
                     {"group", group},
                     {"shape", shape},
                     {"codes", name + ".codes"},
                     {"scales", name + ".scales"},
                     {"mins", name + ".mins"}};
    data_[name] = std::move(d);
  }

  // A plain tensor of random bytes.
  void add_plain(const std::string& name, const std::string& dtype,
                 const std::vector<int64_t>& shape) {
    uint64_t n = safetensors_dtype_size(dtype);
    for (auto s : shape) n *= static_cast<uint64_t>(s);
    std::vector<uint8_t> b(n);
    for (auto& x : b) x = static_cast<uint8_t>(rng_());
    entries_.push_back({name, dtype, shape, b});
  }

  nlohmann::json& packed_json() { return packed_; }
  std::vector<SafetensorsEntry>& entries() { return entries_; }
  const AffineTensorData& data(const std::string& name) const { return data_.at(name); }

  std::vector<uint8_t> bytes() const {
    const nlohmann::json meta = {{"version", 1}, {"tensors", packed_}};
    return serialize_safetensors(entries_, {{"packed_affine", meta.dump()}});
  }
  std::string write(const std::string& path) const {
    const auto b = bytes();
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(b.data(), 1, b.size(), f);
    std::fclose(f);
    return path;
  }

  // float(code) * float(scale) + float(min), two roundings.
  static std::vector<float> values(const AffineTensorData& d) {
    std::vector<float> out(d.codes.size());
    const uint64_t groups = d.cols / d.group;
    for (uint64_t i = 0; i < out.size(); ++i) {
      const uint64_t g = i / d.cols * groups + i % d.cols / d.group;
      volatile float product = static_cast<float>(d.codes[i]) * fp16_to_fp32(d.scales[g]);
      out[i] = product + fp16_to_fp32(d.mins[g]);
    }
    return out;
  }

 private:
  static std::vector<uint8_t> bytes_of(const std::vector<uint16_t>& v) {
    std::vector<uint8_t> b(v.size() * 2);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  }

  uint16_t draw(AffineValues kind, float lo, float hi, bool signed_) {
    std::uniform_real_distribution<float> mag(lo, hi);
    std::uniform_int_distribution<int> pick(0, 15);
    float v = mag(rng_);
    if (signed_ && (rng_() & 1)) v = -v;
    if (kind != AffineValues::kWeights) {
      switch (pick(rng_)) {
        case 0:
          return 0x0000;
        case 1:
          return 0x8000;  // -0
        case 2:
          return static_cast<uint16_t>(1 + rng_() % 0x3ff);  // subnormal
        case 3:
          return 0x7bff;  // 65504
        case 4:
          return 0xfbff;
        case 5:
          if (kind == AffineValues::kSpecial) return (rng_() & 1) ? 0x7c00 : 0xfc00;  // +-inf
          break;
        case 6:
          if (kind == AffineValues::kSpecial)
            return static_cast<uint16_t>(0x7c01 + rng_() % 0x3fe);  // a NaN with a payload
          break;
        default:
          break;
      }
    }
    return fp32_to_fp16(v);
  }

  std::mt19937_64 rng_;
  std::vector<SafetensorsEntry> entries_;
  nlohmann::json packed_ = nlohmann::json::object();
  std::map<std::string, AffineTensorData> data_;
};

}  // namespace gguf::testing
