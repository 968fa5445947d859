// The safetensors reader: what it reads, one test per malformed case with its exact message, and
// damaged files through the packed-affine import.
#include "gguf/inputs/safetensors.h"

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "affine_fixture.h"
#include "gguf/base/error.h"
#include "gguf/io/source.h"
#include "gguf/ops/affine.h"

namespace gguf {
namespace {

using testing::AffineFile;
using testing::parse_bytes;

// Header text (padded as given) after its 8-byte length, then data.
std::vector<uint8_t> raw_file(const std::string& header, const std::vector<uint8_t>& data = {},
                              std::optional<uint64_t> length = std::nullopt) {
  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + data.size());
  const uint64_t n = length.value_or(header.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    SafetensorsFile::parse(memory_source(bytes, "m.safetensors"));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- the safetensors reader -------------------------------------------------------------

TEST(safetensors, reads_tensors_metadata_and_ranges) {
  std::vector<SafetensorsEntry> e = {{"b", "F16", {2, 3}, std::vector<uint8_t>(12, 1)},
                                     {"a", "F32", {4}, std::vector<uint8_t>(16, 2)},
                                     {"empty", "I64", {0, 5}, {}}};
  const auto bytes = serialize_safetensors(e, {{"format", "pt"}, {"k", "v"}});
  const auto f = parse_bytes(bytes);
  ASSERT_EQ(f.tensors().size(), 3u);
  // In the order of their data.
  EXPECT_EQ(f.tensors()[0].name, "b");
  EXPECT_EQ(f.tensors()[1].name, "a");
  const auto* a = f.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, "F32");
  EXPECT_EQ(a->shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(a->n_elements, 4u);
  EXPECT_EQ(a->end - a->begin, 16u);
  EXPECT_EQ(f.data(*a)[0], 2);
  EXPECT_EQ(f.find("empty")->n_elements, 0u);
  EXPECT_EQ(f.find("zzz"), nullptr);
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(*f.metadata_value("format"), "pt");
  EXPECT_EQ(f.metadata_value("nope"), nullptr);
  EXPECT_TRUE(SafetensorsFile::sniff(*memory_source(bytes, "x")));
  EXPECT_EQ((f.header_bytes() + 8) % 8, 0u);  // padded as the reference library pads
}

// An empty tensor at the offset where another begins (the reference library sorts by begin,
// then end): accepted whichever the header lists first.
TEST(safetensors, empty_tensor_where_another_begins) {
  for (
      const char* h :
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "z": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})",
       R"({"z": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]}, "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})"}) {
    const auto f = parse_bytes(raw_file(h, std::vector<uint8_t>(8, 0)));
    ASSERT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.tensors()[0].name, "z");
    EXPECT_EQ(f.find("z")->n_elements, 0u);
  }
}

TEST(safetensors, sniff_tells_gguf_and_junk_apart) {
  std::vector<uint8_t> gguf = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_FALSE(SafetensorsFile::sniff(*memory_source(gguf, "x")));
  EXPECT_FALSE(SafetensorsFile::sniff(*memory_source({1, 2, 3}, "x")));
  EXPECT_FALSE(SafetensorsFile::sniff(*memory_source(raw_file("[]  "), "x")));
  EXPECT_TRUE(SafetensorsFile::sniff(*memory_source(raw_file("{}"), "x")));
}

TEST(safetensors_malformed, shorter_than_the_length) {
  EXPECT_EQ(parse_error({1, 2, 3}),
            "m.safetensors: at byte 0: file is 3 bytes long: a safetensors file starts with an "
            "8-byte header length");
}

TEST(safetensors_malformed, header_over_the_limit) {
  EXPECT_EQ(parse_error(raw_file("{}", {}, 100'000'001)),
            "m.safetensors: at byte 0: safetensors header length 100000001 is over the format's "
            "limit of 100000000 bytes");
}

TEST(safetensors_malformed, header_past_eof) {
  EXPECT_EQ(parse_error(raw_file("{}", {}, 50)),
            "m.safetensors: at byte 0: safetensors header length 50 runs past the end of the file "
            "(2 bytes after the length)");
}

TEST(safetensors_malformed, header_not_an_object) {
  EXPECT_EQ(parse_error(raw_file("[1, 2]")),
            "m.safetensors: at byte 8: safetensors header does not start with '{'");
  EXPECT_EQ(parse_error(raw_file("")),
            "m.safetensors: at byte 8: safetensors header does not start with '{'");
}

TEST(safetensors_malformed, header_not_json) {
  EXPECT_EQ(parse_error(raw_file("{\"a\": }")),
            "m.safetensors: at byte 14: safetensors header is not valid JSON: syntax error while "
            "parsing value - unexpected '}'; expected '[', '{', or a literal");
}

TEST(safetensors_malformed, header_not_utf8) {
  EXPECT_EQ(parse_error(raw_file("{\"\xff\": 1}")),
            "m.safetensors: at byte 8: safetensors header is not valid UTF-8");
}

TEST(safetensors_malformed, nesting_too_deep) {
  EXPECT_EQ(parse_error(raw_file("{\"a\": " + std::string(100000, '[') + "}")),
            "m.safetensors: at byte 8: safetensors header nests deeper than 8 levels");
}

TEST(safetensors_malformed, duplicate_key) {
  const std::string t = R"({"dtype": "U8", "shape": [0], "data_offsets": [0, 0]})";
  EXPECT_EQ(parse_error(raw_file("{\"x\": " + t + ", \"x\": " + t + "}")),
            "m.safetensors: at byte 8: safetensors header has the key \"x\" twice in one object");
}

TEST(safetensors_malformed, metadata_not_strings) {
  EXPECT_EQ(parse_error(raw_file(R"({"__metadata__": [1]})")),
            "m.safetensors: key '__metadata__': at byte 9: expected an object of strings, found "
            "array");
  EXPECT_EQ(parse_error(raw_file(R"({"__metadata__": {"k": 5}})")),
            "m.safetensors: key 'k': at byte 26: __metadata__ values must be strings, found "
            "number");
}

TEST(safetensors_malformed, tensor_entry_not_an_object) {
  EXPECT_EQ(parse_error(raw_file(R"({"w": 3})")),
            "m.safetensors: tensor 'w': at byte 9: expected an object, found number");
}

TEST(safetensors_malformed, missing_or_unknown_dtype) {
  EXPECT_EQ(parse_error(raw_file(R"({"w": {"shape": [1], "data_offsets": [0, 1]}})", {0})),
            "m.safetensors: tensor 'w': at byte 9: expected \"dtype\", a string");
  EXPECT_EQ(
      parse_error(raw_file(R"({"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}})", {0})),
      "m.safetensors: tensor 'w': at byte 9: unknown dtype \"Q4\" (expected one of BOOL, U8, I8, "
      "F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64)");
}

TEST(safetensors_malformed, bad_shape) {
  EXPECT_EQ(parse_error(raw_file(R"({"w": {"dtype": "U8", "data_offsets": [0, 1]}})", {0})),
            "m.safetensors: tensor 'w': at byte 9: expected \"shape\", an array of non-negative "
            "integers");
  EXPECT_EQ(
      parse_error(
          raw_file(R"({"w": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}})", {0})),
      "m.safetensors: tensor 'w': at byte 9: shape -1 is not an array of non-negative integers");
  EXPECT_EQ(
      parse_error(
          raw_file(R"({"w": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 1]}})", {0})),
      "m.safetensors: tensor 'w': at byte 9: shape 1.5 is not an array of non-negative integers");
}

TEST(safetensors_malformed, shape_overflows) {
  EXPECT_EQ(
      parse_error(raw_file(
          R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})")),
      "m.safetensors: tensor 'w': at byte 9: shape [4294967296,4294967296] holds more bytes than "
      "2^64");
  EXPECT_EQ(
      parse_error(raw_file(
          R"({"w": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}})")),
      "m.safetensors: tensor 'w': at byte 9: shape [4611686018427387904] holds more bytes "
      "than 2^64");
  // No elements, but read last dimension first (as GGUF will hold it) the count passes int64
  // before the zero: ggml would refuse the GGUF written from it.
  EXPECT_EQ(parse_error(raw_file(
                R"({"w": {"dtype": "U8", "shape": [0, 4611686018427387904, 4611686018427387904],)"
                R"( "data_offsets": [0, 0]}})")),
            "m.safetensors: tensor 'w': at byte 9: shape "
            "[0,4611686018427387904,4611686018427387904]: in GGUF's order (the last dimension "
            "first) the element count passes 2^63 - 1 before the zero dimension");
  // Without a zero: 2^63 one-byte elements fit in 2^64 bytes, but not in a GGUF tensor.
  EXPECT_EQ(parse_error(raw_file(R"({"w": {"dtype": "U8", "shape": [4611686018427387904, 2],)"
                                 R"( "data_offsets": [0, 0]}})")),
            "m.safetensors: tensor 'w': at byte 9: shape [4611686018427387904,2] holds "
            "9223372036854775808 elements; a GGUF tensor holds at most 2^63 - 1");
}

TEST(safetensors_malformed, bad_data_offsets) {
  EXPECT_EQ(parse_error(raw_file(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0]}})")),
            "m.safetensors: tensor 'w': at byte 9: expected \"data_offsets\", an array of two "
            "non-negative integers");
  EXPECT_EQ(
      parse_error(raw_file(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 0]}})", {0})),
      "m.safetensors: tensor 'w': at byte 9: data_offsets [1, 0] end before they begin");
}

TEST(safetensors_malformed, data_past_eof) {
  EXPECT_EQ(
      parse_error(raw_file(R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})", {0})),
      "m.safetensors: tensor 'w': at byte 9: data_offsets [0, 4] run past the end of the file "
      "(the data section holds 1 bytes, from byte 68)");
}

TEST(safetensors_malformed, size_disagrees_with_shape) {
  EXPECT_EQ(parse_error(raw_file(R"({"w": {"dtype": "F16", "shape": [3], "data_offsets": [0, 4]}})",
                                 {0, 0, 0, 0})),
            "m.safetensors: tensor 'w': at byte 9: data_offsets [0, 4] hold 4 bytes, but 3 F16 of "
            "shape [3] take 6");
}

TEST(safetensors_malformed, gap_or_overlap) {
  EXPECT_EQ(
      parse_error(raw_file(
          R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}, "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}})",
          {0, 0, 0})),
      "m.safetensors: tensor 'b': at byte 69: data begins at byte 1 of the data section, but "
      "the previous tensor ends at byte 2 (the ranges must follow each other with no gap or "
      "overlap)");
  EXPECT_EQ(parse_error(raw_file(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}})",
                                 {0, 0, 0})),
            "m.safetensors: tensor 'a': at byte 9: data begins at byte 1 of the data section, but "
            "the first tensor's must begin at byte 0 (the ranges must follow each other with no "
            "gap or overlap)");
}

TEST(safetensors_malformed, bytes_after_the_last_tensor) {
  EXPECT_EQ(parse_error(raw_file(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})",
                                 {0, 0, 9})),
            "m.safetensors: at byte 70: 1 bytes after the last tensor's data: the data section "
            "holds 3 bytes, its tensors 2");
}

TEST(safetensors_malformed, nul_in_the_header) {
  // A parser reading up to the NUL would accept this header and ignore what follows it.
  const std::string h =
      std::string(R"({"a": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}})") +
      std::string(1, '\0') + " {{{ not json";
  EXPECT_EQ(parse_error(raw_file(h)),
            "m.safetensors: at byte 68: safetensors header holds a NUL byte");
}

// Errors point at the tensor's own entry even when its name is also a field name used
// earlier in the header.
TEST(safetensors_malformed, offsets_point_at_the_entry_itself) {
  EXPECT_EQ(
      parse_error(raw_file(
          R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "dtype": {"dtype": "U9", "shape": [1], "data_offsets": [1, 2]}})",
          {0, 0})),
      "m.safetensors: tensor 'dtype': at byte 69: unknown dtype \"U9\" (expected one of "
      "BOOL, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, F64, I64, "
      "U64)");
}

// Random bytes and truncations of a valid file: an error or a file, never a crash.
TEST(safetensors_malformed, truncations_and_flips_never_crash) {
  AffineFile af(7);
  af.add_packed("w", 3, 32, {4, 64});
  af.add_plain("n", "F32", {64});
  const auto good = af.bytes();
  std::mt19937 rng(11);
  for (size_t cut = 0; cut < good.size(); cut += 7) {
    std::vector<uint8_t> b(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut));
    EXPECT_NE(parse_error(b), "(no error)") << cut;
  }
  for (int i = 0; i < 2000; ++i) {
    auto b = good;
    b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    try {
      const auto f = parse_bytes(b);
      const auto packed = packed_affine_tensors(f);
      (void)import_safetensors(f, {});
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace gguf
