// io/cursor.h: the bounded cursor the GGUF, imatrix and safetensors parsers read through.
#include "io/cursor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/base/error.h"

namespace gguf {
namespace {

std::shared_ptr<const ByteSource> bytes(std::vector<uint8_t> b) {
  return memory_source(std::move(b), "c.bin");
}

using Got = std::pair<std::string, uint64_t>;

// Runs f, which must throw; returns the error as the tools print it, and its offset.
template <class F>
Got failure(F f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.object() + ": " + e.message() + " @ " + e.path(), e.offset().value_or(~0ull)};
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(cursor, reads_little_endian_integers_front_to_back) {
  const auto src = bytes({0x01, 0x02, 0x03, 0x04, 0xFE, 0xFF, 0xFF, 0xFF, 0x2A});
  Cursor c(*src);
  EXPECT_EQ(c.read<uint32_t>("a"), 0x04030201u);
  EXPECT_EQ(c.read<int32_t>("b"), -2);
  EXPECT_EQ(c.pos(), 8u);
  EXPECT_EQ(c.left(), 1u);
  EXPECT_EQ(c.take(1, "c")[0], 0x2A);
  EXPECT_EQ(c.left(), 0u);
  EXPECT_TRUE(c.take(0, "nothing").empty());
}

// A short read fails where it would start, naming what was read and the object, and moves
// nothing.
TEST(cursor, refuses_reads_past_the_end_naming_file_object_offset_and_need) {
  const auto src = bytes({1, 2, 3, 4, 5, 6});
  Cursor c(*src);
  c.set_object("tensor 'w'");
  (void)c.read<uint32_t>("n_dims");
  EXPECT_EQ(failure([&] { (void)c.read<uint64_t>("dimension"); }),
            Got("tensor 'w': dimension runs past end of file (needs 8 bytes, 2 left) @ c.bin", 4));
  EXPECT_EQ(failure([&] { (void)c.take(3, "values"); }),
            Got("tensor 'w': values of 3 bytes runs past end of file (2 left) @ c.bin", 4));
  EXPECT_EQ(failure([&] { (void)c.take(UINT64_MAX, "values"); }).second, 4u);
  EXPECT_EQ(c.pos(), 4u);
}

// GGUF's strings: the length is checked against ggml's cap and against what remains before
// a byte is copied; both failures point at the length.
TEST(cursor, reads_strings_with_checked_lengths) {
  std::vector<uint8_t> b = {2, 0, 0, 0, 0, 0, 0, 0, 'h', 'i', 9, 0, 0, 0, 0, 0, 0, 0, 'x'};
  const auto src = bytes(b);
  Cursor c(*src);
  EXPECT_EQ(c.read_string("key", 100), "hi");
  EXPECT_EQ(failure([&] { (void)c.read_string("key", 8); }),
            Got(": key length 9 exceeds ggml's limit of 8 bytes @ c.bin", 10));
  Cursor d(*src);
  (void)d.read_string("key", 100);
  EXPECT_EQ(failure([&] { (void)d.read_string("key", 100); }),
            Got(": key length 9 runs past end of file (1 bytes left) @ c.bin", 10));
}

TEST(cursor, an_empty_source_has_nothing_to_read) {
  const auto src = bytes({});
  Cursor c(*src);
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(failure([&] { (void)c.read<uint8_t>("magic"); }).first,
            ": magic runs past end of file (needs 1 bytes, 0 left) @ c.bin");
}

}  // namespace
}  // namespace gguf
