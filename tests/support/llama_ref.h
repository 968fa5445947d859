// Test support: llama.cpp itself (libllama from the npm package @node-llama-cpp/linux-x64, the
// same package as ggml's reference library), loaded with dlopen, so end-to-end tests can check
// that what the tools write loads in real llama.cpp and computes what it should.
// When it cannot be found, available() is false and such tests skip with reason() (or fail, with
// GGUF_REQUIRE_REFERENCES set: see ggml_ref.h).
#pragma once

#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "ggml_ref.h"

namespace gguf::testing {

class LlamaRef {
 public:
  // The process-wide instance; loads the libraries and the CPU backend on first use.
  static LlamaRef& get();

  bool available() const { return ok_; }
  const std::string& reason() const { return reason_; }

  struct Result {
    bool loaded = false;
    std::string log;            // llama.cpp's messages while loading (for failure reports)
    std::vector<float> logits;  // n_vocab logits after the last token
  };
  // Loads the model at path with llama.cpp's defaults (mmap, CPU), evaluates tokens in one
  // batch on one thread, and returns the logits of the last position.
  Result run(const std::string& path, const std::vector<int>& tokens) const;

  // llama.cpp's own quantizer (llama_model_quantize, what llama-quantize calls) on one thread:
  // ftype is a llama_ftype (2 = Q4_0, 7 = Q8_0, 15 = Q4_K_M, ...); pure gives every quantizable
  // tensor that ftype's type (llama-quantize --pure); allow_requantize lets it start from a
  // quantized file. imatrix, when given, is what llama-quantize --imatrix hands over: per
  // tensor name, the mean squared activations (n_mat x ne0, expert-major); overrides are the
  // metadata llama-quantize adds with it (kv_overrides: quantize.imatrix.file as a string, the
  // counts as integers). Returns whether it succeeded, with its messages in log.
  using Importance = std::unordered_map<std::string, std::vector<float>>;
  struct Override {
    std::string key;
    std::variant<std::string, int64_t> value;
  };
  bool quantize(const std::string& in, const std::string& out, int ftype, bool pure,
                bool allow_requantize, std::string& log, const Importance* imatrix = nullptr,
                const std::vector<Override>& overrides = {}) const;

 private:
  LlamaRef();
  bool ok_ = false;
  std::string reason_;
  void* ggml_ = nullptr;
  void* llama_ = nullptr;
};

#define GGUF_REQUIRE_LLAMA()                                                                 \
  do {                                                                                       \
    if (!::gguf::testing::LlamaRef::get().available())                                       \
      GGUF_MISSING_REFERENCE(                                                                \
          "llama.cpp library not available: " << ::gguf::testing::LlamaRef::get().reason()); \
  } while (0)

}  // namespace gguf::testing
