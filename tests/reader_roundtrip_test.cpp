// The GGUF reader on sound files: round trips of every value type, versions, empty files,
// partial parses, memory vs file sources, and a tensor past 4 GiB in a sparse file.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <limits>

#include "cli_run.h"
#include "reader_fixture.h"

namespace gguf {
namespace {

using namespace reader_test;

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

// A FIFO (nobody writing to it), a directory and a character device are refused at once,
// without blocking in open() as a FIFO would for a plain O_RDONLY.
TEST(reader, refuses_files_that_are_not_regular) {
  testing::TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  for (const std::string& path : {dir.file("fifo"), dir.path(), std::string("/dev/null")}) {
    try {
      GgufFile::open(path);
      ADD_FAILURE() << path << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), path + ": not a regular file");
    }
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
