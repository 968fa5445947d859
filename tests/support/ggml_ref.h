// Test support: ggml's own library (libggml-base.so from the npm package
// @node-llama-cpp/linux-x64@3.21.1), loaded with dlopen so tests can compare against it.
// When it cannot be found, available() is false and conformance tests skip with reason(), or
// fail when GGUF_REQUIRE_REFERENCES is set (CI sets it: a missing judge must not pass unseen).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gguf::testing {

class GgmlRef {
 public:
  // The process-wide instance; loads the library on first use.
  static GgmlRef& get();

  bool available() const { return handle_ != nullptr; }
  const std::string& reason() const { return reason_; }
  const std::string& path() const { return path_; }

  // ggml_quantize_chunk(type, src, dst, start, nrows, n_per_row, imatrix); returns bytes.
  size_t quantize_chunk(int type, const float* src, void* dst, int64_t start, int64_t nrows,
                        int64_t n_per_row, const float* imatrix) const;
  // dequantize_row_<name> / ggml_fp16_to_fp32_row / ggml_bf16_to_fp32_row; false if ggml has
  // no row decoder for this type.
  bool dequantize_row(int type, const void* src, float* dst, int64_t n) const;
  // quantize_row_<name>_ref when exported (q8_1, q8_K, ...); false otherwise.
  bool quantize_row_ref(int type, const float* src, void* dst, int64_t n) const;
  bool requires_imatrix(int type) const;
  const char* type_name(int type) const;
  size_t type_size(int type) const;
  int64_t blck_size(int type) const;

  // ggml's gguf_init_from_file accepts the file at path: its header, and with load_data also
  // every tensor's data, read into a ggml context as a model load does (see GgmlGguf).
  bool gguf_accepts(const std::string& path, bool load_data = false) const;

  // Raw symbol lookup for tests that need more (e.g. the gguf_* reader API).
  void* symbol(const char* name) const;
  // Binds the function pointer fn to symbol name; when it is missing and required, appends
  // " name" to missing (so a test can skip naming every absent symbol).
  template <class F>
  void bind(F& fn, const char* name, std::string& missing, bool required = true) const {
    fn = reinterpret_cast<F>(symbol(name));
    if (!fn && required) missing += std::string(" ") + name;
  }

 private:
  GgmlRef();
  void* handle_ = nullptr;
  std::string path_, reason_;
};

// A GGUF file as ggml's own reader opens it (gguf_init_from_file), freed at scope exit: the
// one way tests ask ggml whether it accepts a file. ctx() is null when ggml refused it (or is
// unavailable); with load_data ggml also reads every tensor's data, into data_ctx().
class GgmlGguf {
 public:
  explicit GgmlGguf(const std::string& path, bool load_data = false);
  ~GgmlGguf();
  GgmlGguf(const GgmlGguf&) = delete;
  GgmlGguf& operator=(const GgmlGguf&) = delete;

  bool accepted() const { return ctx_ != nullptr; }
  void* ctx() const { return ctx_; }            // a gguf_context*, for the gguf_get_* API
  void* data_ctx() const { return data_ctx_; }  // a ggml_context*, when data was loaded

 private:
  void* ctx_ = nullptr;
  void* data_ctx_ = nullptr;
};

// Whether the environment asks for every reference implementation (ggml, llama.cpp, Hugging
// Face's parser) to be present: GGUF_REQUIRE_REFERENCES set and not "0". CI sets it.
bool references_required();

// Ends the current GoogleTest because a reference implementation is missing (why: a streamable
// reason): a skip with the reason, or a failure when references_required().
#define GGUF_MISSING_REFERENCE(why)                                                       \
  do {                                                                                    \
    if (::gguf::testing::references_required())                                           \
      GTEST_FAIL() << why << " (GGUF_REQUIRE_REFERENCES is set: this test may not skip)"; \
    GTEST_SKIP() << why;                                                                  \
  } while (0)

// Skips (or fails, see above) the current GoogleTest when ggml is unavailable.
#define GGUF_REQUIRE_GGML()                                                                      \
  do {                                                                                           \
    if (!::gguf::testing::GgmlRef::get().available())                                            \
      GGUF_MISSING_REFERENCE(                                                                    \
          "ggml reference library not available: " << ::gguf::testing::GgmlRef::get().reason()); \
  } while (0)

}  // namespace gguf::testing
