// Internal: errno as gguf::Error messages spell it.
#pragma once

#include <string>

namespace gguf::detail {

// strerror(err) with a lower-case first letter, as gguf::Error messages are spelled.
std::string errno_text(int err);

}  // namespace gguf::detail
