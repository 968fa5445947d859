// The GGUF reader against malformed fixtures from the builder: one test per defect, asserting
// the exact message (file, object, byte offset, what is wrong).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "reader_fixture.h"

namespace gguf {
namespace {

using namespace reader_test;

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
                                     "exceeds ggml's limit of 1073741824 bytes",
                                     l.kv_offsets[1]));
}

TEST(reader, rejects_string_past_eof) {
  const auto b = with({DefectKind::kStringPastEof, 0});
  const Layout l = b.layout();
  const uint64_t at = after_key(l, 0, "general.architecture") + 4;
  EXPECT_EQ(error_of(b),
            fmt::format("mem.gguf: key 'general.architecture': at byte {}: string length "
                        "1099511627776 exceeds ggml's limit of 1073741824 bytes",
                        at));
}

TEST(reader, rejects_string_array_element_past_eof) {
  const auto b = with({DefectKind::kStringPastEof, 2});
  const Layout l = b.layout();
  const uint64_t at = after_key(l, 2, "tokenizer.ggml.tokens") + 4 + 4 + 8;
  EXPECT_EQ(error_of(b),
            fmt::format("mem.gguf: key 'tokenizer.ggml.tokens': at byte {}: string length "
                        "1099511627776 exceeds ggml's limit of 1073741824 bytes",
                        at));
}

// Up to ggml's limit a length is only checked against what the file holds.
TEST(reader, rejects_string_at_the_limit_past_eof) {
  GgufBuilder b;
  std::vector<uint8_t> length(8, 0);
  length[3] = 0x40;  // 2^30, little-endian
  b.raw_kv("k", 8, length);
  EXPECT_EQ(error_of(b),
            "mem.gguf: key 'k': at byte 37: string length 1073741824 runs past end of "
            "file (0 bytes left)");
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
                                     b.layout().kv_type_offsets[4]));
}

TEST(reader, rejects_alignment_zero) {
  const auto b = with({DefectKind::kAlignmentZero});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: key 'general.alignment': at byte {}: "
                                     "general.alignment must be a non-zero power of two, found 0",
                                     b.layout().kv_value_offsets[4]));
}

TEST(reader, rejects_alignment_not_power_of_two) {
  const auto b = with({DefectKind::kAlignmentNotPowerOf2});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: key 'general.alignment': at byte {}: "
                                     "general.alignment must be a non-zero power of two, found 48",
                                     b.layout().kv_value_offsets[4]));
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

// Each count fits int64 but their sum does not (only types of unknown size can, in a file of a
// real size): refused at the tensor where it passes, so no summary wraps around.
TEST(reader, rejects_element_total_overflow) {
  const auto b = with({DefectKind::kElementTotalOverflow, 2});
  EXPECT_EQ(error_of(b),
            fmt::format("mem.gguf: tensor 'blk.0.attn_q.weight': at byte {}: the tensors up to "
                        "this one hold more than 9223372036854775807 elements in total",
                        after_name(b.layout(), 1, "blk.0.attn_q.weight")));
}

// Tensors may share data, but not so many that the file's data is read over and over: sizes
// adding up to more than twice the data section are refused at the tensor that passes it.
TEST(reader, rejects_data_named_many_times_over) {
  // An explicit empty payload lays a tensor out at the running offset without data: "b" and
  // "c" both name the 256 bytes "a" brings.
  GgufBuilder b;
  b.tensor("b", 0, {64}, {}).tensor("c", 0, {64}, {}).tensor("a", 0, {64});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: tensor 'a': at byte {}: the tensors up to this "
                                     "one hold 768 bytes of data, more than twice the 256 bytes "
                                     "of the data section: their data overlap many times over",
                                     b.layout().tensor_type_offsets[2] + 4));
  GgufBuilder twice;
  twice.tensor("b", 0, {64}, {}).tensor("a", 0, {64});
  EXPECT_EQ(parse(twice)->tensors().size(), 2u);
}

TEST(reader, accepts_unknown_type_id_but_cannot_size_it) {
  const auto b = with({DefectKind::kUnknownTypeId, 1});
  const auto f = parse(b);
  const uint64_t type_at = b.layout().tensor_type_offsets[1];
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
                          type_at));
  }
}

TEST(reader, accepts_removed_type_id_but_cannot_size_it) {
  const auto b = with({DefectKind::kRemovedTypeId, 0});
  const auto f = parse(b);
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
                          b.layout().tensor_type_offsets[0]));
  }
}

TEST(reader, rejects_duplicate_tensor_name) {
  const auto b = with({DefectKind::kDuplicateTensorName, 2});
  const Layout l = b.layout();
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: tensor 'token_embd.weight': at byte {}: "
                                     "duplicate tensor name (first defined at byte {})",
                                     l.tensor_info_offsets[2], l.tensor_info_offsets[0]));
}

// ggml accepts an empty tensor name, so the reader does too (gguf-inspect --check reports it).
TEST(reader, accepts_empty_tensor_name) {
  const auto f = parse(with({DefectKind::kEmptyTensorName, 1}));
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors()[1].name, "");
}

// ggml seeks to the data section first, so it refuses a file whose padded header end lies
// past its end even when every tensor is empty.
TEST(reader, rejects_data_section_past_eof) {
  GgufBuilder b;
  b.u32("general.alignment", 4096);
  b.tensor("z", 0, {0}, {});
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: at byte {}: the data section would start at byte "
                                     "4096 (the header end padded to the alignment 4096), past "
                                     "the end of the file ({} bytes)",
                                     b.layout().header_end, b.build().size()));
}

// general.alignment is found as ggml finds it: the first key that reads so up to a NUL.
TEST(reader, alignment_key_is_found_as_ggml_finds_it) {
  GgufBuilder b;
  b.u32(std::string("general.alignment\0x", 19), 64);
  b.u32("general.alignment", 32);
  b.tensor("a", 0, {8}, testing::pattern_bytes(128, 1));  // room for either layout
  const auto f = parse(b);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
}

// A name that swallowed the file (a corrupted length) is cut in messages.
TEST(reader, long_names_are_cut_in_messages) {
  GgufBuilder b;
  b.string(std::string(300, 'k'), "v");
  b.string(std::string(300, 'k'), "w");
  EXPECT_EQ(error_of(b), fmt::format("mem.gguf: key '{}...' (300 bytes): at byte {}: duplicate key "
                                     "(first defined at byte 24)",
                                     std::string(100, 'k'), 24 + 8 + 300 + 4 + 8 + 1));
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
                                     b.layout().tensor_offset_fields[1]));
}

TEST(reader, rejects_offset_past_eof) {
  const auto b = with({DefectKind::kOffsetPastEof, 1});
  const Layout l = b.layout();
  EXPECT_EQ(error_of(b),
            fmt::format("mem.gguf: tensor 'blk.0.attn_q.weight': at byte {}: data offset {} is "
                        "past end of file (data section holds 256 bytes)",
                        l.tensor_offset_fields[1], 256 + 1024 * 32));
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

}  // namespace
}  // namespace gguf
