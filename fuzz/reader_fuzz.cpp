// libFuzzer target over the GGUF reader, the model built from it and check_model: any input
// may make them throw gguf::Error, nothing else may escape, crash or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "gguf/base/escape.h"
#include "gguf/format/file.h"
#include "gguf/format/metadata.h"
#include "gguf/format/model.h"
#include "gguf/ops/check.h"

namespace {

// Touches everything a tool would show, so the sanitizers see every byte that gets read.
size_t exercise(const gguf::GgufFile& f) {
  size_t sink = 0;
  for (const auto& kv : f.metadata().entries()) {
    sink += gguf::escape_for_terminal(kv.key).size() + gguf::utf8_or_escaped(kv.key).size();
    sink += gguf::format_value(kv.value, 0).size();
    sink += f.metadata().find(kv.key) != nullptr;
  }
  for (const auto& t : f.tensors()) {
    sink += gguf::tensor_object(t.name).size() + gguf::type_name(t.type_id).size();
    sink += f.find_tensor(t.name) != nullptr;
    try {
      const auto d = f.tensor_data(t);
      if (!d.empty()) sink += d.front() + d.back();
    } catch (const gguf::Error& e) {
      sink += e.message().size();
    }
  }
  return sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto source = gguf::memory_source(std::vector<uint8_t>(data, data + size), "fuzz.gguf");
  std::optional<gguf::Error> error;
  const auto file = gguf::GgufFile::parse_partial(source, error);
  volatile size_t sink = exercise(*file);
  try {
    const gguf::Model model = gguf::Model::from_files({file});
    gguf::CheckOptions options;
    options.threads = 1;
    options.chunk_bytes = 64;  // many chunks even for tiny inputs
    for (const auto& p : gguf::check_model(model, options))
      sink = sink + gguf::format_problem(p).size();
  } catch (const gguf::Error& e) {
    sink = sink + e.message().size();
  }
  // The strict parse must agree with the partial one about whether the input is sound.
  bool strict_ok = true;
  try {
    gguf::GgufFile::parse(source);
  } catch (const gguf::Error&) {
    strict_ok = false;
  }
  if (strict_ok == error.has_value()) __builtin_trap();
  (void)sink;
  return 0;
}
