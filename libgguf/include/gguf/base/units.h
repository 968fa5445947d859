// Numbers for people: byte counts as renderers and tools print them.
#pragma once

#include <cstdint>
#include <string>

namespace gguf {

// "1.50 GiB", "312.00 MiB", "17 B".
std::string human_bytes(uint64_t bytes);

}  // namespace gguf
