// The GGUF reader against fixtures from the builder: one test per defect with the exact message,
// round trips of every value type, layouts, partial parses and files larger than 4 GiB.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "cli_run.h"
#include "gguf/file.h"
#include "gguf_builder.h"

namespace gguf {
namespace {

using testing::Defect;
using testing::DefectKind;
using testing::GgufBuilder;
using testing::Layout;
using testing::Tag;

constexpr const char* kName = "mem.gguf";
constexpr uint64_t kHuge = uint64_t{1} << 40;

// Keys: 0 general.architecture (string), 1 llama.block_count (u32), 2 tokenizer.ggml.tokens
// (string array), 3 some.ints (i32 array). Tensors: 0 f32 [8, 4] (128 bytes), 1 q4_0 [64, 2]
// (72 bytes), 2 f16 [16] (32 bytes, ends the file without padding).
GgufBuilder base() {
  GgufBuilder b;
  b.string("general.architecture", "llama")
      .u32("llama.block_count", 2)
      .string_array("tokenizer.ggml.tokens", {"a", "bc"})
      .array("some.ints", Tag::kI32, std::vector<int32_t>{1, -2, 3})
      .tensor("token_embd.weight", 0, {8, 4})
      .tensor("blk.0.attn_q.weight", 2, {64, 2})
      .tensor("output.weight", 1, {16});
  return b;
}

GgufBuilder with(Defect d) { return base().defect(d); }

std::shared_ptr<const GgufFile> parse(const GgufBuilder& b) {
  return GgufFile::parse(memory_source(b.build(), kName));
}

std::string error_of(const GgufBuilder& b) {
  try {
    parse(b);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Offset of the first byte after a key's name: where its value type is.
uint64_t after_key(const Layout& l, size_t kv, std::string_view key) {
  return l.kv_offsets[kv] + 8 + key.size();
}
// Offset of a tensor info's n_dims field.
uint64_t after_name(const Layout& l, size_t t, std::string_view name) {
  return l.tensor_info_offsets[t] + 8 + name.size();
}

TEST(reader, builder_lays_out_base_canonically) {
  const Layout l = base().layout();
  // 24-byte header; key 0 = 8 + 20 (name) + 4 (type) + 8 + 5 (value) = 45 bytes.
  ASSERT_EQ(l.kv_offsets.size(), 4u);
  EXPECT_EQ(l.kv_offsets[0], 24u);
  EXPECT_EQ(l.kv_offsets[1], 69u);
  EXPECT_EQ(l.tensor_offsets, (std::vector<uint64_t>{0, 128, 224}));
  EXPECT_EQ(l.data_offset % 32, 0u);
  EXPECT_EQ(l.file_size, l.data_offset + 256);
}

TEST(reader, parses_base) {
  const auto f = parse(base());
  const Layout l = base().layout();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->header_end(), l.header_end);
  EXPECT_EQ(f->data_offset(), l.data_offset);
  ASSERT_EQ(f->metadata().size(), 4u);
  EXPECT_EQ(f->metadata().get_string("general.architecture"), "llama");
  ASSERT_EQ(f->tensors().size(), 3u);
  const TensorInfo& q = f->tensors()[1];
  EXPECT_EQ(q.name, "blk.0.attn_q.weight");
  EXPECT_EQ(q.type_id, 2u);
  EXPECT_EQ(q.shape, (std::vector<int64_t>{64, 2}));
  EXPECT_EQ(q.n_elements, 128u);
  EXPECT_EQ(q.bytes, 72u);
  EXPECT_EQ(q.offset, 128u);
  EXPECT_EQ(q.info_offset, l.tensor_info_offsets[1]);
  const auto data = f->tensor_data(q);
  EXPECT_EQ(std::vector<uint8_t>(data.begin(), data.end()), testing::pattern_bytes(72, 2));
}

// ---- header ----

TEST(reader, rejects_bad_magic) {
  EXPECT_EQ(error_of(with({DefectKind::kBadMagic})),
            "mem.gguf: at byte 0: not a GGUF file (magic 'GGML', expected 'GGUF')");
}

TEST(reader, rejects_version_1) {
  EXPECT_EQ(error_of(with({DefectKind::kVersion, 1})),
            "mem.gguf: at byte 4: GGUF version 1 is not supported (only versions 2 and 3)");
}

TEST(reader, rejects_versions_0_and_4) {
  EXPECT_EQ(error_of(with({DefectKind::kVersion, 0})),
            "mem.gguf: at byte 4: unsupported GGUF version 0 (only versions 2 and 3)");
  EXPECT_EQ(error_of(with({DefectKind::kVersion, 4})),
            "mem.gguf: at byte 4: unsupported GGUF version 4 (only versions 2 and 3)");
}

TEST(reader, rejects_big_endian_version) {
  EXPECT_EQ(error_of(with({DefectKind::kBigEndian})),
            "mem.gguf: at byte 4: big-endian GGUF files are not supported (version field "
            "0x03000000)");
}

TEST(reader, rejects_file_shorter_than_header) {
  EXPECT_EQ(error_of(with({DefectKind::kTruncate, 10})),
            "mem.gguf: at byte 0: file too small for a GGUF header (needs 24 bytes, has 10)");
  EXPECT_EQ(error_of(with({DefectKind::kTruncate, 0})),
            "mem.gguf: at byte 0: file too small for a GGUF header (needs 24 bytes, has 0)");
}

TEST(reader, rejects_huge_tensor_count) {
  const uint64_t left = base().layout().file_size - 24;
  EXPECT_EQ(error_of(with({DefectKind::kHugeTensorCount, kHuge})),
            fmt::format("mem.gguf: at byte 8: tensor count 1099511627776 cannot fit in the file "
                        "({} bytes left)",
                        left));
  EXPECT_NE(error_of(with({DefectKind::kHugeTensorCount, ~uint64_t{0}})), "(no error)");
}

TEST(reader, rejects_huge_kv_count) {
  const uint64_t left = base().layout().file_size - 24;
  EXPECT_EQ(error_of(with({DefectKind::kHugeKvCount, ~uint64_t{0}})),
            fmt::format("mem.gguf: at byte 16: key/value count 18446744073709551615 cannot fit "
                        "in the file ({} bytes left)",
                        left));
}

// ---- keys and values ----

TEST(reader, rejects_key_length_past_eof) {
  const auto b = with({DefectKind::kKeyPastEof, 1});
  const Layout l = b.layout();
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: key #1: at byte {}: key length 1099511627776 "
                                     "runs past end of file ({} bytes left)",
                                     l.kv_offsets[1], l.file_size - l.kv_offsets[1] - 8));
}

TEST(reader, rejects_string_past_eof) {
  const auto b = with({DefectKind::kStringPastEof, 0});
  const Layout l = b.layout();
  const uint64_t at = after_key(l, 0, "general.architecture") + 4;
  EXPECT_EQ(error_of(b),
            fmt::format("mem.gguf: key 'general.architecture': at byte {}: string length "
                        "1099511627776 runs past end of file ({} bytes left)",
                        at, l.file_size - at - 8));
}

TEST(reader, rejects_string_array_element_past_eof) {
  const auto b = with({DefectKind::kStringPastEof, 2});
  const Layout l = b.layout();
  const uint64_t at = after_key(l, 2, "tokenizer.ggml.tokens") + 4 + 4 + 8;
  EXPECT_EQ(error_of(b),
            fmt::format("mem.gguf: key 'tokenizer.ggml.tokens': at byte {}: string length "
                        "1099511627776 runs past end of file ({} bytes left)",
                        at, l.file_size - at - 8));
}

TEST(reader, rejects_empty_key) {
  const auto b = with({DefectKind::kEmptyKey, 1});
  EXPECT_EQ(error_of(b), "mem.gguf: key #1: at byte 69: empty key");
}

TEST(reader, rejects_duplicate_key) {
  const auto b = with({DefectKind::kDuplicateKey, 2});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: key 'general.architecture': at byte {}: duplicate "
                                     "key (first defined at byte 24)",
                                     b.layout().kv_offsets[2]));
}

TEST(reader, rejects_unknown_value_type) {
  const auto b = with({DefectKind::kUnknownValueType, 1});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: key 'llama.block_count': at byte {}: unknown "
                                     "value type 13 (valid types are 0-12)",
                                     after_key(b.layout(), 1, "llama.block_count")));
}

TEST(reader, rejects_unknown_array_element_type) {
  GgufBuilder b;
  b.raw_kv("a", 9, {13, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7});
  EXPECT_EQ(error_of(b),
            "mem.gguf: key 'a': at byte 37: unknown value type 13 (valid types are 0-12)");
}

TEST(reader, rejects_nested_array) {
  const auto b = with({DefectKind::kNestedArray, 3});
  EXPECT_EQ(error_of(b),
            fmt::format("mem.gguf: key 'some.ints': at byte {}: nested arrays are not supported",
                        after_key(b.layout(), 3, "some.ints") + 4));
}

TEST(reader, rejects_array_count_past_eof) {
  const auto b = with({DefectKind::kArrayCountPastEof, 3});
  const Layout l = b.layout();
  const uint64_t at = after_key(l, 3, "some.ints") + 8;
  EXPECT_EQ(error_of(b),
            fmt::format("mem.gguf: key 'some.ints': at byte {}: array of 1099511627776 i32 "
                        "elements runs past end of file ({} bytes left)",
                        at, l.file_size - at - 8));
}

TEST(reader, rejects_string_array_count_past_eof) {
  const auto b = with({DefectKind::kArrayCountPastEof, 2});
  const Layout l = b.layout();
  const uint64_t at = after_key(l, 2, "tokenizer.ggml.tokens") + 8;
  EXPECT_EQ(error_of(b),
            fmt::format("mem.gguf: key 'tokenizer.ggml.tokens': at byte {}: array of "
                        "1099511627776 string elements runs past end of file ({} bytes left)",
                        at, l.file_size - at - 8));
}

TEST(reader, rejects_scalar_value_past_eof) {
  GgufBuilder b;
  b.raw_kv("k", 10, {1, 2, 3});  // a u64 with 3 bytes left
  EXPECT_EQ(error_of(b),
            "mem.gguf: key 'k': at byte 37: value runs past end of file (needs 8 bytes, 3 left)");
}

TEST(reader, escapes_key_names_in_messages) {
  GgufBuilder b;
  b.u8("a\x1b[31m", 1).u8("a\x1b[31m", 2);
  EXPECT_EQ(error_of(b),
            "mem.gguf: key 'a\\x1b[31m': at byte 43: duplicate key (first defined at byte 24)");
}

// ---- alignment ----

TEST(reader, rejects_alignment_of_wrong_type) {
  const auto b = with({DefectKind::kAlignmentWrongType});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: key 'general.alignment': at byte {}: "
                                     "general.alignment must be u32, found u64",
                                     b.layout().kv_offsets[4]));
}

TEST(reader, rejects_alignment_zero) {
  const auto b = with({DefectKind::kAlignmentZero});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: key 'general.alignment': at byte {}: "
                                     "general.alignment must be a non-zero power of two, found 0",
                                     b.layout().kv_offsets[4]));
}

TEST(reader, rejects_alignment_not_power_of_two) {
  const auto b = with({DefectKind::kAlignmentNotPowerOf2});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: key 'general.alignment': at byte {}: "
                                     "general.alignment must be a non-zero power of two, found 48",
                                     b.layout().kv_offsets[4]));
}

TEST(reader, honours_every_alignment) {
  for (uint32_t a : {1u, 2u, 8u, 16u, 32u, 64u, 256u, 4096u, 65536u}) {
    SCOPED_TRACE(a);
    GgufBuilder b;
    b.alignment(a)
        .tensor("a", 0, {3})  // 12 bytes: padding follows unless a <= 4
        .tensor("b", 8, {32})
        .tensor("c", 24, {5});
    const Layout l = b.layout();
    const auto f = parse(b);
    EXPECT_EQ(f->alignment(), a);
    EXPECT_EQ(f->data_offset(), l.data_offset);
    EXPECT_EQ(f->data_offset() % a, 0u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(f->tensors()[i].offset, l.tensor_offsets[i]);
      EXPECT_EQ(f->tensors()[i].offset % a, 0u);
      const auto d = f->tensor_data(f->tensors()[i]);
      EXPECT_EQ(std::vector<uint8_t>(d.begin(), d.end()),
                testing::pattern_bytes(l.tensor_bytes[i], static_cast<uint32_t>(i + 1)));
    }
  }
}

TEST(reader, accepts_largest_alignment_without_tensors) {
  GgufBuilder b;
  b.alignment(uint32_t{1} << 31);
  const auto f = parse(b);
  EXPECT_EQ(f->alignment(), uint64_t{1} << 31);
  EXPECT_EQ(f->data_offset(), uint64_t{1} << 31);
}

// ---- tensor infos ----

TEST(reader, rejects_more_than_four_dims) {
  const auto b = with({DefectKind::kTooManyDims, 1});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: tensor 'blk.0.attn_q.weight': at byte {}: n_dims "
                                     "5 exceeds the maximum of 4",
                                     after_name(b.layout(), 1, "blk.0.attn_q.weight")));
}

TEST(reader, rejects_negative_dimension) {
  const auto b = with({DefectKind::kNegativeDim, 0});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: tensor 'token_embd.weight': at byte {}: "
                                     "dimension 1 is negative (-3)",
                                     after_name(b.layout(), 0, "token_embd.weight") + 4 + 8));
}

TEST(reader, rejects_element_count_overflow) {
  const auto b = with({DefectKind::kElementCountOverflow, 2});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: tensor 'output.weight': at byte {}: element "
                                     "count overflows int64",
                                     after_name(b.layout(), 2, "output.weight") + 4 + 8));
}

TEST(reader, rejects_byte_size_overflow) {
  // 2^62 f32 elements fit in int64 but need 2^64 bytes: the size must not wrap to 0.
  const auto b = with({DefectKind::kByteSizeOverflow, 2});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: tensor 'output.weight': at byte {}: size in bytes "
                                     "overflows uint64 (4611686018427387904 elements of f32)",
                                     after_name(b.layout(), 2, "output.weight") + 4 + 16));
}

TEST(reader, rejects_row_not_multiple_of_block) {
  const auto b = with({DefectKind::kRowNotBlockMultiple, 0});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: tensor 'token_embd.weight': at byte {}: row "
                                     "length 33 is not a multiple of the q4_0 block size 32",
                                     after_name(b.layout(), 0, "token_embd.weight") + 4 + 8));
}

TEST(reader, accepts_unknown_type_id_but_cannot_size_it) {
  const auto b = with({DefectKind::kUnknownTypeId, 1});
  const auto f = parse(b);
  const TensorInfo& t = f->tensors()[1];
  EXPECT_EQ(t.type_id, 99u);
  EXPECT_FALSE(t.bytes);
  EXPECT_EQ(t.type(), nullptr);
  try {
    f->tensor_data(t);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("mem.gguf: tensor 'blk.0.attn_q.weight': at byte {}: type 99 (unknown "
                          "id) has no known size; this operation needs it",
                          t.info_offset));
  }
}

TEST(reader, accepts_removed_type_id_but_cannot_size_it) {
  const auto f = parse(with({DefectKind::kRemovedTypeId, 0}));
  const TensorInfo& t = f->tensors()[0];
  EXPECT_EQ(t.type_id, 4u);
  EXPECT_FALSE(t.bytes);
  try {
    t.require_bytes(f->path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("mem.gguf: tensor 'token_embd.weight': at byte {}: type 4 (removed "
                          "from ggml) has no known size; this operation needs it",
                          t.info_offset));
  }
}

TEST(reader, rejects_duplicate_tensor_name) {
  const auto b = with({DefectKind::kDuplicateTensorName, 2});
  const Layout l = b.layout();
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: tensor 'token_embd.weight': at byte {}: "
                                     "duplicate tensor name (first defined at byte {})",
                                     l.tensor_info_offsets[2], l.tensor_info_offsets[0]));
}

TEST(reader, rejects_empty_tensor_name) {
  const auto b = with({DefectKind::kEmptyTensorName, 1});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: tensor #1: at byte {}: empty tensor name",
                                     b.layout().tensor_info_offsets[1]));
}

TEST(reader, rejects_tensor_name_past_eof) {
  const auto b = with({DefectKind::kTruncate, base().layout().tensor_info_offsets[1] + 10});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: tensor #1: at byte {}: tensor name length 19 runs "
                                     "past end of file (2 bytes left)",
                                     b.layout().tensor_info_offsets[1]));
}

TEST(reader, accepts_long_tensor_name) {
  // ggml refuses names of 64 bytes or more; the lenient reader leaves that to check_model.
  const auto f = parse(with({DefectKind::kLongTensorName, 0}));
  EXPECT_EQ(f->tensors()[0].name.size(), 64u);
}

TEST(reader, escapes_tensor_names_in_messages) {
  GgufBuilder b;
  b.tensor(
       "\xe2\x80\xae"
       "evil\n",
       0, {1})
      .tensor(
          "\xe2\x80\xae"
          "evil\n",
          0, {1});
  const Layout l = b.layout();
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: tensor '\\u{{202e}}evil\\n': at byte {}: "
                                     "duplicate tensor name (first defined at byte 24)",
                                     l.tensor_info_offsets[1]));
}

// ---- tensor data ----

TEST(reader, rejects_misaligned_offset) {
  const auto b = with({DefectKind::kMisalignedOffset, 1});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: tensor 'blk.0.attn_q.weight': at byte {}: data "
                                     "offset 129 is not a multiple of the alignment 32",
                                     b.layout().tensor_info_offsets[1]));
}

TEST(reader, rejects_offset_past_eof) {
  const auto b = with({DefectKind::kOffsetPastEof, 1});
  const Layout l = b.layout();
  EXPECT_EQ(error_of(b),
            fmt::format("mem.gguf: tensor 'blk.0.attn_q.weight': at byte {}: data offset {} is "
                        "past end of file (data section holds 256 bytes)",
                        l.tensor_info_offsets[1], 256 + 1024 * 32));
}

TEST(reader, rejects_data_past_eof) {
  const auto b = with({DefectKind::kDataPastEof});
  const Layout l = b.layout();
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: tensor 'output.weight': at byte {}: data runs "
                                     "past end of file (needs 32 bytes, 31 left)",
                                     l.data_offset + 224));
}

TEST(reader, rejects_every_truncation) {
  const auto full = base().build();
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_THROW(GgufFile::parse(memory_source(std::move(cut), kName)), Error) << n;
  }
}

TEST(reader, accepts_non_canonical_layouts) {
  // ggml refuses these; the lenient reader keeps them for check_model to report.
  for (auto d : {Defect{DefectKind::kSharedData, 1}, Defect{DefectKind::kOverlap, 1},
                 Defect{DefectKind::kGap, 1}, Defect{DefectKind::kReorder, 0}}) {
    const auto b = with(d);
    const auto f = parse(b);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(f->tensors()[i].offset, b.layout().tensor_offsets[i]);
  }
  EXPECT_EQ(parse(with({DefectKind::kSharedData, 1}))->tensors()[1].offset, 0u);
  EXPECT_EQ(parse(with({DefectKind::kOverlap, 1}))->tensors()[1].offset, 32u);
  EXPECT_EQ(parse(with({DefectKind::kGap, 1}))->tensors()[1].offset, 160u);
  EXPECT_EQ(parse(with({DefectKind::kReorder, 0}))->tensors()[0].offset, 96u);
}

// ---- round trips ----

TEST(reader, round_trips_every_value_type) {
  GgufBuilder b;
  b.u8("u8", 0xFE)
      .i8("i8", -5)
      .u16("u16", 0xBEEF)
      .i16("i16", -12345)
      .u32("u32", 0xDEADBEEF)
      .i32("i32", -123456789)
      .f32("f32", 1.5f)
      .boolean("bool", true)
      .string("string", std::string("h\xc3\xa9llo\0x", 8))
      .u64("u64", ~uint64_t{0})
      .i64("i64", std::numeric_limits<int64_t>::min())
      .f64("f64", -2.25)
      .string_array("strings", {"", "a", std::string(300, 'z')})
      .array("a.u8", Tag::kU8, std::vector<uint8_t>{1, 2, 255})
      .array("a.i8", Tag::kI8, std::vector<int8_t>{-1, 0, 1})
      .array("a.u16", Tag::kU16, std::vector<uint16_t>{1, 65535})
      .array("a.i16", Tag::kI16, std::vector<int16_t>{-32768})
      .array("a.u32", Tag::kU32, std::vector<uint32_t>{7, 8, 9, 10})
      .array("a.i32", Tag::kI32, std::vector<int32_t>{-7})
      .array("a.f32", Tag::kF32, std::vector<float>{0.5f, -0.0f})
      .array("a.bool", Tag::kBool, std::vector<uint8_t>{1, 0})
      .array("a.u64", Tag::kU64, std::vector<uint64_t>{1ull << 63})
      .array("a.i64", Tag::kI64, std::vector<int64_t>{-1})
      .array("a.f64", Tag::kF64, std::vector<double>{3.25})
      .array("a.empty", Tag::kU32, std::vector<uint32_t>{})
      .string_array("a.empty_strings", {});
  const auto f = parse(b);
  const Metadata& m = f->metadata();
  ASSERT_EQ(m.size(), 26u);
  const auto at = [&](std::string_view k) -> const Value& {
    const Value* v = m.find(k);
    EXPECT_NE(v, nullptr) << k;
    static const Value kNone;
    return v ? *v : kNone;
  };
  EXPECT_EQ(at("u8").type(), ValueType::kU8);
  EXPECT_EQ(at("u8").as_uint(), 0xFEu);
  EXPECT_EQ(at("i8").type(), ValueType::kI8);
  EXPECT_EQ(at("i8").as_int(), -5);
  EXPECT_EQ(at("u16").as_uint(), 0xBEEFu);
  EXPECT_EQ(at("i16").as_int(), -12345);
  EXPECT_EQ(at("u32").type(), ValueType::kU32);
  EXPECT_EQ(at("u32").as_uint(), 0xDEADBEEFu);
  EXPECT_EQ(at("i32").as_int(), -123456789);
  EXPECT_EQ(at("f32").type(), ValueType::kF32);
  EXPECT_EQ(at("f32").as_double(), 1.5);
  EXPECT_EQ(at("bool").type(), ValueType::kBool);
  EXPECT_EQ(at("bool").as_bool(), true);
  ASSERT_NE(at("string").as_string(), nullptr);
  EXPECT_EQ(*at("string").as_string(), std::string("h\xc3\xa9llo\0x", 8));
  EXPECT_EQ(at("u64").type(), ValueType::kU64);
  EXPECT_EQ(at("u64").as_uint(), ~uint64_t{0});
  EXPECT_EQ(at("i64").as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(at("f64").type(), ValueType::kF64);
  EXPECT_EQ(at("f64").as_double(), -2.25);

  const Value& s = at("strings");
  EXPECT_EQ(s.type(), ValueType::kArray);
  EXPECT_EQ(s.array_type(), ValueType::kString);
  EXPECT_EQ(s.strings(), (std::vector<std::string>{"", "a", std::string(300, 'z')}));
  EXPECT_EQ(at("a.u8").array_type(), ValueType::kU8);
  EXPECT_EQ(at("a.u8").array_size(), 3u);
  EXPECT_EQ(at("a.u8").element(2).as_uint(), 255u);
  EXPECT_EQ(at("a.i8").element(0).as_int(), -1);
  EXPECT_EQ(at("a.u16").element(1).as_uint(), 65535u);
  EXPECT_EQ(at("a.i16").element(0).as_int(), -32768);
  EXPECT_EQ(at("a.u32").array_size(), 4u);
  EXPECT_EQ(at("a.u32").element(3).as_uint(), 10u);
  EXPECT_EQ(at("a.i32").element(0).as_int(), -7);
  EXPECT_EQ(at("a.f32").element(0).as_double(), 0.5);
  EXPECT_TRUE(std::signbit(*at("a.f32").element(1).as_double()));
  EXPECT_EQ(at("a.bool").array_type(), ValueType::kBool);
  EXPECT_EQ(at("a.bool").element(0).as_bool(), true);
  EXPECT_EQ(at("a.bool").element(1).as_bool(), false);
  EXPECT_EQ(at("a.u64").element(0).as_uint(), 1ull << 63);
  EXPECT_EQ(at("a.i64").element(0).as_int(), -1);
  EXPECT_EQ(at("a.f64").element(0).as_double(), 3.25);
  EXPECT_EQ(at("a.empty").array_type(), ValueType::kU32);
  EXPECT_EQ(at("a.empty").array_size(), 0u);
  EXPECT_EQ(at("a.empty_strings").array_type(), ValueType::kString);
  EXPECT_EQ(at("a.empty_strings").array_size(), 0u);
  // Keys keep file order and remember where they start.
  const Layout l = b.layout();
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m.entries()[i].offset, l.kv_offsets[i]);
  EXPECT_EQ(m.entries()[12].key, "strings");
}

TEST(reader, reads_versions_2_and_3_alike) {
  const auto f2 = parse(base().version(2));
  const auto f3 = parse(base().version(3));
  EXPECT_EQ(f2->version(), 2u);
  EXPECT_EQ(f3->version(), 3u);
  ASSERT_EQ(f2->tensors().size(), f3->tensors().size());
  for (size_t i = 0; i < f2->tensors().size(); ++i)
    EXPECT_EQ(f2->tensors()[i].offset, f3->tensors()[i].offset);
  EXPECT_EQ(f2->metadata().size(), f3->metadata().size());
}

TEST(reader, reads_zero_tensors_and_zero_keys) {
  GgufBuilder none;
  const auto f = parse(none);
  EXPECT_EQ(f->file_size(), 24u);
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->metadata().size(), 0u);
  EXPECT_EQ(f->header_end(), 24u);
  EXPECT_EQ(f->data_offset(), 32u);

  GgufBuilder keys_only;
  keys_only.string("general.name", "x");
  EXPECT_EQ(parse(keys_only)->metadata().size(), 1u);

  GgufBuilder tensors_only;
  tensors_only.tensor("t", 0, {4}).tensor("empty", 0, {0, 3});
  const auto g = parse(tensors_only);
  ASSERT_EQ(g->tensors().size(), 2u);
  EXPECT_EQ(g->tensors()[1].n_elements, 0u);
  EXPECT_EQ(g->tensors()[1].bytes, 0u);
  EXPECT_EQ(g->metadata().size(), 0u);
}

TEST(reader, reads_scalar_tensor_without_dims) {
  GgufBuilder b;
  b.tensor("scalar", 0, {}, testing::pattern_bytes(4, 9));
  const auto f = parse(b);
  EXPECT_TRUE(f->tensors()[0].shape.empty());
  EXPECT_EQ(f->tensors()[0].n_elements, 1u);
  EXPECT_EQ(f->tensors()[0].bytes, 4u);
}

// ---- partial parse ----

TEST(reader, partial_parse_keeps_keys_before_defect) {
  std::optional<Error> err;
  const auto f = GgufFile::parse_partial(
      memory_source(with({DefectKind::kUnknownValueType, 2}).build(), kName), err);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->object(), "key 'tokenizer.ggml.tokens'");
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata().entries()[1].key, "llama.block_count");
  EXPECT_TRUE(f->tensors().empty());
}

TEST(reader, partial_parse_keeps_tensors_before_defect) {
  std::optional<Error> err;
  const auto f = GgufFile::parse_partial(
      memory_source(with({DefectKind::kNegativeDim, 2}).build(), kName), err);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->message(), "dimension 1 is negative (-3)");
  EXPECT_EQ(f->metadata().size(), 4u);
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensors()[1].name, "blk.0.attn_q.weight");
}

TEST(reader, partial_parse_of_a_sound_file_has_no_error) {
  std::optional<Error> err = Error("stale");
  const auto f = GgufFile::parse_partial(memory_source(base().build(), kName), err);
  EXPECT_FALSE(err);
  EXPECT_EQ(f->tensors().size(), 3u);
}

// ---- sources ----

TEST(reader, memory_and_file_sources_agree) {
  testing::TempDir dir;
  const auto bytes = base().build();
  const std::string path = testing::write_bytes(dir.file("m.gguf"), bytes);
  const auto a = GgufFile::parse(memory_source(bytes, path));
  const auto b = GgufFile::open(path);
  EXPECT_EQ(a->path(), b->path());
  EXPECT_EQ(b->file_size(), bytes.size());
  EXPECT_GE(b->source().fd(), 0);
  EXPECT_TRUE(b->source().identity());
  EXPECT_EQ(a->data_offset(), b->data_offset());
  ASSERT_EQ(a->metadata().size(), b->metadata().size());
  for (size_t i = 0; i < a->metadata().size(); ++i) {
    EXPECT_EQ(a->metadata().entries()[i].key, b->metadata().entries()[i].key);
    EXPECT_TRUE(a->metadata().entries()[i].value == b->metadata().entries()[i].value);
  }
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    const auto da = a->tensor_data(a->tensors()[i]);
    const auto db = b->tensor_data(b->tensors()[i]);
    EXPECT_TRUE(std::equal(da.begin(), da.end(), db.begin(), db.end()));
  }
  // The same defect gives the same message from both sources.
  const auto bad = with({DefectKind::kDataPastEof}).build();
  const std::string bad_path = testing::write_bytes(dir.file("bad.gguf"), bad);
  std::string from_memory, from_file;
  try {
    GgufFile::parse(memory_source(bad, bad_path));
  } catch (const Error& e) {
    from_memory = e.what();
  }
  try {
    GgufFile::open(bad_path);
  } catch (const Error& e) {
    from_file = e.what();
  }
  EXPECT_FALSE(from_file.empty());
  EXPECT_EQ(from_memory, from_file);
}

TEST(reader, opening_a_missing_file_names_it) {
  testing::TempDir dir;
  try {
    GgufFile::open(dir.file("nope.gguf"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              dir.file("nope.gguf") + ": cannot open: No such file or directory");
  }
}

TEST(reader, reads_tensor_past_4_gib_in_sparse_file) {
  // A 5 GiB hole then a real tensor: offsets and sizes must not pass through 32 bits.
  constexpr int64_t kHole = int64_t{5} << 30;
  testing::TempDir dir;
  GgufBuilder b;
  b.sparse_tensor("hole", 24, {kHole}).tensor("far", 0, {256});
  const std::string path = dir.file("big.gguf");
  b.write_file(path);
  const Layout l = b.layout();
  const auto f = GgufFile::open(path);
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->file_size(), l.file_size);
  const TensorInfo& far = f->tensors()[1];
  EXPECT_EQ(far.offset, static_cast<uint64_t>(kHole));
  EXPECT_GT(f->data_start(far), uint64_t{4} << 30);
  EXPECT_EQ(f->tensors()[0].bytes, static_cast<uint64_t>(kHole));
  const auto d = f->tensor_data(far);
  EXPECT_EQ(std::vector<uint8_t>(d.begin(), d.end()), testing::pattern_bytes(1024, 2));

  b.defect({DefectKind::kDataPastEof});
  b.write_file(path);
  try {
    GgufFile::open(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("{}: tensor 'far': at byte {}: data runs past end of file (needs 1024 "
                          "bytes, 1023 left)",
                          path, l.data_offset + kHole));
  }
}

}  // namespace
}  // namespace gguf
