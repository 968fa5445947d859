// errno as gguf::Error messages spell it, for the library and for tools reporting I/O errors.
#pragma once

#include <string>

namespace gguf {

// strerror(err) with a lower-case first letter, as gguf::Error messages are spelled.
std::string errno_text(int err);

}  // namespace gguf
