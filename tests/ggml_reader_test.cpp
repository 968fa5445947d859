// Conformance of the writer with ggml's own GGUF reader (gguf_init_from_file from
// libggml-base.so): ggml must accept every file we write and read the same keys, values,
// tensor types, shapes, offsets and payload bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "affine_fixture.h"
#include "ggml_ref.h"
#include "gguf/format/file.h"
#include "gguf/ops/affine.h"
#include "gguf/write/writer.h"
#include "gguf_builder.h"
#include "writer_test_util.h"

namespace gguf {
namespace {

using testing::memory_tensor;
using testing::payload_of;
using testing::ScratchDir;

// ggml's gguf.h, as function pointers resolved from the library (signatures from
// ggml/include/gguf.h; enums are passed as int).
struct GgufApi {
  using Ctx = const void*;
  uint32_t (*get_version)(Ctx) = nullptr;
  size_t (*get_alignment)(Ctx) = nullptr;
  size_t (*get_data_offset)(Ctx) = nullptr;
  int64_t (*get_n_kv)(Ctx) = nullptr;
  const char* (*get_key)(Ctx, int64_t) = nullptr;
  int (*get_kv_type)(Ctx, int64_t) = nullptr;
  int (*get_arr_type)(Ctx, int64_t) = nullptr;
  size_t (*get_arr_n)(Ctx, int64_t) = nullptr;
  const void* (*get_arr_data)(Ctx, int64_t) = nullptr;
  const char* (*get_arr_str)(Ctx, int64_t, size_t) = nullptr;
  uint8_t (*get_val_u8)(Ctx, int64_t) = nullptr;
  int8_t (*get_val_i8)(Ctx, int64_t) = nullptr;
  uint16_t (*get_val_u16)(Ctx, int64_t) = nullptr;
  int16_t (*get_val_i16)(Ctx, int64_t) = nullptr;
  uint32_t (*get_val_u32)(Ctx, int64_t) = nullptr;
  int32_t (*get_val_i32)(Ctx, int64_t) = nullptr;
  float (*get_val_f32)(Ctx, int64_t) = nullptr;
  uint64_t (*get_val_u64)(Ctx, int64_t) = nullptr;
  int64_t (*get_val_i64)(Ctx, int64_t) = nullptr;
  double (*get_val_f64)(Ctx, int64_t) = nullptr;
  bool (*get_val_bool)(Ctx, int64_t) = nullptr;
  const char* (*get_val_str)(Ctx, int64_t) = nullptr;
  int64_t (*get_n_tensors)(Ctx) = nullptr;
  const char* (*get_tensor_name)(Ctx, int64_t) = nullptr;
  int (*get_tensor_type)(Ctx, int64_t) = nullptr;
  size_t (*get_tensor_offset)(Ctx, int64_t) = nullptr;
  size_t (*get_tensor_size)(Ctx, int64_t) = nullptr;
  const int64_t* (*get_tensor_ne)(Ctx, int64_t) = nullptr;  // newer ggml only
  // ggml.h, for the tensors gguf_init_from_file creates when asked to load data.
  void* (*ggml_get_tensor)(void*, const char*) = nullptr;
  void* (*ggml_get_data)(const void*) = nullptr;
  size_t (*ggml_nbytes)(const void*) = nullptr;

  std::string missing;  // names of required symbols that were not found

  static const GgufApi& get() {
    static const GgufApi api = [] {
      GgufApi a;
      auto& g = testing::GgmlRef::get();
      auto load = [&](auto& fn, const char* name, bool required = true) {
        g.bind(fn, name, a.missing, required);
      };
      load(a.get_version, "gguf_get_version");
      load(a.get_alignment, "gguf_get_alignment");
      load(a.get_data_offset, "gguf_get_data_offset");
      load(a.get_n_kv, "gguf_get_n_kv");
      load(a.get_key, "gguf_get_key");
      load(a.get_kv_type, "gguf_get_kv_type");
      load(a.get_arr_type, "gguf_get_arr_type");
      load(a.get_arr_n, "gguf_get_arr_n");
      load(a.get_arr_data, "gguf_get_arr_data");
      load(a.get_arr_str, "gguf_get_arr_str");
      load(a.get_val_u8, "gguf_get_val_u8");
      load(a.get_val_i8, "gguf_get_val_i8");
      load(a.get_val_u16, "gguf_get_val_u16");
      load(a.get_val_i16, "gguf_get_val_i16");
      load(a.get_val_u32, "gguf_get_val_u32");
      load(a.get_val_i32, "gguf_get_val_i32");
      load(a.get_val_f32, "gguf_get_val_f32");
      load(a.get_val_u64, "gguf_get_val_u64");
      load(a.get_val_i64, "gguf_get_val_i64");
      load(a.get_val_f64, "gguf_get_val_f64");
      load(a.get_val_bool, "gguf_get_val_bool");
      load(a.get_val_str, "gguf_get_val_str");
      load(a.get_n_tensors, "gguf_get_n_tensors");
      load(a.get_tensor_name, "gguf_get_tensor_name");
      load(a.get_tensor_type, "gguf_get_tensor_type");
      load(a.get_tensor_offset, "gguf_get_tensor_offset");
      load(a.get_tensor_size, "gguf_get_tensor_size");
      load(a.get_tensor_ne, "gguf_get_tensor_ne", false);
      load(a.ggml_get_tensor, "ggml_get_tensor");
      load(a.ggml_get_data, "ggml_get_data");
      load(a.ggml_nbytes, "ggml_nbytes");
      return a;
    }();
    return api;
  }
};

using testing::GgmlGguf;

#define GGUF_REQUIRE_GGUF_API()                                                \
  do {                                                                         \
    GGUF_REQUIRE_GGML();                                                       \
    ASSERT_EQ(GgufApi::get().missing, "") << "ggml lacks gguf reader symbols"; \
  } while (0)

// ggml's view of value kv (scalar or array) must equal ours.
void expect_same_value(const GgufApi& api, const void* ctx, int64_t id, const Value& want) {
  ASSERT_EQ(api.get_kv_type(ctx, id), static_cast<int>(want.type()));
  auto same_bits = [&](auto got) {
    uint64_t bits = 0;
    std::memcpy(&bits, &got, sizeof(got));
    EXPECT_EQ(bits, want.bits());
  };
  switch (want.type()) {
    case ValueType::kU8:
      return same_bits(api.get_val_u8(ctx, id));
    case ValueType::kI8:
      return same_bits(api.get_val_i8(ctx, id));
    case ValueType::kU16:
      return same_bits(api.get_val_u16(ctx, id));
    case ValueType::kI16:
      return same_bits(api.get_val_i16(ctx, id));
    case ValueType::kU32:
      return same_bits(api.get_val_u32(ctx, id));
    case ValueType::kI32:
      return same_bits(api.get_val_i32(ctx, id));
    case ValueType::kF32:
      return same_bits(api.get_val_f32(ctx, id));
    case ValueType::kU64:
      return same_bits(api.get_val_u64(ctx, id));
    case ValueType::kI64:
      return same_bits(api.get_val_i64(ctx, id));
    case ValueType::kF64:
      return same_bits(api.get_val_f64(ctx, id));
    case ValueType::kBool:
      EXPECT_EQ(api.get_val_bool(ctx, id), *want.as_bool());
      return;
    case ValueType::kString:
      EXPECT_EQ(api.get_val_str(ctx, id), *want.as_string());
      return;
    case ValueType::kArray:
      break;
  }
  ASSERT_EQ(api.get_arr_type(ctx, id), static_cast<int>(want.array_type()));
  ASSERT_EQ(api.get_arr_n(ctx, id), want.array_size());
  if (want.array_type() == ValueType::kString) {
    for (size_t i = 0; i < want.array_size(); ++i)
      EXPECT_EQ(api.get_arr_str(ctx, id, i), want.strings()[i]) << i;
  } else if (want.array_size() > 0) {
    const auto* data = static_cast<const uint8_t*>(api.get_arr_data(ctx, id));
    EXPECT_TRUE(std::equal(want.packed().begin(), want.packed().end(), data));
  }
}

// Opens path with ggml and compares everything ggml reports with what we meant to write.
void expect_ggml_agrees(const std::string& path, const Metadata& md,
                        const std::vector<const PlanTensor*>& tensors, uint32_t version = 3) {
  const auto& api = GgufApi::get();
  GgmlGguf g(path, false);
  ASSERT_NE(g.ctx(), nullptr) << "ggml refused " << path;
  const auto ours = GgufFile::open(path);
  EXPECT_EQ(api.get_version(g.ctx()), version);
  EXPECT_EQ(api.get_alignment(g.ctx()), ours->alignment());
  EXPECT_EQ(api.get_data_offset(g.ctx()), ours->data_offset());
  ASSERT_EQ(api.get_n_kv(g.ctx()), static_cast<int64_t>(md.size()));
  for (size_t i = 0; i < md.size(); ++i) {
    const KeyValue& kv = md.entries()[i];
    SCOPED_TRACE(kv.key);
    EXPECT_EQ(api.get_key(g.ctx(), i), kv.key);
    expect_same_value(api, g.ctx(), static_cast<int64_t>(i), kv.value);
  }
  ASSERT_EQ(api.get_n_tensors(g.ctx()), static_cast<int64_t>(tensors.size()));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const PlanTensor& t = *tensors[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(api.get_tensor_name(g.ctx(), i), t.name);
    EXPECT_EQ(api.get_tensor_type(g.ctx(), i), static_cast<int>(t.type_id));
    EXPECT_EQ(api.get_tensor_offset(g.ctx(), i), ours->tensors()[i].offset);
    EXPECT_EQ(api.get_tensor_size(g.ctx(), i), t.bytes);
    if (api.get_tensor_ne) {
      const int64_t* ne = api.get_tensor_ne(g.ctx(), i);
      for (size_t d = 0; d < 4; ++d) EXPECT_EQ(ne[d], d < t.shape.size() ? t.shape[d] : 1) << d;
    }
  }
  if (!api.get_tensor_ne)
    std::printf("note: this ggml has no gguf_get_tensor_ne; shapes compared by size only\n");
}

std::vector<const PlanTensor*> pointers(const std::vector<PlanTensor>& ts) {
  std::vector<const PlanTensor*> out;
  for (const auto& t : ts) out.push_back(&t);
  return out;
}

Metadata all_value_types() {
  Metadata md;
  md.set("general.architecture", Value::string("conformance"));
  md.set("general.alignment", Value::u32(64));
  md.set("v.u8", Value::u8(250));
  md.set("v.i8", Value::i8(-100));
  md.set("v.u16", Value::u16(54321));
  md.set("v.i16", Value::i16(-12345));
  md.set("v.u32", Value::u32(3000000000u));
  md.set("v.i32", Value::i32(-123456789));
  md.set("v.f32", Value::f32(-2.75f));
  md.set("v.bool", Value::boolean(true));
  md.set("v.false", Value::boolean(false));
  md.set("v.string", Value::string("gr\xC3\xBC\xC3\x9F dich \"ggml\"\n"));
  md.set("v.u64", Value::u64(std::numeric_limits<uint64_t>::max() - 1));
  md.set("v.i64", Value::i64(std::numeric_limits<int64_t>::min() + 1));
  md.set("v.f64", Value::f64(1e-300));
  const uint8_t u8s[] = {1, 2, 255};
  const int8_t i8s[] = {-1, 127};
  const uint16_t u16s[] = {65535, 0};
  const int16_t i16s[] = {-2, 3};
  const uint32_t u32s[] = {1, 2, 3, 4};
  const int32_t i32s[] = {-7};
  const float f32s[] = {0.5f, -1e30f};
  const uint8_t bools[] = {0, 1, 1, 0};
  const uint64_t u64s[] = {uint64_t{1} << 40};
  const int64_t i64s[] = {-(int64_t{1} << 50), 5};
  const double f64s[] = {2.5, -0.125};
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
  md.set("a.string", Value::string_array({"<s>", "", "\xE2\x96\x81the"}));
  md.set("a.empty", Value::scalar_array(ValueType::kF32, {}));
  return md;
}

// Several types, quantized ones included, 3-D expert tensors, a zero-size tensor.
std::vector<PlanTensor> mixed_tensors() {
  return {
      memory_tensor("token_embd.weight", GgmlType::F16, {256, 16}, 1),
      memory_tensor("blk.0.attn_norm.weight", GgmlType::F32, {256}, 2),
      memory_tensor("blk.0.attn_q.weight", GgmlType::Q8_0, {256, 64}, 3),
      memory_tensor("blk.0.attn_k.weight", GgmlType::Q4_0, {256, 32}, 4),
      memory_tensor("blk.0.attn_v.weight", GgmlType::BF16, {256, 8}, 5),
      memory_tensor("blk.0.ffn_gate_exps.weight", GgmlType::IQ2_XXS, {256, 32, 8}, 6),
      memory_tensor("blk.0.ffn_up_exps.weight", GgmlType::IQ2_XXS, {256, 32, 8}, 7),
      memory_tensor("blk.0.ffn_down_exps.weight", GgmlType::Q2_K, {512, 16, 8}, 8),
      memory_tensor("blk.1.ffn_down_exps.weight", GgmlType::Q4_K, {256, 16, 4}, 9),
      memory_tensor("blk.1.ffn_up_exps.weight", GgmlType::Q6_K, {256, 3, 5}, 10),
      memory_tensor("blk.1.ffn_gate_exps.weight", GgmlType::IQ4_XS, {256, 7, 2}, 11),
      memory_tensor("blk.1.attn_q.weight", GgmlType::Q5_K, {256, 5}, 12),
      memory_tensor("blk.1.empty", GgmlType::F32, {0, 4}, 13),
      memory_tensor("blk.1.4d", GgmlType::Q8_0, {32, 2, 3, 2}, 14),
      memory_tensor("output.weight", GgmlType::MXFP4, {64, 9}, 15),
  };
}

TEST(ggml_reader, reads_every_value_type) {
  GGUF_REQUIRE_GGUF_API();
  ScratchDir dir;
  Plan plan;
  plan.metadata = all_value_types();
  plan.tensors.push_back(memory_tensor("t", GgmlType::F32, {3}));
  write_plan(plan, dir.file("kv.gguf"), {});
  expect_ggml_agrees(dir.file("kv.gguf"), plan.metadata, pointers(plan.tensors));
}

TEST(ggml_reader, agrees_on_tensor_layout_at_alignment_64) {
  GGUF_REQUIRE_GGUF_API();
  ScratchDir dir;
  Plan plan;
  plan.metadata = all_value_types();
  plan.tensors = mixed_tensors();
  write_plan(plan, dir.file("t.gguf"), {});
  expect_ggml_agrees(dir.file("t.gguf"), plan.metadata, pointers(plan.tensors));
}

TEST(ggml_reader, agrees_at_default_alignment_and_version_2) {
  GGUF_REQUIRE_GGUF_API();
  ScratchDir dir;
  Plan plan;
  plan.version = 2;
  plan.metadata.set("general.architecture", Value::string("v2"));
  plan.tensors = mixed_tensors();
  write_plan(plan, dir.file("v2.gguf"), {});
  expect_ggml_agrees(dir.file("v2.gguf"), plan.metadata, pointers(plan.tensors), 2);
}

TEST(ggml_reader, loads_the_same_payload_bytes) {
  GGUF_REQUIRE_GGUF_API();
  const auto& api = GgufApi::get();
  ScratchDir dir;
  Plan plan;
  plan.metadata.set("general.alignment", Value::u32(64));
  plan.tensors = mixed_tensors();
  write_plan(plan, dir.file("d.gguf"), {});
  // Loading data makes ggml read the whole padded blob, final padding included.
  GgmlGguf g(dir.file("d.gguf"), true);
  ASSERT_NE(g.ctx(), nullptr);
  ASSERT_NE(g.data_ctx(), nullptr);
  for (const auto& t : plan.tensors) {
    SCOPED_TRACE(t.name);
    void* gt = api.ggml_get_tensor(g.data_ctx(), t.name.c_str());
    ASSERT_NE(gt, nullptr);
    ASSERT_EQ(api.ggml_nbytes(gt), t.bytes);
    const auto* data = static_cast<const uint8_t*>(api.ggml_get_data(gt));
    const auto& want = payload_of(t);
    EXPECT_TRUE(want.empty() || std::equal(want.begin(), want.end(), data));
  }
}

TEST(ggml_reader, accepts_every_shard_of_a_split_set) {
  GGUF_REQUIRE_GGUF_API();
  ScratchDir dir;
  Plan plan;
  plan.metadata = all_value_types();
  plan.tensors = mixed_tensors();
  WriteOptions o;
  o.split_max_size = 48 * 1024;
  const auto r = write_plan(plan, dir.file("s.gguf"), o);
  ASSERT_GT(r.paths.size(), 2u);
  size_t next = 0;
  for (size_t s = 0; s < r.paths.size(); ++s) {
    SCOPED_TRACE(r.paths[s]);
    const auto ours = GgufFile::open(r.paths[s]);
    std::vector<const PlanTensor*> ts;
    for (size_t i = 0; i < ours->tensors().size(); ++i) ts.push_back(&plan.tensors[next++]);
    // The writer's own metadata for this shard (split keys added) is what ggml must see.
    expect_ggml_agrees(r.paths[s], ours->metadata(), ts);
    const auto& md = ours->metadata();
    EXPECT_EQ(md.get_uint("split.no"), s);
    EXPECT_EQ(md.find("general.architecture") != nullptr, s == 0);
  }
  EXPECT_EQ(next, plan.tensors.size());
}

// The harness sees refusals: ggml rejects a gap between payloads, and (when loading data) a
// file without the padding after the last payload, which is why the writer writes it.
TEST(ggml_reader, refuses_what_the_writer_must_not_write) {
  GGUF_REQUIRE_GGUF_API();
  ScratchDir dir;
  Plan plan;
  plan.tensors = {memory_tensor("a", GgmlType::F32, {3}, 1),
                  memory_tensor("b", GgmlType::F32, {5}, 2)};
  const std::string path = dir.file("p.gguf");
  write_plan(plan, path, {});
  {
    GgmlGguf ok(path, true);
    EXPECT_NE(ok.ctx(), nullptr);
  }
  const auto f = GgufFile::open(path);
  const TensorInfo& b = f->tensors()[1];
  const uint64_t at = b.info_offset + 8 + b.name.size() + 4 + 8 * b.shape.size() + 4;
  const uint64_t final_pad = f->file_size() - f->data_start(b) - *b.bytes;
  ASSERT_GT(final_pad, 0u);
  {
    // Truncated by the final padding: our reader accepts it, ggml cannot load the blob.
    std::filesystem::copy_file(path, dir.file("short.gguf"));
    std::filesystem::resize_file(dir.file("short.gguf"), f->file_size() - final_pad);
    GgmlGguf g(dir.file("short.gguf"), true);
    EXPECT_EQ(g.ctx(), nullptr);
  }
  {
    // One alignment unit of gap before "b".
    std::filesystem::copy_file(path, dir.file("gap.gguf"));
    std::fstream io(dir.file("gap.gguf"), std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t off = b.offset + 32;
    io.seekp(static_cast<std::streamoff>(at));
    io.write(reinterpret_cast<const char*>(&off), 8);
    io.close();
    GgmlGguf g(dir.file("gap.gguf"), false);
    EXPECT_EQ(g.ctx(), nullptr);
  }
}

// Cases where ggml's reader and ours once disagreed (a differential fuzz): both accept or both
// refuse, and where both accept they place the data at the same offset.
TEST(ggml_reader, agrees_on_odd_files_other_tools_may_write) {
  GGUF_REQUIRE_GGUF_API();
  const auto& api = GgufApi::get();
  ScratchDir dir;
  using testing::GgufBuilder;
  const auto ours = [](const std::string& path) -> std::shared_ptr<const GgufFile> {
    try {
      return GgufFile::open(path);
    } catch (const Error&) {
      return nullptr;
    }
  };
  {
    // A key that reads "general.alignment" up to a NUL byte comes first: ggml uses it.
    GgufBuilder b;
    b.u32(std::string("general.alignment\0x", 19), 64);
    b.u32("general.alignment", 32);
    b.tensor("a", 0, {8}, std::vector<uint8_t>(128, 7));
    b.write_file(dir.file("nul.gguf"));
    GgmlGguf g(dir.file("nul.gguf"), false);
    const auto f = ours(dir.file("nul.gguf"));
    ASSERT_NE(g.ctx(), nullptr);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(api.get_data_offset(g.ctx()), f->data_offset());
  }
  {
    // Every tensor empty, but the data section would start past the end of the file.
    GgufBuilder b;
    b.u32("general.alignment", 4096);
    b.tensor("z", 0, {0}, {});
    b.write_file(dir.file("past.gguf"));
    GgmlGguf g(dir.file("past.gguf"), false);
    EXPECT_EQ(g.ctx(), nullptr);
    EXPECT_EQ(ours(dir.file("past.gguf")), nullptr);
  }
  {
    // An empty tensor name.
    GgufBuilder b;
    b.tensor("", 0, {8});
    b.write_file(dir.file("empty.gguf"));
    GgmlGguf g(dir.file("empty.gguf"), false);
    EXPECT_NE(g.ctx(), nullptr);
    EXPECT_NE(ours(dir.file("empty.gguf")), nullptr);
  }
}

// The lossless import, judged by ggml: the file gguf-requant writes from a packed-affine
// safetensors file loads in ggml's reader, and ggml's own q4_1 / q5_1 decoders turn the payloads
// it loaded into exactly the floats code * scale + min (computed by the test fixture, apart from
// the library), NaN payloads and signed zeros included.
TEST(ggml_reader, decodes_packed_affine_imports_to_the_same_bits) {
  GGUF_REQUIRE_GGUF_API();
  const auto& api = GgufApi::get();
  const auto& ggml = testing::GgmlRef::get();
  ScratchDir dir;
  uint64_t seed = 4000;
  for (auto kind : {testing::AffineValues::kWeights, testing::AffineValues::kSpecial})
    for (unsigned bits = 1; bits <= 5; ++bits)
      for (uint64_t group : {32, 128}) {
        testing::AffineFile af(++seed);
        af.add_packed("blk.0.ffn_down_exps.weight", bits, group, {4, 16, 256}, kind);
        af.add_packed("blk.0.attn_output.weight", bits, group, {33, 128}, kind);
        af.add_plain("blk.0.attn_norm.weight", "F32", {128});
        const std::string in = af.write(dir.file("in.safetensors"));
        const auto file = SafetensorsFile::open(in);
        for (auto type : {std::optional<GgmlType>(), std::optional<GgmlType>(GgmlType::Q5_1)}) {
          SCOPED_TRACE(::testing::Message()
                       << "bits " << bits << " group " << group << " " << (type ? "q5_1" : "auto"));
          const ImportResult r = import_safetensors(file, {type});
          const std::string out =
              dir.file("out-" + std::to_string(seed) + (type ? "-q5_1" : "") + ".gguf");
          write_plan(r.plan, out, {});
          GgmlGguf g(out, true);
          ASSERT_NE(g.ctx(), nullptr);
          ASSERT_NE(g.data_ctx(), nullptr);
          for (const char* name : {"blk.0.ffn_down_exps.weight", "blk.0.attn_output.weight"}) {
            const auto& d = af.data(name);
            const int64_t id = [&] {
              for (int64_t i = 0; i < api.get_n_tensors(g.ctx()); ++i)
                if (std::string(api.get_tensor_name(g.ctx(), i)) == name) return i;
              return int64_t{-1};
            }();
            ASSERT_GE(id, 0) << name;
            const int want_type = type || bits == 5 ? 7 : 3;  // GGML_TYPE_Q5_1, GGML_TYPE_Q4_1
            EXPECT_EQ(api.get_tensor_type(g.ctx(), id), want_type);
            void* gt = api.ggml_get_tensor(g.data_ctx(), name);
            ASSERT_NE(gt, nullptr);
            const uint64_t n = d.rows * d.cols;
            std::vector<float> got(n);
            ASSERT_TRUE(ggml.dequantize_row(want_type, api.ggml_get_data(gt), got.data(),
                                            static_cast<int64_t>(n)));
            const auto want = testing::AffineFile::values(d);
            EXPECT_TRUE(testing::same_bits(got, want)) << name;
          }
        }
      }
}

}  // namespace
}  // namespace gguf
