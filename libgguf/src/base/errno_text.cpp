// strerror as gguf::Error messages spell it (lower-case first letter).
#include "gguf/base/errno_text.h"

#include <cstring>

namespace gguf {

std::string errno_text(int err) {
  std::string s = std::strerror(err);
  if (!s.empty() && s[0] >= 'A' && s[0] <= 'Z' && !(s.size() > 1 && s[1] >= 'A' && s[1] <= 'Z'))
    s[0] = static_cast<char>(s[0] - 'A' + 'a');
  return s;
}

}  // namespace gguf
