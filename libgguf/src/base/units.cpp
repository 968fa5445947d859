// Byte counts for people (binary units, two decimals).
#include "gguf/base/units.h"

#include <fmt/format.h>

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

}  // namespace gguf
