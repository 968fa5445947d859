// splice(): the plan it builds (payloads byte for byte from the right source, metadata kept in
// order, provenance, a truthful file type), every refusal with its exact message, split sets,
// and ggml's reader on the result.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <filesystem>
#include <fstream>

#include "ggml_ref.h"
#include "gguf/format/hash.h"
#include "splice_test_util.h"

namespace gguf {
namespace {

using splice_test::copy_plan;
using splice_test::fx;
using splice_test::kind_of;
using splice_test::message_of;
using splice_test::routed_in;
using splice_test::Scratch;
using splice_test::selector;

SpliceResult splice_one(const Model& base, const Model& donor, Selector s, SpliceOptions o = {}) {
  const Donor d{&donor, std::move(s)};
  return splice(base, std::span<const Donor>(&d, 1), o);
}

uint64_t hash_of(const TensorRef& t) {
  const auto b = t.data();
  return XXH3_64bits(b.data(), b.size());
}

// Every output tensor equals, in name, type, shape and payload hash, the tensor of the model
// it should come from: the donor for routed experts of layers lo..hi, the base otherwise.
void expect_spliced(const Model& out, const Model& base, const Model& donor, int lo, int hi) {
  ASSERT_EQ(out.tensors().size(), base.tensors().size());
  size_t from_donor = 0;
  for (size_t i = 0; i < out.tensors().size(); ++i) {
    const TensorRef& o = out.tensors()[i];
    ASSERT_EQ(o.name(), base.tensors()[i].name());
    const bool take = routed_in(o.name(), lo, hi);
    const TensorRef* want = take ? donor.find(o.name()) : &base.tensors()[i];
    ASSERT_NE(want, nullptr);
    from_donor += take;
    EXPECT_EQ(o.info->type_id, want->info->type_id) << o.name();
    EXPECT_EQ(o.info->shape, want->info->shape) << o.name();
    EXPECT_EQ(hash_of(o), hash_of(*want)) << o.name();
  }
  EXPECT_EQ(from_donor, static_cast<size_t>(3 * (hi - lo + 1)));
}

TEST(splice, routed_layers_come_byte_for_byte_from_the_donor) {
  const Model base = Model::open(fx().base), donor = Model::open(fx().donor);
  const SpliceResult r = splice_one(base, donor, selector({"3-5"}));
  EXPECT_EQ(r.spliced, 9u);
  for (const auto& row : r.rows) {
    const bool take = routed_in(row.name, 3, 5);
    EXPECT_EQ(row.action, take ? PlanAction::kSplice : PlanAction::kCopy) << row.name;
    EXPECT_EQ(row.source, take ? fx().donor : fx().base);
    if (take) {
      EXPECT_EQ(type_name(row.type_before), "f16");
      EXPECT_EQ(type_name(row.type_after), "f32");
      EXPECT_EQ(row.bytes_before, 256u * 256 * 4 * 2);
      EXPECT_EQ(row.bytes_after, 256u * 256 * 4 * 4);
    }
  }
  EXPECT_EQ(r.tensor_bytes_after - r.tensor_bytes_before, 9u * 256 * 256 * 4 * 2);
  Scratch dir;
  const std::string out = dir.file("out.gguf");
  const WriteResult w = write_plan(r.plan, out, {});
  EXPECT_TRUE(w.verified);
  EXPECT_EQ(w.bytes, r.bytes_after);
  EXPECT_EQ(std::filesystem::file_size(out), r.bytes_after);
  expect_spliced(Model::open(out), base, donor, 3, 5);
}

TEST(splice, keeps_base_metadata_in_order_and_records_provenance) {
  const Model base = Model::open(fx().base), donor = Model::open(fx().donor);
  const SpliceResult r = splice_one(base, donor, selector({"3-5"}));
  Scratch dir;
  write_plan(r.plan, dir.file("out.gguf"), {});
  const Model out = Model::open(dir.file("out.gguf"));
  const auto& want = base.metadata().entries();
  const auto& got = out.metadata().entries();
  ASSERT_EQ(got.size(), want.size() + 5);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].key, want[i].key);
    EXPECT_TRUE(got[i].value == want[i].value) << want[i].key;  // file type stays f16
  }
  // The donor's header bytes, hashed here independently of the library.
  const GgufFile& df = donor.first();
  std::vector<char> header(df.header_end());
  std::ifstream(fx().donor, std::ios::binary).read(header.data(), header.size());
  const std::string header_hash = fmt::format("{:016x}", XXH3_64bits(header.data(), header.size()));
  const Metadata& m = out.metadata();
  EXPECT_EQ(got[want.size()].key, "splice.base");
  EXPECT_EQ(m.get_string("splice.base"), "base.gguf");
  EXPECT_EQ(m.find("splice.donors")->strings(), std::vector<std::string>{"donor.gguf"});
  EXPECT_EQ(m.find("splice.donor_header_xxh3")->strings(), std::vector<std::string>{header_hash});
  EXPECT_EQ(m.find("splice.selectors")->strings(),
            std::vector<std::string>{"layers 3-5, role routed-gate|routed-up|routed-down"});
  EXPECT_EQ(m.get_uint("splice.tensor_count"), 9u);
  EXPECT_EQ(m.find("split.count"), nullptr);
}

TEST(splice, file_type_follows_the_type_holding_most_weights) {
  const Model base = Model::open(fx().base), donor = Model::open(fx().donor);
  // Layers 3-5: f16 still holds most weights, so MOSTLY_F16 (1) stays.
  SpliceResult r = splice_one(base, donor, selector({"3-5"}));
  EXPECT_EQ(r.file_type_before, 1u);
  EXPECT_EQ(r.file_type_after, 1u);
  EXPECT_EQ(r.plan.metadata.get_uint("general.file_type"), 1u);
  // All routed experts (6 x 3 x 262144 f32 weights against about 4.4M f16): ALL_F32 (0).
  r = splice_one(base, donor, selector({}));
  EXPECT_EQ(r.spliced, 18u);
  EXPECT_EQ(r.file_type_after, 0u);
  EXPECT_EQ(r.plan.metadata.get_uint("general.file_type"), 0u);
  // The key keeps its position.
  const auto& e = r.plan.metadata.entries();
  const auto& b = base.metadata().entries();
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(e[i].key, b[i].key);
}

TEST(splice, ftype_table_matches_llama_h) {
  const auto f = [](GgmlType t) { return ftype_of_type(static_cast<uint32_t>(t)); };
  EXPECT_EQ(f(GgmlType::F32), 0u);
  EXPECT_EQ(f(GgmlType::F16), 1u);
  EXPECT_EQ(f(GgmlType::Q4_0), 2u);
  EXPECT_EQ(f(GgmlType::Q4_1), 3u);
  EXPECT_EQ(f(GgmlType::Q8_0), 7u);
  EXPECT_EQ(f(GgmlType::Q5_0), 8u);
  EXPECT_EQ(f(GgmlType::Q5_1), 9u);
  EXPECT_EQ(f(GgmlType::Q2_K), 10u);
  EXPECT_EQ(f(GgmlType::Q3_K), 12u);  // Q3_K_M
  EXPECT_EQ(f(GgmlType::Q4_K), 15u);  // Q4_K_M
  EXPECT_EQ(f(GgmlType::Q5_K), 17u);  // Q5_K_M
  EXPECT_EQ(f(GgmlType::Q6_K), 18u);
  EXPECT_EQ(f(GgmlType::IQ2_XXS), 19u);
  EXPECT_EQ(f(GgmlType::IQ2_XS), 20u);
  EXPECT_EQ(f(GgmlType::IQ3_XXS), 23u);
  EXPECT_EQ(f(GgmlType::IQ1_S), 24u);
  EXPECT_EQ(f(GgmlType::IQ4_NL), 25u);
  EXPECT_EQ(f(GgmlType::IQ3_S), 26u);
  EXPECT_EQ(f(GgmlType::IQ2_S), 28u);
  EXPECT_EQ(f(GgmlType::IQ4_XS), 30u);
  EXPECT_EQ(f(GgmlType::IQ1_M), 31u);
  EXPECT_EQ(f(GgmlType::BF16), 32u);
  EXPECT_EQ(f(GgmlType::TQ1_0), 36u);
  EXPECT_EQ(f(GgmlType::TQ2_0), 37u);
  EXPECT_EQ(f(GgmlType::MXFP4), 38u);
  for (GgmlType t : {GgmlType::Q8_1, GgmlType::Q8_K, GgmlType::I32, GgmlType::F64})
    EXPECT_EQ(f(t), std::nullopt) << type_name(static_cast<uint32_t>(t));
}

TEST(splice, dominant_ftype_counts_matrix_weights_and_gives_up_when_none_fits) {
  const auto t = [](GgmlType type, std::vector<int64_t> shape) {
    PlanTensor p;
    p.type_id = static_cast<uint32_t>(type);
    p.shape = std::move(shape);
    return p;
  };
  // 1-D tensors do not count while there are matrices: f32 norms never make a file "all f32".
  EXPECT_EQ(dominant_ftype({t(GgmlType::F32, {1 << 20}), t(GgmlType::Q4_K, {256, 4})}), 15u);
  EXPECT_EQ(dominant_ftype({t(GgmlType::IQ2_XXS, {256, 512, 8}), t(GgmlType::Q4_K, {256, 1024})}),
            19u);
  EXPECT_EQ(dominant_ftype({t(GgmlType::F32, {64})}), 0u);
  // A tie goes to the lower type id (f16 before q4_K).
  EXPECT_EQ(dominant_ftype({t(GgmlType::Q4_K, {256, 2}), t(GgmlType::F16, {256, 2})}), 1u);
  EXPECT_EQ(dominant_ftype({t(GgmlType::I32, {256, 8}), t(GgmlType::F16, {256, 2})}), std::nullopt);
  EXPECT_EQ(dominant_ftype({}), std::nullopt);
}

// llama_ftype numbers of the newest types (llama.h: MOSTLY_Q1_0 = 40, MOSTLY_Q2_0 = 41).
TEST(splice, ftype_of_the_newest_types) {
  EXPECT_EQ(ftype_of_type(static_cast<uint32_t>(GgmlType::Q1_0)), 40u);
  EXPECT_EQ(ftype_of_type(static_cast<uint32_t>(GgmlType::Q2_0)), 41u);
  EXPECT_EQ(ftype_of_type(static_cast<uint32_t>(GgmlType::Q4_K)), 15u);  // Q4_K_M
  EXPECT_EQ(ftype_of_type(static_cast<uint32_t>(GgmlType::I32)), std::nullopt);
}

// A tensor of the given type and shape whose bytes are all 1, held in memory.
PlanTensor mem(const char* name, GgmlType type, std::vector<int64_t> shape) {
  PlanTensor t;
  t.name = name;
  t.type_id = static_cast<uint32_t>(type);
  t.shape = std::move(shape);
  t.bytes = expected_bytes(t);
  t.source = MemoryBytes{std::make_shared<const std::vector<uint8_t>>(t.bytes, uint8_t{1})};
  return t;
}

TEST(splice, file_type_is_removed_when_no_ftype_fits) {
  Scratch dir;
  Plan b, d;
  b.metadata.set("general.architecture", Value::string("deepseek2"));
  b.metadata.set("general.file_type", Value::u32(1));
  d.metadata = b.metadata;
  b.tensors = {mem("blk.0.ffn_down_exps.weight", GgmlType::F16, {32, 8, 2}),
               mem("blk.0.attn_q_a.weight", GgmlType::F16, {32, 4})};
  d.tensors = {mem("blk.0.ffn_down_exps.weight", GgmlType::I32, {32, 8, 2}),
               mem("blk.0.attn_q_a.weight", GgmlType::F16, {32, 4})};
  write_plan(b, dir.file("b.gguf"), {});
  write_plan(d, dir.file("d.gguf"), {});
  const Model base = Model::open(dir.file("b.gguf")), donor = Model::open(dir.file("d.gguf"));
  const SpliceResult r = splice_one(base, donor, selector({}));
  EXPECT_EQ(r.plan.metadata.find("general.file_type"), nullptr);
  EXPECT_EQ(r.file_type_after, std::nullopt);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0],
            "general.file_type removed: the type holding most weights has no llama_ftype");
}

// llama.cpp refuses general.file_type of any type but u32 ("key general.file_type has wrong
// type i32 but expected type u32"): a base that stored it so is repaired in the output even
// when the value stays, with a warning, not carried over as it was.
TEST(splice, file_type_of_another_integer_type_is_written_as_u32) {
  Scratch dir;
  for (const Value& stored : {Value::i32(1), Value::u64(1), Value::u16(1)}) {
    SCOPED_TRACE(value_type_name(stored.type()));
    Plan b, d;
    b.metadata.set("general.architecture", Value::string("deepseek2"));
    b.metadata.set("general.file_type", stored);
    d.metadata = b.metadata;
    b.tensors = {mem("blk.0.ffn_down_exps.weight", GgmlType::F16, {32, 8, 2}),
                 mem("blk.0.attn_q_a.weight", GgmlType::F16, {32, 4})};
    d.tensors = b.tensors;
    WriteOptions replace;
    replace.force = true;
    write_plan(b, dir.file("b.gguf"), replace);
    write_plan(d, dir.file("d.gguf"), replace);
    const Model base = Model::open(dir.file("b.gguf")), donor = Model::open(dir.file("d.gguf"));
    const SpliceResult r = splice_one(base, donor, selector({}));
    const Value* v = r.plan.metadata.find("general.file_type");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->type(), ValueType::kU32);
    EXPECT_EQ(v->as_uint(), 1u);
    EXPECT_EQ(r.file_type_before, 1u);
    EXPECT_EQ(r.file_type_after, 1u);
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_EQ(r.warnings[0], fmt::format("general.file_type was stored as {}; written as u32, the "
                                         "type llama.cpp reads",
                                         value_type_name(stored.type())));
  }
}

// llama-quantize's IQ2_S (28) makes a file mostly of iq2_xs (its IQ2_M, 29, is the one mostly of
// iq2_s): a splice that leaves iq2_xs the main type keeps 28, as it keeps Q4_K_S.
TEST(splice, file_type_iq2_s_of_a_mostly_iq2_xs_file_is_kept) {
  Scratch dir;
  const auto mem = [](const char* name, GgmlType type, std::vector<int64_t> shape, uint8_t fill) {
    PlanTensor t;
    t.name = name;
    t.type_id = static_cast<uint32_t>(type);
    t.shape = std::move(shape);
    t.bytes = expected_bytes(t);
    t.source = MemoryBytes{std::make_shared<const std::vector<uint8_t>>(t.bytes, fill)};
    return t;
  };
  for (const auto& [ftype, gate_up] :
       {std::pair{28u, GgmlType::IQ2_XS}, {28u, GgmlType::IQ2_S}, {20u, GgmlType::IQ2_XS}}) {
    Plan b, d;
    b.metadata.set("general.architecture", Value::string("deepseek2"));
    b.metadata.set("general.quantization_version", Value::u32(2));
    b.metadata.set("general.file_type", Value::u32(ftype));
    d.metadata = b.metadata;
    for (Plan* p : {&b, &d}) {
      const uint8_t fill = p == &b ? 0 : 1;
      p->tensors = {mem("blk.0.ffn_gate_exps.weight", gate_up, {256, 8, 2}, fill),
                    mem("blk.0.ffn_up_exps.weight", gate_up, {256, 8, 2}, fill),
                    mem("blk.0.attn_q_a.weight", GgmlType::F16, {256, 4}, fill)};
    }
    WriteOptions replace;
    replace.force = true;
    write_plan(b, dir.file("b.gguf"), replace);
    write_plan(d, dir.file("d.gguf"), replace);
    const Model base = Model::open(dir.file("b.gguf")), donor = Model::open(dir.file("d.gguf"));
    const SpliceResult r = splice_one(base, donor, selector({}, {}, {"blk\\.0\\.attn_q_a\\..*"}));
    EXPECT_EQ(r.spliced, 1u);
    EXPECT_EQ(r.file_type_before, ftype);
    EXPECT_EQ(r.file_type_after, ftype) << type_name(static_cast<uint32_t>(gate_up));
    EXPECT_EQ(r.plan.metadata.get_uint("general.file_type"), ftype);
    EXPECT_TRUE(r.warnings.empty());
  }
}

TEST(splice, small_alignment_of_the_base_is_raised_to_32) {
  Scratch dir;
  const Model base0 = Model::open(fx().base);
  Plan p = copy_plan(base0);
  p.metadata.set("general.alignment", Value::u32(16));
  const std::string path = dir.file("a16.gguf");
  write_plan(p, path, {});
  const Model base = Model::open(path), donor = Model::open(fx().donor);
  const SpliceResult r = splice_one(base, donor, selector({"5-6"}));
  EXPECT_EQ(r.warnings.front(),
            "general.alignment 16 raised to 32 in the output: with less, tensor data may start off "
            "a 32-byte boundary, and llama.cpp aborts on that when it memory-maps the file");
  const Model out = Model::open(write_plan(r.plan, dir.file("out.gguf"), {}).paths.front());
  EXPECT_EQ(out.metadata().get_uint("general.alignment"), 32u);
  expect_spliced(out, base, donor, 5, 6);
}

TEST(splice, ggml_reader_accepts_the_output) {
  GGUF_REQUIRE_GGML();
  const auto& g = testing::GgmlRef::get();
  using Count = int64_t (*)(const void*);
  using DataOffset = size_t (*)(const void*);
  using TensorOffset = size_t (*)(const void*, int64_t);
  const auto n_tensors = reinterpret_cast<Count>(g.symbol("gguf_get_n_tensors"));
  const auto n_kv = reinterpret_cast<Count>(g.symbol("gguf_get_n_kv"));
  const auto data_offset = reinterpret_cast<DataOffset>(g.symbol("gguf_get_data_offset"));
  const auto tensor_offset = reinterpret_cast<TensorOffset>(g.symbol("gguf_get_tensor_offset"));
  ASSERT_TRUE(n_tensors && n_kv && data_offset && tensor_offset);

  const Model base = Model::open(fx().base), donor = Model::open(fx().donor);
  Scratch dir;
  const std::string path = dir.file("out.gguf");
  write_plan(splice_one(base, donor, selector({"3-5"})).plan, path, {});
  const Model out = Model::open(path);
  const testing::GgmlGguf ggml(path);
  void* ctx = ggml.ctx();
  ASSERT_NE(ctx, nullptr) << "ggml refused " << path;
  EXPECT_EQ(n_tensors(ctx), static_cast<int64_t>(out.tensors().size()));
  EXPECT_EQ(n_kv(ctx), static_cast<int64_t>(out.metadata().size()));
  EXPECT_EQ(data_offset(ctx), out.first().data_offset());
  for (size_t i = 0; i < out.tensors().size(); ++i)
    EXPECT_EQ(tensor_offset(ctx, static_cast<int64_t>(i)), out.tensors()[i].info->offset);
}

TEST(splice, split_base_donor_and_output) {
  Scratch dir;
  const Model base0 = Model::open(fx().base), donor0 = Model::open(fx().donor);
  WriteOptions by_tensors;
  by_tensors.split_max_tensors = 40;
  const auto bw = write_plan(copy_plan(base0), dir.file("base.gguf"), by_tensors);
  WriteOptions by_size;
  by_size.split_max_size = 8 << 20;
  const auto dw = write_plan(copy_plan(donor0), dir.file("donor.gguf"), by_size);
  ASSERT_GT(bw.paths.size(), 1u);
  ASSERT_GT(dw.paths.size(), 1u);
  const Model base = Model::open(bw.paths[0]), donor = Model::open(dw.paths[0]);
  const SpliceResult r = splice_one(base, donor, selector({"2-4"}));
  EXPECT_EQ(r.plan.metadata.find("split.no"), nullptr);
  EXPECT_EQ(r.inputs.size(), bw.paths.size() + dw.paths.size());
  WriteOptions wo;
  wo.split_max_size = 6 << 20;
  wo.inputs = r.inputs;
  const WriteResult w = write_plan(r.plan, dir.file("out.gguf"), wo);
  ASSERT_GT(w.paths.size(), 1u);
  EXPECT_TRUE(w.verified);
  for (const auto& p : w.paths) EXPECT_LE(std::filesystem::file_size(p), uint64_t{6} << 20) << p;
  expect_spliced(Model::open(w.paths[0]), base, donor, 2, 4);
}

}  // namespace
}  // namespace gguf
