// Files written by another tool: ggml's own GGUF writer (gguf_write_to_file from
// libggml-base.so, as llama.cpp's quantizer and converters use it). We must read every key,
// value, tensor and payload byte exactly, find nothing to complain about in --check, and our
// tools must work on such files (splice one into another, diff, re-encode).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cli_run.h"
#include "ggml_ref.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/file.h"
#include "gguf/format/model.h"
#include "gguf/ops/check.h"
#include "gguf/ops/synth.h"

namespace gguf {
namespace {

using testing::run_cli;
using testing::TempDir;

// ggml.h / gguf.h writer entry points (enums passed as int; ggml_init_params by value).
struct WriterApi {
  struct InitParams {
    size_t mem_size;
    void* mem_buffer;
    bool no_alloc;
  };
  void* (*ggml_init)(InitParams) = nullptr;
  void (*ggml_free)(void*) = nullptr;
  void* (*new_tensor_1d)(void*, int, int64_t) = nullptr;
  void* (*new_tensor_3d)(void*, int, int64_t, int64_t, int64_t) = nullptr;
  void* (*set_name)(void*, const char*) = nullptr;
  void* (*get_data)(const void*) = nullptr;
  size_t (*nbytes)(const void*) = nullptr;
  void* (*init_empty)() = nullptr;
  void (*gguf_free)(void*) = nullptr;
  void (*set_u8)(void*, const char*, uint8_t) = nullptr;
  void (*set_i8)(void*, const char*, int8_t) = nullptr;
  void (*set_u16)(void*, const char*, uint16_t) = nullptr;
  void (*set_i16)(void*, const char*, int16_t) = nullptr;
  void (*set_u32)(void*, const char*, uint32_t) = nullptr;
  void (*set_i32)(void*, const char*, int32_t) = nullptr;
  void (*set_f32)(void*, const char*, float) = nullptr;
  void (*set_u64)(void*, const char*, uint64_t) = nullptr;
  void (*set_i64)(void*, const char*, int64_t) = nullptr;
  void (*set_f64)(void*, const char*, double) = nullptr;
  void (*set_bool)(void*, const char*, bool) = nullptr;
  void (*set_str)(void*, const char*, const char*) = nullptr;
  void (*set_arr_data)(void*, const char*, int, const void*, size_t) = nullptr;
  void (*set_arr_str)(void*, const char*, const char**, size_t) = nullptr;
  void (*add_tensor)(void*, const void*) = nullptr;
  bool (*write_to_file)(const void*, const char*, bool) = nullptr;
  std::string missing;

  static const WriterApi& get() {
    static const WriterApi api = [] {
      WriterApi a;
      auto& g = testing::GgmlRef::get();
      auto load = [&](auto& fn, const char* name, bool required = true) {
        g.bind(fn, name, a.missing, required);
      };
      load(a.ggml_init, "ggml_init");
      load(a.ggml_free, "ggml_free");
      load(a.new_tensor_1d, "ggml_new_tensor_1d");
      load(a.new_tensor_3d, "ggml_new_tensor_3d");
      load(a.set_name, "ggml_set_name");
      load(a.get_data, "ggml_get_data");
      load(a.nbytes, "ggml_nbytes");
      load(a.init_empty, "gguf_init_empty");
      load(a.gguf_free, "gguf_free");
      load(a.set_u8, "gguf_set_val_u8");
      load(a.set_i8, "gguf_set_val_i8");
      load(a.set_u16, "gguf_set_val_u16");
      load(a.set_i16, "gguf_set_val_i16");
      load(a.set_u32, "gguf_set_val_u32");
      load(a.set_i32, "gguf_set_val_i32");
      load(a.set_f32, "gguf_set_val_f32");
      load(a.set_u64, "gguf_set_val_u64");
      load(a.set_i64, "gguf_set_val_i64");
      load(a.set_f64, "gguf_set_val_f64");
      load(a.set_bool, "gguf_set_val_bool");
      load(a.set_str, "gguf_set_val_str");
      load(a.set_arr_data, "gguf_set_arr_data");
      load(a.set_arr_str, "gguf_set_arr_str");
      load(a.add_tensor, "gguf_add_tensor");
      load(a.write_to_file, "gguf_write_to_file");
      return a;
    }();
    return api;
  }
};

#define REQUIRE_WRITER()                 \
  GGUF_REQUIRE_GGML();                   \
  if (!WriterApi::get().missing.empty()) \
  GGUF_MISSING_REFERENCE("ggml lacks writer symbols:" << WriterApi::get().missing)

struct WrittenTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// A small MoE-like file written by ggml: every value type, an alignment of 64, an f32 vector,
// 3-D q4_K and iq4_xs expert tensors and an f16 matrix, with payloads we choose.
std::vector<WrittenTensor> write_with_ggml(const std::string& path, Metadata& expected) {
  const WriterApi& w = WriterApi::get();
  void* g = w.init_empty();
  const auto u32 = [&](const char* k, uint32_t v) {
    w.set_u32(g, k, v);
    expected.set(k, Value::u32(v));
  };
  w.set_str(g, "general.architecture", "llama");
  expected.set("general.architecture", Value::string("llama"));
  w.set_str(g, "general.name", "written by ggml");
  expected.set("general.name", Value::string("written by ggml"));
  u32("general.alignment", 64);
  u32("general.quantization_version", 2);
  u32("llama.block_count", 1);
  u32("llama.context_length", 64);
  u32("llama.embedding_length", 64);
  w.set_f32(g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  expected.set("llama.attention.layer_norm_rms_epsilon", Value::f32(1e-5f));
  w.set_str(g, "tokenizer.ggml.model", "none");  // a model without a vocabulary
  expected.set("tokenizer.ggml.model", Value::string("none"));
  w.set_u8(g, "t.u8", 200);
  expected.set("t.u8", Value::u8(200));
  w.set_i8(g, "t.i8", -100);
  expected.set("t.i8", Value::i8(-100));
  w.set_u16(g, "t.u16", 60000);
  expected.set("t.u16", Value::u16(60000));
  w.set_i16(g, "t.i16", -30000);
  expected.set("t.i16", Value::i16(-30000));
  w.set_i32(g, "t.i32", -2000000000);
  expected.set("t.i32", Value::i32(-2000000000));
  w.set_f32(g, "t.f32", 0.1f);
  expected.set("t.f32", Value::f32(0.1f));
  w.set_u64(g, "t.u64", 1ull << 63);
  expected.set("t.u64", Value::u64(1ull << 63));
  w.set_i64(g, "t.i64", -(1ll << 62));
  expected.set("t.i64", Value::i64(-(1ll << 62)));
  w.set_f64(g, "t.f64", 1e300);
  expected.set("t.f64", Value::f64(1e300));
  w.set_bool(g, "t.bool", true);
  expected.set("t.bool", Value::boolean(true));
  w.set_str(g, "t.utf8", "gr\xc3\xbc\xc3\x9f dich \xe2\x96\x81");
  expected.set("t.utf8", Value::string("gr\xc3\xbc\xc3\x9f dich \xe2\x96\x81"));
  const std::vector<float> farr = {1.5f, -2.25f, 3e-8f};
  w.set_arr_data(g, "t.arr_f32", 6, farr.data(), farr.size());  // GGUF_TYPE_FLOAT32
  expected.set("t.arr_f32", Value::array_of<float>(ValueType::kF32, farr));
  const std::vector<int32_t> iarr = {7, -8, 9, 1 << 30};
  w.set_arr_data(g, "t.arr_i32", 5, iarr.data(), iarr.size());  // GGUF_TYPE_INT32
  expected.set("t.arr_i32", Value::array_of<int32_t>(ValueType::kI32, iarr));
  const char* strs[] = {"", "a", "<0x0A>", "\xe2\x96\x81the"};
  w.set_arr_str(g, "t.arr_str", strs, 4);
  expected.set("t.arr_str", Value::string_array({"", "a", "<0x0A>", "\xe2\x96\x81the"}));

  std::vector<WrittenTensor> ts = {
      {"token_embd.weight", GgmlType::F16, {256, 8, 1}, {}},
      {"blk.0.attn_norm.weight", GgmlType::F32, {256}, {}},
      {"blk.0.ffn_up_exps.weight", GgmlType::Q4_K, {256, 16, 4}, {}},
      {"blk.0.ffn_down_exps.weight", GgmlType::IQ4_XS, {256, 16, 4}, {}},
      {"output.weight", GgmlType::Q8_0, {256, 8, 1}, {}},
  };
  void* ctx = w.ggml_init({size_t{16} << 20, nullptr, false});
  uint64_t seed = 3;
  for (auto& t : ts) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    std::vector<float> x(static_cast<size_t>(n));
    synth_rows(t.name, ++seed, t.shape[0], 0, n / t.shape[0], 0.05f, x.data());
    t.bytes.resize(*row_bytes(t.type, t.shape[0]) * (n / t.shape[0]));
    quantize(t.type, x, n / t.shape[0], t.shape[0], {}, t.bytes);
    void* gt = t.shape.size() == 1 ? w.new_tensor_1d(ctx, static_cast<int>(t.type), t.shape[0])
                                   : w.new_tensor_3d(ctx, static_cast<int>(t.type), t.shape[0],
                                                     t.shape[1], t.shape[2]);
    w.set_name(gt, t.name.c_str());
    EXPECT_EQ(w.nbytes(gt), t.bytes.size()) << t.name;
    std::memcpy(w.get_data(gt), t.bytes.data(), t.bytes.size());
    w.add_tensor(g, gt);
    // ggml stores trailing dimensions of 1 too when the tensor has them; we read ne as written.
    while (t.shape.size() > 1 && t.shape.back() == 1) t.shape.pop_back();
  }
  EXPECT_TRUE(w.write_to_file(g, path.c_str(), false));
  w.gguf_free(g);
  w.ggml_free(ctx);
  return ts;
}

TEST(ggml_writer, files_written_by_ggml_read_exactly) {
  REQUIRE_WRITER();
  TempDir dir;
  Metadata expected;
  const auto ts = write_with_ggml(dir.file("g.gguf"), expected);
  const auto f = GgufFile::open(dir.file("g.gguf"));
  EXPECT_EQ(f->metadata().size(), expected.size());
  for (const KeyValue& kv : expected.entries()) {
    const Value* got = f->metadata().find(kv.key);
    ASSERT_NE(got, nullptr) << kv.key;
    EXPECT_TRUE(*got == kv.value) << kv.key;
  }
  ASSERT_EQ(f->tensors().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorInfo& info = f->tensors()[i];
    EXPECT_EQ(info.name, ts[i].name);
    EXPECT_EQ(info.type_id, static_cast<uint32_t>(ts[i].type));
    EXPECT_EQ(info.offset % 64, 0u) << info.name;
    const auto data = f->tensor_data(info);
    ASSERT_EQ(data.size(), ts[i].bytes.size()) << info.name;
    EXPECT_EQ(0, std::memcmp(data.data(), ts[i].bytes.data(), data.size())) << info.name;
    std::vector<int64_t> shape = info.shape;
    while (shape.size() > 1 && shape.back() == 1) shape.pop_back();
    EXPECT_EQ(shape, ts[i].shape) << info.name;
  }
  const Model m = Model::open(dir.file("g.gguf"));
  const auto problems = check_model(m);
  for (const auto& p : problems)
    if (p.severity == "error") ADD_FAILURE() << "check: " << format_problem(p);
}

// Our tools on ggml-written files: inspect --check is clean, a splice into a copy re-encoded
// by gguf-requant keeps the donor's bytes, and diff sees exactly the spliced tensors as equal.
TEST(ggml_writer, tools_work_on_files_written_by_ggml) {
  REQUIRE_WRITER();
  TempDir dir;
  Metadata expected;
  write_with_ggml(dir.file("g.gguf"), expected);
  auto r = run_cli("gguf-inspect", {"--check", dir.file("g.gguf")});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  r = run_cli("gguf-requant",
              {dir.file("g.gguf"), "-o", dir.file("q.gguf"), "--type", "q4_0", "--force"});
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli("gguf-splice", {dir.file("q.gguf"), "--donor", dir.file("g.gguf"), "--role", "routed",
                              "-o", dir.file("s.gguf")});
  ASSERT_EQ(r.code, 0) << r.err;
  const Model g = Model::open(dir.file("g.gguf")), s = Model::open(dir.file("s.gguf"));
  for (const char* name : {"blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight"}) {
    const auto a = g.find(name)->data(), b = s.find(name)->data();
    ASSERT_EQ(a.size(), b.size()) << name;
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size())) << name;
  }
  r = run_cli("gguf-diff", {"--json", dir.file("g.gguf"), dir.file("s.gguf")});
  EXPECT_EQ(r.code, 1) << r.err;
  // Re-encoded by requant (q8_0 -> q4_0) and not spliced back: listed; spliced: not listed.
  EXPECT_NE(r.out.find("\"output.weight\""), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\"blk.0.ffn_up_exps.weight\""), std::string::npos) << r.out;
}

}  // namespace
}  // namespace gguf
