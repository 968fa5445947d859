// Formatting of gguf::Error: "'file': tensor 'x': at byte 123: message".
#include "gguf/base/error.h"

#include <fmt/format.h>

#include "gguf/base/escape.h"

namespace gguf {
namespace {

std::string render(const std::string& path, const std::string& object,
                   const std::optional<uint64_t>& offset, const std::string& message) {
  std::string out;
  if (!path.empty()) out += fmt::format("{}: ", escape_for_terminal(path));
  if (!object.empty()) out += fmt::format("{}: ", object);
  if (offset) out += fmt::format("at byte {}: ", *offset);
  out += message;
  return out;
}

}  // namespace

Error::Error(std::string path, std::string object, std::optional<uint64_t> offset,
             std::string message, Kind kind)
    : std::runtime_error(render(path, object, offset, message)),
      path_(std::move(path)),
      object_(std::move(object)),
      offset_(offset),
      message_(std::move(message)),
      kind_(kind) {}

Error::Error(std::string message, Kind kind)
    : Error({}, {}, std::nullopt, std::move(message), kind) {}

Error Error::with_context(const std::string& path, const std::string& object) const {
  return Error(path_.empty() ? path : path_, object_.empty() ? object : object_, offset_, message_,
               kind_);
}

void usage_error(std::string message) { throw Error(std::move(message), Error::Kind::kUsage); }

}  // namespace gguf
