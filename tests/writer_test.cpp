// The canonical writer: header bytes, round trips of every value type through the validated
// reader, canonical layout at several alignments, payload sources, split sets, verification.
#include "gguf/write/writer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "gguf/format/file.h"
#include "gguf/format/model.h"
#include "writer_test_util.h"

namespace gguf {
namespace {

using ::testing::HasSubstr;
using testing::memory_tensor;
using testing::pattern_bytes;
using testing::payload_of;
using testing::ScratchDir;
using testing::xxh3_of;

uint64_t pad(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// Little-endian bytes written by hand, independently of the writer's encoder.
struct Bytes {
  std::vector<uint8_t> b;
  Bytes& u(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Bytes& s(std::string_view str) {
    u(str.size(), 8);
    b.insert(b.end(), str.begin(), str.end());
    return *this;
  }
};

TEST(writer, header_matches_hand_encoding) {
  Metadata md;
  md.set("a", Value::u8(7));
  md.set("name", Value::string("xy"));
  std::vector<PlanTensor> ts = {memory_tensor("t", GgmlType::F32, {3})};
  Bytes want;
  want.u(0x46554747, 4).u(3, 4).u(1, 8).u(2, 8);
  want.s("a").u(0, 4).u(7, 1);
  want.s("name").u(8, 4).s("xy");
  want.s("t").u(1, 4).u(3, 8).u(0, 4).u(0, 8);
  want.b.resize(pad(want.b.size(), 32), 0);
  EXPECT_EQ(serialize_header(md, 3, ts), want.b);
  want.b[4] = 2;
  EXPECT_EQ(serialize_header(md, 2, ts), want.b);
}

TEST(writer, header_offsets_are_64_bit) {
  // Three 3 GiB tensors: the third starts past 4 GiB; nothing is written to disk.
  std::vector<PlanTensor> ts;
  for (int i = 0; i < 3; ++i) {
    PlanTensor t;
    t.name = "big." + std::to_string(i);
    t.type_id = static_cast<uint32_t>(GgmlType::I8);
    t.shape = {int64_t{3} << 30};
    t.bytes = expected_bytes(t);
    ts.push_back(t);
  }
  const auto header = serialize_header({}, 3, ts);
  std::optional<Error> error;
  const auto f = GgufFile::parse_partial(memory_source(header, "header"), error);
  ASSERT_TRUE(error);  // the data is not there, but every tensor info was read
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors()[1].offset, uint64_t{3} << 30);
  EXPECT_EQ(f->tensors()[2].offset, uint64_t{6} << 30);
}

Metadata every_value_type() {
  Metadata md;
  md.set("general.architecture", Value::string("test"));
  md.set("v.u8", Value::u8(200));
  md.set("v.i8", Value::i8(-5));
  md.set("v.u16", Value::u16(65000));
  md.set("v.i16", Value::i16(-30000));
  md.set("v.u32", Value::u32(4000000000u));
  md.set("v.i32", Value::i32(-2000000000));
  md.set("v.f32", Value::from_bits(ValueType::kF32, 0x7FC00001u));  // a NaN with payload
  md.set("v.bool", Value::boolean(true));
  md.set("v.string", Value::string(std::string("h\xC3\xA9llo\0x\n", 9)));
  md.set("v.empty_string", Value::string(""));
  md.set("v.u64", Value::u64(std::numeric_limits<uint64_t>::max()));
  md.set("v.i64", Value::i64(std::numeric_limits<int64_t>::min()));
  md.set("v.f64", Value::f64(-0.0));
  const uint8_t u8s[] = {0, 1, 255};
  const int8_t i8s[] = {-128, 0, 127};
  const uint16_t u16s[] = {1, 65535};
  const int16_t i16s[] = {-32768, 32767};
  const uint32_t u32s[] = {0, 0xFFFFFFFF, 7};
  const int32_t i32s[] = {-1, 2, -3, 4};
  const float f32s[] = {1.5f, -0.0f, std::numeric_limits<float>::infinity()};
  const uint8_t bools[] = {1, 0, 1};
  const uint64_t u64s[] = {1ull << 63, 3};
  const int64_t i64s[] = {-(1ll << 62), 9};
  const double f64s[] = {3.25, -1e300};
  md.set("a.u8", Value::array_of<uint8_t>(ValueType::kU8, u8s));
  md.set("a.i8", Value::array_of<int8_t>(ValueType::kI8, i8s));
  md.set("a.u16", Value::array_of<uint16_t>(ValueType::kU16, u16s));
  md.set("a.i16", Value::array_of<int16_t>(ValueType::kI16, i16s));
  md.set("a.u32", Value::array_of<uint32_t>(ValueType::kU32, u32s));
  md.set("a.i32", Value::array_of<int32_t>(ValueType::kI32, i32s));
  md.set("a.f32", Value::array_of<float>(ValueType::kF32, f32s));
  md.set("a.bool", Value::array_of<uint8_t>(ValueType::kBool, bools));
  md.set("a.u64", Value::array_of<uint64_t>(ValueType::kU64, u64s));
  md.set("a.i64", Value::array_of<int64_t>(ValueType::kI64, i64s));
  md.set("a.f64", Value::array_of<double>(ValueType::kF64, f64s));
  md.set("a.string", Value::string_array({"one", "", std::string("t\0o", 3), "\xFF"}));
  md.set("a.empty", Value::scalar_array(ValueType::kI32, {}));
  md.set("a.empty_strings", Value::string_array({}));
  return md;
}

TEST(writer, round_trips_every_value_type) {
  ScratchDir dir;
  Plan plan;
  plan.metadata = every_value_type();
  plan.tensors.push_back(memory_tensor("t", GgmlType::F32, {4}));
  const auto r = write_plan(plan, dir.file("m.gguf"), {});
  EXPECT_TRUE(r.verified);
  const auto f = GgufFile::open(dir.file("m.gguf"));
  const auto& got = f->metadata().entries();
  const auto& want = plan.metadata.entries();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(want[i].key);
    EXPECT_EQ(got[i].key, want[i].key);
    EXPECT_EQ(got[i].value.type(), want[i].value.type());
    EXPECT_TRUE(got[i].value == want[i].value) << format_value(got[i].value);
  }
  EXPECT_EQ(f->metadata().find("v.f32")->bits(), 0x7FC00001u);
  EXPECT_EQ(f->metadata().find("a.string")->strings()[2], std::string("t\0o", 3));
}

// Writes tensors of several types (one of them empty) at alignment a and checks the layout
// against offsets computed here, the payloads, and that every gap is zero.
void check_layout(std::optional<uint32_t> alignment) {
  SCOPED_TRACE(alignment ? *alignment : 0);
  const uint64_t a = alignment.value_or(32);
  ScratchDir dir;
  Plan plan;
  plan.metadata.set("general.architecture", Value::string("layout"));
  if (alignment) plan.metadata.set("general.alignment", Value::u32(*alignment));
  plan.tensors = {
      memory_tensor("a.f32", GgmlType::F32, {5}, 1),
      memory_tensor("b.q4_0", GgmlType::Q4_0, {64, 3}, 2),
      memory_tensor("c.empty", GgmlType::F16, {0, 4}, 3),
      memory_tensor("d.q4_K", GgmlType::Q4_K, {256, 2}, 4),
      memory_tensor("e.bf16", GgmlType::BF16, {7}, 5),
      memory_tensor("f.exps", GgmlType::Q8_0, {32, 3, 4}, 6),
      memory_tensor("g.scalar", GgmlType::I32, {}, 7),
  };
  const std::string path = dir.file("m.gguf");
  const auto r = write_plan(plan, path, {});
  const auto f = GgufFile::open(path);
  EXPECT_EQ(f->alignment(), a);
  EXPECT_EQ(f->data_offset() % a, 0u);
  EXPECT_LT(f->data_offset() - f->header_end(), a);
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(file.size(), f->file_size());
  uint64_t pos = f->header_end(), expect_offset = 0;
  ASSERT_EQ(f->tensors().size(), plan.tensors.size());
  ASSERT_EQ(r.tensors.size(), plan.tensors.size());
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const auto& t = f->tensors()[i];
    const auto& payload = payload_of(plan.tensors[i]);
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, plan.tensors[i].name);
    EXPECT_EQ(t.offset, expect_offset);
    const uint64_t start = f->data_offset() + t.offset;
    for (; pos < start; ++pos) ASSERT_EQ(file[pos], 0) << "gap byte " << pos;
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), file.begin() + start));
    pos = start + payload.size();
    expect_offset = pad(expect_offset + payload.size(), a);
    EXPECT_EQ(r.tensors[i].offset, start);
    EXPECT_EQ(r.tensors[i].bytes, payload.size());
    EXPECT_EQ(r.tensors[i].xxh3, xxh3_of(payload));
  }
  // ggml's writer pads after the last payload too; its reader reads the padded blob.
  EXPECT_EQ(file.size(), f->data_offset() + expect_offset);
  for (; pos < file.size(); ++pos) ASSERT_EQ(file[pos], 0);
  EXPECT_EQ(r.bytes, file.size());
  EXPECT_EQ(r.paths, std::vector<std::string>{path});
}

TEST(writer, canonical_layout_default_alignment) { check_layout(std::nullopt); }
TEST(writer, canonical_layout_alignment_32) { check_layout(32); }
TEST(writer, canonical_layout_alignment_64) { check_layout(64); }
TEST(writer, canonical_layout_alignment_4096) { check_layout(4096); }
// ggml's reader sets no maximum (it loads 2^21 and 2^31), so neither does the writer.
TEST(writer, canonical_layout_alignment_2_mib) { check_layout(1u << 21); }

TEST(writer, writes_version_2) {
  ScratchDir dir;
  Plan plan;
  plan.version = 2;
  plan.tensors.push_back(memory_tensor("t", GgmlType::F16, {8}));
  write_plan(plan, dir.file("v2.gguf"), {});
  EXPECT_EQ(GgufFile::open(dir.file("v2.gguf"))->version(), 2u);
}

std::string serialize_error(const Metadata& md, std::vector<PlanTensor> ts, uint32_t v = 3) {
  try {
    serialize_header(md, v, ts);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(writer, rejects_invalid_plans) {
  auto t = [](std::string name, GgmlType type, std::vector<int64_t> shape) {
    return memory_tensor(std::move(name), type, std::move(shape));
  };
  Metadata md;
  md.set("general.alignment", Value::u64(64));
  EXPECT_EQ(serialize_error(md, {}),
            "key 'general.alignment': general.alignment must be u32, found u64");
  md.set("general.alignment", Value::u32(48));
  EXPECT_EQ(serialize_error(md, {}),
            "key 'general.alignment': general.alignment must be a non-zero power of two, found 48");
  Metadata empty_key;
  empty_key.set("", Value::u8(1));
  EXPECT_EQ(serialize_error(empty_key, {}), "key '': empty key");
  EXPECT_EQ(serialize_error({}, {}, 1), "cannot write GGUF version 1 (only versions 2 and 3)");

  auto wrong_size = t("w", GgmlType::F32, {4});
  wrong_size.bytes = 10;
  EXPECT_EQ(serialize_error({}, {wrong_size}),
            "tensor 'w': payload is 10 bytes, but type f32 and shape [4] need 16");
  EXPECT_EQ(serialize_error({}, {t("d", GgmlType::F32, {1}), t("d", GgmlType::F16, {2})}),
            "tensor 'd': duplicate tensor name");
  EXPECT_EQ(serialize_error({}, {t("", GgmlType::F32, {1})}), "tensor '': empty tensor name");
  EXPECT_EQ(serialize_error({}, {t(std::string(64, 'n'), GgmlType::F32, {1})}),
            fmt::format("tensor '{}': tensor name is 64 bytes; ggml allows at most 63",
                        std::string(64, 'n')));
  EXPECT_NO_THROW(serialize_header({}, 3, {t(std::string(63, 'n'), GgmlType::F32, {1})}));

  PlanTensor bad;
  bad.name = "x";
  bad.shape = {1, 1, 1, 1, 1};
  EXPECT_EQ(serialize_error({}, {bad}), "tensor 'x': n_dims 5 exceeds the maximum of 4");
  bad.shape = {2, -2};
  EXPECT_EQ(serialize_error({}, {bad}), "tensor 'x': dimension 1 is negative (-2)");
  bad.shape = {100};
  bad.type_id = static_cast<uint32_t>(GgmlType::Q4_K);
  EXPECT_EQ(serialize_error({}, {bad}),
            "tensor 'x': row length 100 is not a multiple of the q4_K block size 256");
  bad.type_id = 99;
  EXPECT_EQ(serialize_error({}, {bad}), "tensor 'x': type 99 (unknown id) has no known size");
  bad.type_id = 4;
  EXPECT_EQ(serialize_error({}, {bad}), "tensor 'x': type 4 (removed from ggml) has no known size");
  bad.type_id = 0;
  bad.shape = {int64_t{1} << 62, 4};
  EXPECT_EQ(serialize_error({}, {bad}), "tensor 'x': element count overflows int64");
}

TEST(writer, invalid_plan_error_names_the_output) {
  ScratchDir dir;
  Plan plan;
  plan.tensors.push_back(memory_tensor("w", GgmlType::F32, {4}));
  plan.tensors[0].bytes = 12;
  const std::string path = dir.file("out.gguf");
  try {
    write_plan(plan, path, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ": tensor 'w': payload is 12 bytes, but type f32 and shape [4] need 16");
  }
  EXPECT_TRUE(dir.entries().empty());
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

TEST(writer, file_range_payloads_copy_exact_bytes) {
  ScratchDir dir;
  const auto src_bytes = pattern_bytes((uint64_t{3} << 20) + 4099, 11);
  write_file(dir.file("src.bin"), src_bytes);
  const auto file_src = open_file_source(dir.file("src.bin"));
  const auto mem_src = memory_source(src_bytes, "memory");  // no fd: the fallback path
  Plan plan;
  auto range = [&](std::string name, std::shared_ptr<const ByteSource> s, uint64_t off, int64_t n) {
    PlanTensor t;
    t.name = std::move(name);
    t.type_id = static_cast<uint32_t>(GgmlType::I8);
    t.shape = {n};
    t.bytes = static_cast<uint64_t>(n);
    t.source = FileRange{std::move(s), off};
    return t;
  };
  plan.tensors.push_back(range("kernel", file_src, 1000, (int64_t{3} << 20) - 17));
  plan.tensors.push_back(range("fallback", mem_src, 5, 100003));
  plan.tensors.push_back(range("tail", file_src, src_bytes.size() - 7, 7));
  const auto r = write_plan(plan, dir.file("out.gguf"), {});
  const auto f = GgufFile::open(dir.file("out.gguf"));
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const auto& src = std::get<FileRange>(plan.tensors[i].source);
    const auto want = std::span(src_bytes).subspan(src.offset, plan.tensors[i].bytes);
    const auto got = f->tensor_data(f->tensors()[i]);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin(), got.end())) << i;
    EXPECT_EQ(r.tensors[i].xxh3, XXH3_64bits(want.data(), want.size()));
  }
  plan.tensors.push_back(range("outside", file_src, src_bytes.size() - 3, 7));
  try {
    write_plan(plan, dir.file("bad.gguf"), {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("tensor 'outside'"));
    EXPECT_THAT(std::string(e.what()), HasSubstr("lies outside"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.gguf")));
}

TEST(writer, producer_gets_contiguous_whole_chunks) {
  ScratchDir dir;
  const auto bytes = pattern_bytes(10'000'000, 3);
  for (uint64_t chunk : {uint64_t{0}, uint64_t{3000}, uint64_t{5} << 20}) {
    SCOPED_TRACE(chunk);
    std::vector<std::pair<uint64_t, uint64_t>> calls;
    PlanTensor t;
    t.name = "p";
    t.type_id = static_cast<uint32_t>(GgmlType::I8);
    t.shape = {static_cast<int64_t>(bytes.size())};
    t.bytes = bytes.size();
    t.source = Producer{[&](uint64_t off, std::span<uint8_t> out) {
                          calls.emplace_back(off, out.size());
                          std::memcpy(out.data(), bytes.data() + off, out.size());
                        },
                        chunk};
    Plan plan;
    plan.tensors.push_back(t);
    WriteOptions o;
    o.force = true;
    const auto r = write_plan(plan, dir.file("p.gguf"), o);
    EXPECT_EQ(r.tensors[0].xxh3, xxh3_of(bytes));
    ASSERT_FALSE(calls.empty());
    uint64_t next = 0;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].first, next);
      if (i + 1 < calls.size() && chunk) {
        EXPECT_EQ(calls[i].second % chunk, 0u);
      }
      EXPECT_LE(calls[i].second, std::max<uint64_t>(chunk, uint64_t{4} << 20));
      next += calls[i].second;
    }
    EXPECT_EQ(next, bytes.size());
  }
}

TEST(writer, progress_ends_with_total_once) {
  ScratchDir dir;
  Plan plan;
  for (int i = 0; i < 4; ++i)
    plan.tensors.push_back(memory_tensor("t" + std::to_string(i), GgmlType::I8, {9 << 20}, i));
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  WriteOptions o;
  o.split_max_tensors = 3;
  o.progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  const auto r = write_plan(plan, dir.file("p.gguf"), o);
  ASSERT_GE(calls.size(), 3u);
  int finals = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].second, r.bytes);
    if (i) {
      EXPECT_GE(calls[i].first, calls[i - 1].first);
    }
    finals += calls[i].first == r.bytes;
  }
  EXPECT_EQ(finals, 1);
  EXPECT_EQ(calls.back().first, r.bytes);
  uint64_t sizes = 0;
  for (const auto& p : r.paths) sizes += std::filesystem::file_size(p);
  EXPECT_EQ(r.bytes, sizes);
}

Plan split_plan() {
  Plan plan;
  plan.metadata.set("general.architecture", Value::string("split"));
  plan.metadata.set("general.alignment", Value::u32(64));
  plan.metadata.set("x.list", Value::string_array({"a", "b"}));
  const std::vector<int64_t> rows = {3, 40, 1, 17, 2, 9, 0};
  for (size_t i = 0; i < rows.size(); ++i)
    plan.tensors.push_back(
        memory_tensor(fmt::format("blk.{}.w", i), GgmlType::Q8_0, {64, rows[i]}, i + 1));
  return plan;
}

// Every shard is a complete GGUF with the split keys; metadata only in the first; the set
// opens as one model with the tensors in plan order.
void check_split_set(const Plan& plan, const WriteResult& r, size_t shards) {
  ASSERT_EQ(r.paths.size(), shards);
  ASSERT_TRUE(r.verified);
  std::vector<std::string> names;
  for (size_t s = 0; s < shards; ++s) {
    SCOPED_TRACE(r.paths[s]);
    const auto f = GgufFile::open(r.paths[s]);
    EXPECT_EQ(f->alignment(), 64u);
    const auto& md = f->metadata();
    EXPECT_EQ(md.find("split.no")->type(), ValueType::kU16);
    EXPECT_EQ(md.get_uint("split.no"), s);
    EXPECT_EQ(md.find("split.count")->type(), ValueType::kU16);
    EXPECT_EQ(md.get_uint("split.count"), shards);
    EXPECT_EQ(md.find("split.tensors.count")->type(), ValueType::kI32);
    EXPECT_EQ(md.get_uint("split.tensors.count"), plan.tensors.size());
    EXPECT_EQ(md.size(), s == 0 ? plan.metadata.size() + 3 : 4u);
    EXPECT_EQ(md.find("general.architecture") != nullptr, s == 0);
    EXPECT_FALSE(f->tensors().empty());
    for (const auto& t : f->tensors()) names.push_back(t.name);
  }
  const auto m = Model::open(r.paths[0]);
  EXPECT_EQ(m.paths(), r.paths);
  ASSERT_EQ(m.tensors().size(), plan.tensors.size());
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    EXPECT_EQ(names[i], plan.tensors[i].name);
    const auto got = m.tensors()[i].data();
    const auto& want = payload_of(plan.tensors[i]);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin(), got.end()));
    EXPECT_EQ(r.tensors[i].shard, m.tensors()[i].shard);
    EXPECT_EQ(r.tensors[i].offset, m.tensors()[i].data_start());
  }
}

TEST(writer, splits_by_tensor_count) {
  ScratchDir dir;
  const Plan plan = split_plan();
  WriteOptions o;
  o.split_max_tensors = 3;
  const auto r = write_plan(plan, dir.file("model.gguf"), o);
  check_split_set(plan, r, 3);
  EXPECT_EQ(r.paths[0], dir.file("model-00001-of-00003.gguf"));
  EXPECT_EQ(r.paths[2], dir.file("model-00003-of-00003.gguf"));
  EXPECT_EQ(GgufFile::open(r.paths[2])->tensors().size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(dir.file("model.gguf")));
  EXPECT_EQ(dir.entries().size(), 3u);
}

TEST(writer, splits_by_size) {
  ScratchDir dir;
  const Plan plan = split_plan();
  const uint64_t limit = 4096;  // blk.1.w alone is 40 * 68 = 2720 bytes of payload
  WriteOptions o;
  o.split_max_size = limit;
  const auto r = write_plan(plan, dir.file("m"), o);  // no ".gguf": the prefix is the path
  ASSERT_GT(r.paths.size(), 1u);
  check_split_set(plan, r, r.paths.size());
  EXPECT_EQ(r.paths[0], dir.file(fmt::format("m-00001-of-{:05d}.gguf", r.paths.size())));
  size_t first = 0;
  std::shared_ptr<const GgufFile> prev;
  for (size_t s = 0; s < r.paths.size(); ++s) {
    const auto f = GgufFile::open(r.paths[s]);
    EXPECT_LE(f->file_size(), limit) << r.paths[s];
    if (prev) {
      // Greedy: this shard's first tensor would not have fitted into the previous shard.
      const PlanTensor& t = plan.tensors[first];
      const uint64_t info = 8 + t.name.size() + 4 + 8 * t.shape.size() + 4 + 8;
      EXPECT_GT(pad(prev->header_end() + info, 64) + (prev->file_size() - prev->data_offset()) +
                    pad(t.bytes, 64),
                limit)
          << r.paths[s];
    }
    first += f->tensors().size();
    prev = f;
  }
  // A tensor larger than the limit gets a shard of its own.
  ScratchDir dir2;
  o.split_max_size = 1024;
  const auto r2 = write_plan(plan, dir2.file("m.gguf"), o);
  check_split_set(plan, r2, r2.paths.size());
  for (const auto& p : r2.paths) {
    const auto f = GgufFile::open(p);
    if (f->file_size() > 1024) {
      EXPECT_EQ(f->tensors().size(), 1u) << p;
    }
  }
}

// A split set with more shards than the soft limit on open files allows (each shard holds a
// descriptor and a map open until the set is committed; the default soft limit is 1024):
// the writer and Model::open raise the soft limit towards the hard one.
TEST(writer, split_set_larger_than_the_soft_open_file_limit) {
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  size_t open_now = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) (void)e, ++open_now;
  constexpr size_t kShards = 120;
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < open_now + 4 * kShards + 128)
    GTEST_SKIP() << "hard limit on open files too low: " << saved.rlim_max;
  struct rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(open_now + 40);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  struct Restore {
    rlimit r;
    ~Restore() { ::setrlimit(RLIMIT_NOFILE, &r); }
  } restore{saved};
  ScratchDir dir;
  Plan plan;
  plan.metadata.set("general.architecture", Value::string("x"));
  for (size_t i = 0; i < kShards; ++i)
    plan.tensors.push_back(
        memory_tensor(fmt::format("blk.{}.w", i), GgmlType::Q8_0, {32, 2}, i + 1));
  WriteOptions o;
  o.split_max_tensors = 1;
  const auto r = write_plan(plan, dir.file("many.gguf"), o);
  ASSERT_EQ(r.paths.size(), kShards);
  EXPECT_TRUE(r.verified);
  // Two open models of the set at once (as gguf-diff holds them).
  const auto a = Model::open(r.paths[0]);
  const auto b = Model::open(r.paths[0]);
  ASSERT_EQ(a.tensors().size(), kShards);
  for (size_t i = 0; i < kShards; ++i) {
    const auto& want = payload_of(plan.tensors[i]);
    const auto got = b.tensors()[i].data();
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin(), got.end())) << i;
  }
}

TEST(writer, drops_stale_split_keys_from_single_output) {
  ScratchDir dir;
  Plan plan;
  plan.metadata.set("general.architecture", Value::string("x"));
  plan.metadata.set("split.no", Value::u16(1));
  plan.metadata.set("split.count", Value::u16(3));
  plan.metadata.set("split.tensors.count", Value::i32(7));
  plan.tensors.push_back(memory_tensor("t", GgmlType::F32, {2}));
  write_plan(plan, dir.file("one.gguf"), {});
  const auto m = Model::open(dir.file("one.gguf"));
  EXPECT_EQ(m.metadata().size(), 1u);
  EXPECT_EQ(m.architecture(), "x");
}

}  // namespace
}  // namespace gguf
