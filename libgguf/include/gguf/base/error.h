// The one error type of libgguf: every failure names the file, the object (key or tensor),
// the byte offset when one applies, and what was expected.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace gguf {

class Error : public std::runtime_error {
 public:
  // kind selects the exit code a tool maps the error to.
  enum class Kind { kInput, kUsage };

  Error(std::string path, std::string object, std::optional<uint64_t> offset, std::string message,
        Kind kind = Kind::kInput);
  // A failure that concerns no particular file (e.g. a codec given bad arguments).
  explicit Error(std::string message, Kind kind = Kind::kInput);

  const std::string& path() const { return path_; }
  const std::string& object() const { return object_; }
  const std::optional<uint64_t>& offset() const { return offset_; }
  const std::string& message() const { return message_; }
  Kind kind() const { return kind_; }

  // Returns a copy with the path (and object, when this one has none) filled in; lets
  // low-level code throw without knowing the file name.
  Error with_context(const std::string& path, const std::string& object = {}) const;

 private:
  std::string path_, object_;
  std::optional<uint64_t> offset_;
  std::string message_;
  Kind kind_;
};

// A usage error (exit code 2): bad option values, unknown type names, empty selections.
[[noreturn]] void usage_error(std::string message);

}  // namespace gguf
