// open_input: GGUF or safetensors, by the path (a checkpoint folder or index) or the first bytes.
#include "gguf/inputs/input.h"

#include <cstring>
#include <filesystem>
#include <system_error>

#include "gguf/inputs/safetensors.h"

namespace gguf {

Input open_input(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec) || path.ends_with(".json"))
    return {nullptr, InputFormat::kSafetensors};
  Input in{open_file_source(path)};
  const ByteSource& s = *in.source;
  const bool gguf_magic = s.size() >= 4 && std::memcmp(s.bytes(0, 4).data(), "GGUF", 4) == 0;
  if (!gguf_magic && (SafetensorsFile::sniff(s) || path.ends_with(".safetensors")))
    in.format = InputFormat::kSafetensors;
  return in;
}

}  // namespace gguf
