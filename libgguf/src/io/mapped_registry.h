// Which input a faulting address lies in, for the SIGBUS handler: a mapped input that shrinks
// (or whose storage fails) while it is read raises SIGBUS at the address read, and the error
// should name the file and the byte. FileSource registers each map for as long as it exists.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gguf::detail {

// Registers a map of `size` bytes at `base` named `name` (escaped for a terminal; the caller
// keeps it alive until unregister_mapping). Returns the slot, or -1 when all slots are taken
// (the map then goes unnamed in a SIGBUS message).
int register_mapping(const uint8_t* base, uint64_t size, const char* name) noexcept;
void unregister_mapping(int slot) noexcept;

// describe_mapped_address (gguf/io/signals.h) names the map holding an address.

}  // namespace gguf::detail
