// The switch of the codecs' AVX-512 kernels (codec_simd.h): on where the CPU has them, unless
// GGUF_CODEC_SCALAR is set (to anything but "0") or a test turns them off.
#include "codecs/codec_simd.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace gguf::detail {
namespace {

bool cpu_has_avx512() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

bool scalar_requested() {
  const char* v = std::getenv("GGUF_CODEC_SCALAR");
  return v && *v && std::strcmp(v, "0") != 0;
}

std::atomic<bool>& enabled() {
  static std::atomic<bool> on{cpu_has_avx512() && !scalar_requested()};
  return on;
}

}  // namespace

bool codec_avx512() { return enabled().load(std::memory_order_relaxed); }

void set_codec_avx512(bool on) { enabled().store(on && cpu_has_avx512()); }

}  // namespace gguf::detail
