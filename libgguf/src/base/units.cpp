// Byte counts for people (binary units, two decimals), floats with their bits.
#include "gguf/base/units.h"

#include <fmt/format.h>

#include <cstring>
#include <iterator>

namespace gguf {

std::string human_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes) / 1024.0;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(kUnits)) v /= 1024.0, ++u;
  return fmt::format("{:.2f} {}", v, kUnits[u]);
}

std::string float_with_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return fmt::format("{} (bits 0x{:08x})", f, b);
}

}  // namespace gguf
