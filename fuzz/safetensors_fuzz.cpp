// libFuzzer target over the safetensors reader and the packed-affine import: the header checks,
// packed_affine's checks, the plan, every payload the plan would write and the values it
// would prove. Any input may make them throw gguf::Error; nothing else may escape, crash or
// read out of bounds.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "gguf/base/error.h"
#include "gguf/inputs/safetensors.h"
#include "gguf/ops/affine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto source = gguf::memory_source(std::vector<uint8_t>(data, data + size), "fuzz.safetensors");
  volatile size_t sink = 0;
  std::optional<gguf::SafetensorsFile> file;
  try {
    file.emplace(gguf::SafetensorsFile::parse(source));
    for (const auto& t : file->tensors()) {
      const auto d = file->data(t);
      if (!d.empty()) sink = sink + d.front() + d.back();
    }
  } catch (const gguf::Error& e) {
    sink = sink + e.message().size();
    return 0;
  }
  // Each pass on its own: a refusal of the default types (6-bit codes, a group of 16) must not
  // keep the f32 pass, which takes every width and group, from running.
  for (const auto& type : {std::optional<gguf::GgmlType>(), std::optional(gguf::GgmlType::F32)}) {
    try {
      const gguf::ImportResult r = gguf::import_safetensors(*file, {type});
      // Produce every payload of a plan that stays small (the input's size bounds packed
      // tensors' element counts only through their codes, so a 1-bit tensor can be 8x larger).
      for (const auto& t : r.plan.tensors) {
        if (t.bytes > (uint64_t{1} << 22)) continue;
        std::vector<uint8_t> out(t.bytes);
        if (const auto* p = std::get_if<gguf::Producer>(&t.source)) {
          p->fill(0, out);
          if (!out.empty()) sink = sink + out.front() + out.back();
        }
      }
      for (const auto& p : r.packed) {
        const uint64_t n = p.rows * p.cols;
        if (n > (uint64_t{1} << 20)) continue;
        std::vector<float> v(n);
        gguf::affine_values(*file, p, 0, n, v);
        if (!v.empty()) sink = sink + static_cast<size_t>(v.back() == v.back());
      }
    } catch (const gguf::Error& e) {
      sink = sink + e.message().size();
    }
  }
  (void)sink;
  return 0;
}
