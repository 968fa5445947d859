// Internal: whether the codecs' hand-written AVX-512 kernels run. Each has a portable twin
// giving the same bytes; tests run both (set_codec_avx512(false), or GGUF_CODEC_SCALAR=1 in the
// environment for a whole process).
#pragma once

// Every function that touches a zmm register carries this target (GCC and clang alike).
#define GGUF_CODEC_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
// GCC 12's avx512fintrin.h trips its uninitialized-use warnings (_mm512_undefined_* as the
// unused merge source of reductions and conversions): kernel files silence them around
// their code.
#if defined(__GNUC__) && !defined(__clang__)
#define GGUF_AVX512_WARNINGS_OFF                                                       \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define GGUF_AVX512_WARNINGS_ON _Pragma("GCC diagnostic pop")
#else
#define GGUF_AVX512_WARNINGS_OFF
#define GGUF_AVX512_WARNINGS_ON
#endif

namespace gguf::detail {

// True when the CPU has AVX-512 F, BW, DQ and VL and nothing turned the kernels off.
bool codec_avx512();
// Turns the kernels off (false) or back on (true: only where the CPU has them).
void set_codec_avx512(bool on);

}  // namespace gguf::detail
