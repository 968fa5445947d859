// The bounded read cursor's failures, out of line so the checks inline small.
#include "io/cursor.h"

#include <fmt/format.h>

#include "gguf/base/error.h"

namespace gguf {

Cursor::Cursor(const ByteSource& source)
    : data_(source.bytes(0, source.size()).data()), size_(source.size()), file_(source.name()) {}

void Cursor::fail(uint64_t at, std::string message) const {
  throw Error(file_, object_, at, std::move(message));
}

void Cursor::fail_need(uint64_t n, std::string_view what) const {
  fail(pos_, fmt::format("{} runs past end of file (needs {} bytes, {} left)", what, n, left()));
}

void Cursor::fail_take(uint64_t n, std::string_view what) const {
  fail(pos_, fmt::format("{} of {} bytes runs past end of file ({} left)", what, n, left()));
}

std::string Cursor::read_string(std::string_view what, uint64_t max_bytes) {
  const uint64_t at = pos_;
  const uint64_t n = read<uint64_t>(what);
  if (n > max_bytes)
    fail(at, fmt::format("{} length {} exceeds ggml's limit of {} bytes", what, n, max_bytes));
  if (n > left())
    fail(at, fmt::format("{} length {} runs past end of file ({} bytes left)", what, n, left()));
  const auto b = take(n, what);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

}  // namespace gguf
