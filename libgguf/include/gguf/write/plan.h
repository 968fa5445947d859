// An output file described as data: metadata plus ordered tensors, each with a source of its
// payload. Splice and requant build plans; the writer (writer.h) is the only thing that
// turns a plan into bytes on disk.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "gguf/format/metadata.h"
#include "gguf/io/source.h"

namespace gguf {

// Copy bytes [offset, offset + PlanTensor::bytes) of an open source (kernel-side when possible).
struct FileRange {
  std::shared_ptr<const ByteSource> source;
  uint64_t offset = 0;
};
// Bytes held in memory (exactly PlanTensor::bytes of them).
struct MemoryBytes {
  std::shared_ptr<const std::vector<uint8_t>> data;
};
// Produces the payload piece by piece: fill(offset, out) writes payload bytes
// [offset, offset + out.size()) into out. Called with increasing, contiguous offsets; out
// sizes are chunk-sized, so memory stays bounded whatever the tensor size. May throw.
struct Producer {
  std::function<void(uint64_t offset, std::span<uint8_t> out)> fill;
  // Preferred granularity of out (e.g. a whole number of rows); 0 = any.
  uint64_t chunk_bytes = 0;
};
using PayloadSource = std::variant<FileRange, MemoryBytes, Producer>;

struct PlanTensor {
  std::string name;
  uint32_t type_id = 0;
  std::vector<int64_t> shape;  // ggml ne order
  uint64_t bytes = 0;          // payload size; must equal the size the type and shape imply
  PayloadSource source;
};

struct Plan {
  Metadata metadata;  // general.alignment, if present, must be u32 and a power of two
  uint32_t version = 3;
  std::vector<PlanTensor> tensors;
};

// The payload size the type and shape imply; throws gguf::Error naming the tensor otherwise.
uint64_t expected_bytes(const PlanTensor& t);

// TENSOR_ALIGNMENT of ggml's CPU backend: llama.cpp asserts it of tensor data it maps.
inline constexpr uint32_t kGgmlTensorAlignment = 32;

// A general.alignment under 32 lets tensor data start off a 32-byte boundary, and llama.cpp
// aborts on that when it memory-maps the file (ggml's CPU backend asserts it). Tools that
// write a new file from an input's metadata raise it to 32 and say so: returns what to say, or
// nothing when the metadata needs no change (no key, 32 or more, or a value the writer refuses
// anyway).
std::optional<std::string> raise_small_alignment(Metadata& metadata);

// --align N of the tools that write files: a power of two from 32 (llama.cpp's minimum) to
// 2^31 (general.alignment is a u32); a usage error naming the option otherwise.
uint32_t check_align_option(uint64_t n);
// Sets general.alignment (the key ggml reads as that, even one spelled with a NUL after it).
void set_alignment(Metadata& metadata, uint32_t n);

}  // namespace gguf
