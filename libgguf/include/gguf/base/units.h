// Numbers for people: byte counts as renderers and tools print them, floats as messages about
// exactness name them.
#pragma once

#include <cstdint>
#include <string>

namespace gguf {

// "1.50 GiB", "312.00 MiB", "17 B".
std::string human_bytes(uint64_t bytes);

// "0.5 (bits 0x3f000000)": a float with its bits.
std::string float_with_bits(float f);

}  // namespace gguf
