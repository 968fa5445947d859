// Packed-affine safetensors import: the packed_affine checks, exactness of q4_1 / q5_1 / f32 on
// random and edge-case scales for every width and several groups and shapes, --base, the proof,
// and the gguf-requant binary. The safetensors reader's own checks are safetensors_test.cpp.
#include "gguf/ops/affine.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "affine_fixture.h"
#include "cli/cli.h"
#include "cli_run.h"
#include "distributions.h"
#include "gguf/base/fp16.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/hash.h"
#include "gguf/ops/synth.h"

namespace gguf {
namespace {

using testing::AffineFile;
using testing::AffineValues;
using testing::parse_bytes;
using testing::run_cli;
using testing::same_bits;
using testing::TempDir;

// ---- packed_affine ----------------------------------------------------------------------

std::string import_error(AffineFile& af, ImportOptions o = {}) {
  try {
    const auto f = parse_bytes(af.bytes());
    (void)import_safetensors(f, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Sets packed_affine to `text` verbatim.
std::string meta_error(const std::string& text) {
  const auto bytes = serialize_safetensors({{"c", "U8", {1}, {0}}}, {{"packed_affine", text}});
  try {
    (void)packed_affine_tensors(parse_bytes(bytes));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(packed_affine_malformed, not_json_or_wrong_version) {
  EXPECT_EQ(meta_error("{"),
            "m.safetensors: key 'packed_affine': at byte 25: packed_affine is not valid JSON (at "
            "byte 0 of its text): syntax error while parsing object key - unexpected end of "
            "input; expected string literal");
  EXPECT_EQ(meta_error("[]"),
            "m.safetensors: key 'packed_affine': at byte 25: packed_affine is not a JSON object");
  EXPECT_EQ(meta_error(R"({"version": 2, "tensors": {}})"),
            "m.safetensors: key 'packed_affine': at byte 25: packed_affine version 2: only "
            "version 1 is known");
  EXPECT_EQ(meta_error(R"({"tensors": {}})"),
            "m.safetensors: key 'packed_affine': at byte 25: packed_affine version missing: only "
            "version 1 is known");
  EXPECT_EQ(meta_error(R"({"version": 1})"),
            "m.safetensors: key 'packed_affine': at byte 25: packed_affine has no \"tensors\" "
            "object");
  EXPECT_EQ(meta_error(R"({"version": 1, "tensors": {"w": 1, "w": 2}})"),
            "m.safetensors: key 'packed_affine': at byte 25: packed_affine has the key \"w\" "
            "twice in one object");
}

TEST(packed_affine_malformed, bits_group_and_shape) {
  const auto entry = [](const std::string& fields) {
    return meta_error(R"({"version": 1, "tensors": {"w": {)" + fields + "}}}");
  };
  const std::string refs = R"("codes": "c", "scales": "c", "mins": "c")";
  EXPECT_EQ(entry(R"("bits": 0, "group": 32, "shape": [1, 32], )" + refs),
            "m.safetensors: tensor 'w': at byte 25: \"bits\" must be an integer from 1 to 8, "
            "found 0");
  EXPECT_EQ(entry(R"("bits": 9, "group": 32, "shape": [1, 32], )" + refs),
            "m.safetensors: tensor 'w': at byte 25: \"bits\" must be an integer from 1 to 8, "
            "found 9");
  EXPECT_EQ(entry(R"("bits": 4, "shape": [1, 32], )" + refs),
            "m.safetensors: tensor 'w': at byte 25: \"group\" must be an integer from 1 to "
            "1099511627776, found nothing");
  EXPECT_EQ(entry(R"("bits": 4, "group": 32, "shape": [], )" + refs),
            "m.safetensors: tensor 'w': at byte 25: \"shape\" must be an array of 1 to 4 positive "
            "integers");
  EXPECT_EQ(entry(R"("bits": 4, "group": 32, "shape": [0, 32], )" + refs),
            "m.safetensors: tensor 'w': at byte 25: \"shape\" [0,32] must hold positive integers "
            "whose product is below 2^63");
  EXPECT_EQ(entry(R"("bits": 4, "group": 32, "shape": [4294967296, 4294967296], )" + refs),
            "m.safetensors: tensor 'w': at byte 25: \"shape\" [4294967296,4294967296] must hold "
            "positive integers whose product is below 2^63");
  EXPECT_EQ(entry(R"("bits": 4, "group": 48, "shape": [2, 64], )" + refs),
            "m.safetensors: tensor 'w': at byte 25: group 48 does not divide the 64 columns of "
            "shape [2,64]");
}

TEST(packed_affine_malformed, member_tensors) {
  AffineFile af(1);
  af.add_packed("w", 3, 32, {2, 64});
  af.packed_json()["w"]["codes"] = "nope";
  EXPECT_EQ(import_error(af),
            "m.safetensors: tensor 'w': at byte 25: its codes tensor 'nope' is not in the file");
  af.packed_json()["w"]["codes"] = "w.scales";
  EXPECT_EQ(import_error(af),
            "m.safetensors: tensor 'w': at byte 25: its codes tensor 'w.scales' is F16 [2, 2] (8 "
            "bytes); 3-bit codes of shape [2,64] need 48 U8 bytes");
  af.packed_json()["w"]["codes"] = "w.codes";
  af.packed_json()["w"]["bits"] = 4;
  EXPECT_EQ(import_error(af),
            "m.safetensors: tensor 'w': at byte 25: its codes tensor 'w.codes' is U8 [48] (48 "
            "bytes); 4-bit codes of shape [2,64] need 64 U8 bytes");
  af.packed_json()["w"]["bits"] = 3;
  af.packed_json()["w"]["group"] = 64;
  EXPECT_EQ(import_error(af),
            "m.safetensors: tensor 'w': at byte 25: its scales tensor 'w.scales' is F16 [2, 2] (8 "
            "bytes); 3-bit codes of shape [2,64] need 4 F16 bytes");
  af.packed_json()["w"]["group"] = 32;
  af.packed_json()["w"]["mins"] = "w.codes";
  EXPECT_EQ(import_error(af),
            "m.safetensors: tensor 'w': at byte 25: its mins tensor 'w.codes' is U8 [48] (48 "
            "bytes); 3-bit codes of shape [2,64] need 8 F16 bytes");
}

TEST(packed_affine_malformed, name_of_a_plain_tensor) {
  AffineFile af(1);
  af.add_packed("w", 4, 32, {2, 64});
  af.add_plain("x", "F32", {4});
  af.packed_json()["x"] = af.packed_json()["w"];
  EXPECT_EQ(import_error(af),
            "m.safetensors: tensor 'x': at byte 490: the file also holds a plain tensor of that "
            "name; a packed tensor needs a name of its own");
}

// Its own codes under its name: the same clash, said as what it is.
TEST(packed_affine_malformed, codes_under_the_packed_name) {
  AffineFile af(1);
  af.add_packed("w", 4, 32, {2, 64});
  af.add_plain("v", "U8", {64});  // 4-bit codes of [2, 64]
  af.packed_json()["v"] = af.packed_json()["w"];
  af.packed_json()["v"]["codes"] = "v";
  const std::string error = import_error(af);
  EXPECT_NE(error.find("m.safetensors: tensor 'v': at byte "), std::string::npos) << error;
  EXPECT_NE(error.find(": its codes tensor has the packed tensor's own name; the imported tensor "
                       "needs a name of its own (e.g. 'v.codes' for the codes)"),
            std::string::npos)
      << error;
}

TEST(packed_affine_malformed, scales_of_another_shape) {
  AffineFile af(1);
  af.add_packed("w", 4, 32, {3, 64});
  // [2, 3] holds the same six pairs as [3, 2], transposed: the wrong grouping, refused.
  af.entries()[1].shape = {2, 3};
  EXPECT_EQ(import_error(af),
            "m.safetensors: tensor 'w': at byte 25: its scales tensor 'w.scales' has shape [2, "
            "3]; a scale and a min per group of 32 columns make it [3, 2]");
  // A 3-D tensor's pairs may be given with the rows flattened.
  AffineFile e(1);
  e.add_packed("x", 4, 32, {2, 3, 64});
  e.entries()[1].shape = {6, 2};
  e.entries()[2].shape = {6, 2};
  EXPECT_EQ(import_error(e), "(no error)");
  e.entries()[2].shape = {12};
  EXPECT_EQ(import_error(e),
            "m.safetensors: tensor 'x': at byte 25: its mins tensor 'x.mins' has shape [12]; a "
            "scale and a min per group of 32 columns make it [2, 3, 2]");
}

TEST(packed_affine_malformed, empty_name) {
  AffineFile af(1);
  af.add_plain("", "F32", {4});
  EXPECT_EQ(import_error(af),
            "m.safetensors: tensor '': at byte 75: an empty name: a GGUF tensor needs one");
  AffineFile p(1);
  p.add_packed("", 4, 32, {1, 32});
  EXPECT_EQ(import_error(p),
            "m.safetensors: tensor '': at byte 25: an empty name: a GGUF tensor needs one");
}

TEST(affine_import, says_which_metadata_is_not_carried_over) {
  AffineFile af(1);
  af.add_packed("w", 4, 32, {1, 32});
  const nlohmann::json meta = {{"version", 1}, {"tensors", af.packed_json()}};
  const auto bytes = serialize_safetensors(
      af.entries(), {{"format", "pt"}, {"packed_affine", meta.dump()}, {"author", "x"}});
  const auto f = parse_bytes(bytes);
  const ImportResult r = import_safetensors(f, {});
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_EQ(r.notes[0],
            "2 __metadata__ keys besides packed_affine are not carried over (GGUF keys come from "
            "--base)");
}

// ---- what cannot be moved exactly: an error naming the tensor, never a lossy fallback ------

TEST(affine_import, refuses_what_no_type_holds_exactly) {
  AffineFile af(2);
  af.add_packed("blk.0.w", 6, 32, {2, 64});
  EXPECT_EQ(import_error(af),
            "m.safetensors: tensor 'blk.0.w': at byte 25: cannot be moved exactly: its 6-bit codes "
            "do not fit q4_1 (4 bits) or q5_1 (5 bits); --type f32 holds them exactly");
  EXPECT_EQ(import_error(af, {GgmlType::Q5_1}),
            "m.safetensors: tensor 'blk.0.w': at byte 25: cannot be moved exactly: its 6-bit codes "
            "do not fit q5_1's 5-bit codes; --type f32 holds them exactly");
  EXPECT_EQ(import_error(af, {GgmlType::F32}), "(no error)");

  AffineFile a5(2);
  a5.add_packed("blk.0.w", 5, 32, {2, 64});
  EXPECT_EQ(import_error(a5, {GgmlType::Q4_1}),
            "m.safetensors: tensor 'blk.0.w': at byte 25: cannot be moved exactly: its 5-bit codes "
            "do not fit q4_1's 4-bit codes; q5_1 holds them exactly");

  AffineFile g16(2);
  g16.add_packed("blk.0.w", 4, 16, {2, 64});
  EXPECT_EQ(import_error(g16),
            "m.safetensors: tensor 'blk.0.w': at byte 25: cannot be moved exactly: its group of 16 "
            "columns is not a multiple of 32, the block of q4_1 and q5_1, so a block would need "
            "two scales; --type f32 holds it exactly");

  AffineFile u16(2);
  u16.add_plain("pos", "U16", {8});
  EXPECT_EQ(import_error(u16),
            "m.safetensors: tensor 'pos': at byte 75: dtype U16 has no GGUF type (F32, F16, BF16, "
            "F64, I8, I16, I32 and I64 carry over; packed tensors are listed in packed_affine)");

  AffineFile longname(2);
  longname.add_plain(std::string(64, 'n'), "F32", {8});
  EXPECT_EQ(import_error(longname),
            "m.safetensors: tensor '" + std::string(64, 'n') +
                "': at byte 75: its name is 64 bytes long; GGUF tensor names (ggml's) are at most "
                "63");

  AffineFile five_d(2);
  five_d.add_plain("t", "F32", {1, 1, 1, 1, 2});
  EXPECT_EQ(import_error(five_d),
            "m.safetensors: tensor 't': at byte 75: shape [1, 1, 1, 1, 2] has more than the 4 "
            "dimensions of a GGUF tensor");

  try {
    AffineFile q(2);
    q.add_packed("w", 4, 32, {2, 64});
    (void)import_safetensors(parse_bytes(q.bytes()), {GgmlType::Q4_K});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kUsage);
    EXPECT_STREQ(e.what(),
                 "--type q4_K: a packed-affine import writes q4_1, q5_1 or f32, the types that "
                 "hold its values exactly (leave --type out for the smallest exact one)");
  }
}

// ---- exactness --------------------------------------------------------------------------

std::vector<float> decoded(const Model& m, const std::string& name) {
  const TensorRef* t = m.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<float> out(t->info->n_elements);
  dequantize(static_cast<GgmlType>(t->info->type_id), t->data(), out);
  return out;
}

// Every width 1-8 with every target that takes it, groups 32 to 256, 2-D and 3-D shapes, with
// weight-like, edge-case and non-finite scales and mins; seeds change per case.
TEST(affine_import, reconstructs_every_value_bit_for_bit) {
  TempDir dir;
  uint64_t seed = 100;
  for (AffineValues kind : {AffineValues::kWeights, AffineValues::kEdges, AffineValues::kSpecial})
    for (unsigned bits = 1; bits <= 8; ++bits)
      for (uint64_t group : {32, 64, 96, 256}) {
        AffineFile af(testing::salted(++seed));
        const int64_t cols = static_cast<int64_t>(group * (bits % 3 + 1));
        af.add_packed("blk.0.ffn_up_exps.weight", bits, group, {3, 5, cols}, kind);
        af.add_packed("blk.0.attn_q.weight", bits, group, {7, cols}, kind);
        af.add_plain("blk.0.attn_norm.weight", "F32", {cols});
        const std::string in = af.write(dir.file("in.safetensors"));
        const auto file = SafetensorsFile::open(in);
        std::vector<std::optional<GgmlType>> targets = {GgmlType::F32, std::nullopt};
        if (bits <= 5) targets.push_back(GgmlType::Q5_1);
        if (bits <= 4) targets.push_back(GgmlType::Q4_1);
        for (const auto& type : targets) {
          SCOPED_TRACE(::testing::Message() << "bits " << bits << " group " << group << " type "
                                            << (type ? traits(*type).name : "auto") << " kind "
                                            << static_cast<int>(kind) << testing::salt_note());
          if (!type && bits > 5) continue;
          const ImportResult r = import_safetensors(file, {type});
          const std::string out = dir.file("out.gguf");
          WriteOptions wo;
          wo.force = true;
          write_plan(r.plan, out, wo);
          const ImportProof proof = prove_import(file, r, out);
          EXPECT_EQ(proof.tensors, 3u);
          EXPECT_EQ(proof.values, static_cast<uint64_t>(15 * cols + 7 * cols));
          const Model m = Model::open(out);
          const GgmlType want = type ? *type : bits <= 4 ? GgmlType::Q4_1 : GgmlType::Q5_1;
          const TensorRef* up = m.find("blk.0.ffn_up_exps.weight");
          ASSERT_NE(up, nullptr);
          EXPECT_EQ(up->info->type_id, traits(want).id);
          EXPECT_EQ(up->info->shape, (std::vector<int64_t>{cols, 5, 3}));
          EXPECT_TRUE(same_bits(decoded(m, "blk.0.ffn_up_exps.weight"),
                                AffineFile::values(af.data("blk.0.ffn_up_exps.weight"))));
          EXPECT_TRUE(same_bits(decoded(m, "blk.0.attn_q.weight"),
                                AffineFile::values(af.data("blk.0.attn_q.weight"))));
          const auto norm = m.find("blk.0.attn_norm.weight")->data();
          const auto src = file.data(*file.find("blk.0.attn_norm.weight"));
          EXPECT_TRUE(std::equal(norm.begin(), norm.end(), src.begin(), src.end()));
        }
      }
}

TEST(affine_import, metadata_order_and_file_type) {
  TempDir dir;
  AffineFile af(5);
  af.add_plain("token_embd.weight", "F16", {16, 64});
  af.add_packed("blk.0.ffn_down.weight", 4, 64, {64, 128});
  af.add_plain("blk.0.attn_norm.weight", "F32", {64});
  const auto file = SafetensorsFile::parse(memory_source(af.bytes(), "in.safetensors"));
  const ImportResult r = import_safetensors(file, {});
  ASSERT_EQ(r.plan.tensors.size(), 3u);
  EXPECT_EQ(r.plan.tensors[0].name, "token_embd.weight");  // the order of the data
  EXPECT_EQ(r.plan.tensors[1].name, "blk.0.ffn_down.weight");
  EXPECT_EQ(r.plan.tensors[2].name, "blk.0.attn_norm.weight");
  EXPECT_EQ(r.plan.metadata.find("general.file_type")->as_uint(), 3u);  // MOSTLY_Q4_1
  EXPECT_EQ(r.plan.metadata.find("general.quantization_version")->as_uint(), 2u);
  EXPECT_EQ(r.rows[1].action, PlanAction::kEncode);
  EXPECT_EQ(r.rows[1].bytes_before, 64u * 128 / 2 + 2 * 2 * 64 * 2);
  EXPECT_EQ(r.rows[1].bytes_after, 64u * 4 * 20);
  EXPECT_EQ(r.rows[0].action, PlanAction::kCopy);
  EXPECT_TRUE(r.notes.empty());
}

TEST(affine_import, proof_catches_a_value_that_changed) {
  TempDir dir;
  AffineFile af(9);
  af.add_packed("w", 4, 32, {4, 64});
  const std::string in = af.write(dir.file("in.safetensors"));
  const auto file = SafetensorsFile::open(in);
  const ImportResult r = import_safetensors(file, {});
  const std::string out = dir.file("out.gguf");
  const WriteResult w = write_plan(r.plan, out, {});
  // Flip the low nibble of row 2's first code byte (block 4: element 128 + 0).
  const uint64_t at = w.tensors[0].offset + 4 * 20 + 4;
  {
    std::fstream f(out, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char c;
    f.get(c);
    c = static_cast<char>(c ^ 1);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(c);
  }
  try {
    prove_import(file, r, out);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.substr(0, msg.find(" decodes to")),
              fmt::format("{}: tensor 'w': at byte {}: reading back: element 128 (row 2, column 0)",
                          out, w.tensors[0].offset + 4 * 20));
    EXPECT_NE(msg.find("but the source's code * scale + min is"), std::string::npos) << msg;
  }
}

// --base: the base's metadata and order; the import's tensors replace those of the same name
// (3-D routed experts of a DeepSeek-shaped model), the rest stay byte for byte.
TEST(affine_import, replaces_tensors_of_a_base_model) {
  TempDir dir;
  MoeSpec s;
  s.n_layers = 3;
  s.n_experts = 4;
  s.vocab = 256;
  const std::string base_path =
      write_plan(synth_moe_plan(uniform_types(s, GgmlType::F16)), dir.file("base.gguf"), {})
          .paths.front();
  const Model base = Model::open(base_path);
  const TensorRef* up = base.find("blk.2.ffn_up_exps.weight");
  ASSERT_NE(up, nullptr);
  const auto& ne = up->info->shape;  // [embd, ff, experts]
  AffineFile af(3);
  af.add_packed("blk.2.ffn_up_exps.weight", 2, 64, {ne[2], ne[1], ne[0]});
  af.add_plain("extra.weight", "F32", {8});
  const std::string in = af.write(dir.file("in.safetensors"));
  const auto file = SafetensorsFile::open(in);
  // A tensor with no place in the base is refused, unless asked to append it.
  try {
    (void)import_safetensors(file, {std::nullopt, &base});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("{}: tensor 'extra.weight': at byte 567: has no place in the base {}, "
                          "which has no tensor of this name (--append-unmatched appends such "
                          "tensors after the base's)",
                          in, base_path));
  }
  const ImportResult r = import_safetensors(file, {std::nullopt, &base, 1, true});
  ASSERT_EQ(r.notes.size(), 2u);
  EXPECT_EQ(r.notes[0],
            "1 tensor of the base replaced with another type ('blk.2.ffn_up_exps.weight' f16 -> "
            "q4_1)");
  EXPECT_EQ(r.notes[1],
            "1 tensor of the import ('extra.weight') is not in the base: appended after its "
            "tensors");
  const std::string out = dir.file("out.gguf");
  write_plan(r.plan, out, {});
  const ImportProof proof = prove_import(file, r, out);
  EXPECT_EQ(proof.tensors, 2u);
  const Model m = Model::open(out);
  ASSERT_EQ(m.tensors().size(), base.tensors().size() + 1);
  for (size_t i = 0; i < base.tensors().size(); ++i) {
    const TensorRef& a = base.tensors()[i];
    const TensorRef& b = m.tensors()[i];
    EXPECT_EQ(a.name(), b.name());
    if (a.name() == "blk.2.ffn_up_exps.weight") {
      EXPECT_EQ(b.info->type_id, traits(GgmlType::Q4_1).id);
      EXPECT_TRUE(
          same_bits(decoded(m, a.name()), AffineFile::values(af.data("blk.2.ffn_up_exps.weight"))));
    } else {
      EXPECT_EQ(xxh3(a.data()), xxh3(b.data())) << a.name();
    }
  }
  EXPECT_EQ(m.tensors().back().name(), "extra.weight");
  EXPECT_EQ(m.architecture(), base.architecture());
  for (const auto& kv : base.metadata().entries())
    EXPECT_EQ(*m.metadata().find(kv.key), kv.value) << kv.key;

  // A transposed import is refused, naming both shapes.
  AffineFile bad(3);
  bad.add_packed("blk.2.ffn_up_exps.weight", 2, 64, {ne[2] + 1, ne[1], ne[0]});
  const auto bf = SafetensorsFile::parse(memory_source(bad.bytes(), "t.safetensors"));
  try {
    (void)import_safetensors(bf, {std::nullopt, &base});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("t.safetensors: tensor 'blk.2.ffn_up_exps.weight': at byte 25: shape "
                          "[{}, {}, {}] (ggml order) here, but [{}, {}, {}] in the base {}",
                          ne[0], ne[1], ne[2] + 1, ne[0], ne[1], ne[2], base_path));
  }
}

// Work goes by element ranges, not rows: one row of 528000 elements (several pieces, one
// partial) and a 1-D tensor come out exact, and the bytes do not depend on the thread count.
TEST(affine_import, long_rows_and_threads) {
  TempDir dir;
  AffineFile af(77);
  af.add_packed("long", 3, 96, {1, 96 * 5500});
  af.add_packed("flat", 5, 32, {4096});
  const std::string in = af.write(dir.file("in.safetensors"));
  const auto file = SafetensorsFile::open(in);
  for (unsigned threads : {1u, 2u}) {
    for (auto type : {std::optional<GgmlType>(), std::optional<GgmlType>(GgmlType::F32)}) {
      const ImportResult r = import_safetensors(file, {type, nullptr, threads});
      const std::string out =
          dir.file(fmt::format("out-{}-{}.gguf", threads, type ? "f32" : "auto"));
      write_plan(r.plan, out, {});
      const ImportProof proof = prove_import(file, r, out, threads);
      EXPECT_EQ(proof.values, 96u * 5500 + 4096);
      const Model m = Model::open(out);
      EXPECT_TRUE(same_bits(decoded(m, "long"), AffineFile::values(af.data("long"))));
      EXPECT_TRUE(same_bits(decoded(m, "flat"), AffineFile::values(af.data("flat"))));
      EXPECT_EQ(m.find("flat")->info->shape, (std::vector<int64_t>{4096}));
    }
  }
  for (const char* t : {"auto", "f32"}) {
    const auto a = Model::open(dir.file(fmt::format("out-1-{}.gguf", t)));
    const auto b = Model::open(dir.file(fmt::format("out-2-{}.gguf", t)));
    for (const char* name : {"long", "flat"})
      EXPECT_EQ(xxh3(a.find(name)->data()), xxh3(b.find(name)->data())) << name;
  }
}

// The example quantizer writes as the tools do: never over its input, an existing file only
// with --force, and through a file renamed into place.
TEST(affine_import, example_quantizer_refuses_its_input_and_an_existing_output) {
  TempDir dir;
  auto bytes = std::make_shared<std::vector<uint8_t>>(64 * 2 * 4);
  for (size_t i = 0; i < bytes->size(); i += 4) {
    const float v = 0.01f * static_cast<float>(i % 97);
    std::memcpy(bytes->data() + i, &v, 4);
  }
  Plan p;
  p.metadata.set("general.architecture", Value::string("llama"));
  p.tensors.push_back({"blk.0.attn_q.weight", 0, {64, 2}, bytes->size(), MemoryBytes{bytes}});
  const std::string in = dir.file("m.gguf"), out = dir.file("m.safetensors");
  write_plan(p, in, {});
  const auto xxh3_file = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    const std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), {});
    return xxh3(b);
  };
  const auto in_hash = xxh3_file(in);
  auto r = run_cli("../examples/make_packed_affine", {in, "-o", in});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, fmt::format("make_packed_affine: error: {0}: output is the same file as input "
                               "'{0}'; refusing to overwrite an input (choose another output "
                               "path)\nTry 'make_packed_affine --help' for more information.\n",
                               in));
  EXPECT_EQ(xxh3_file(in), in_hash);
  r = run_cli("../examples/make_packed_affine", {in, "-o", out});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto first = xxh3_file(out);
  r = run_cli("../examples/make_packed_affine", {in, "-o", out, "--bits", "2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(out + ": output file exists; use --force to replace it"), std::string::npos)
      << r.err;
  EXPECT_EQ(xxh3_file(out), first);
  r = run_cli("../examples/make_packed_affine", {in, "-o", out, "--bits", "2", "--force"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(xxh3_file(out), first);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"m.gguf", "m.safetensors"}));
}

// The example quantizer (make_packed_affine): what it writes imports exactly, and its values
// are within half a step of the weights they came from.
TEST(affine_import, example_quantizer_round_trips) {
  std::mt19937 rng(5);
  std::normal_distribution<float> w(0.0f, 0.02f);
  std::vector<AffineSource> src = {{"blk.0.ffn_up_exps.weight", {128, 4, 2}, {}},
                                   {"blk.0.attn_q.weight", {64, 3}, {}}};
  for (auto& t : src) {
    t.values.resize(static_cast<size_t>(t.ne[0] * t.ne[1] * (t.ne.size() > 2 ? t.ne[2] : 1)));
    for (auto& v : t.values) v = w(rng);
  }
  for (unsigned bits : {2u, 4u, 5u}) {
    const auto f = parse_bytes(pack_affine_safetensors(src, bits, 32));
    const ImportResult r = import_safetensors(f, {});
    ASSERT_EQ(r.packed.size(), 2u);
    for (const auto& p : r.packed) {
      const AffineSource& s = p.name == src[0].name ? src[0] : src[1];
      for (const auto& row : r.rows) {
        if (row.name == p.name) {
          EXPECT_EQ(row.shape, s.ne);
        }
      }
      std::vector<float> v(p.rows * p.cols);
      affine_values(f, p, 0, v.size(), v);
      for (size_t i = 0; i < v.size(); ++i) {
        const uint64_t g = i / 32;
        uint16_t d;
        std::memcpy(&d, f.data(*p.scales).data() + 2 * g, 2);
        ASSERT_LE(std::fabs(v[i] - s.values[i]), fp16_to_fp32(d) * 0.5f + 1e-3f) << i;
      }
    }
  }
  try {
    (void)pack_affine_safetensors(src, 4, 48);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "packed affine: tensor 'blk.0.ffn_up_exps.weight' has rows of 128 values, not a "
                 "multiple of the group 48");
  }
}

// ---- the binary -------------------------------------------------------------------------

TEST(affine_cli, imports_and_reports) {
  TempDir dir;
  AffineFile af(21);
  af.add_packed("blk.0.ffn_gate_exps.weight", 3, 64, {2, 4, 128});
  af.add_plain("blk.0.ffn_norm.weight", "F32", {128});
  const std::string in = af.write(dir.file("m.safetensors"));
  const std::string out = dir.file("m.gguf");
  auto r = run_cli("gguf-requant", {in, "-o", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out,
            fmt::format("tensor                      from           to    shape        bytes "
                        "before  bytes after\n"
                        "blk.0.ffn_gate_exps.weight  u3 affine g64  q4_1  [128, 4, 2]         "
                        "448 B        640 B\n"
                        "blk.0.ffn_norm.weight       f32            f32   [128]               "
                        "512 B        512 B\n"
                        "\n"
                        "2 tensors imported (1 packed-affine, moved exactly; 1 copied byte for "
                        "byte)\n"
                        "size: {} -> {}\n"
                        "wrote {}\n"
                        "verified: every tensor read back and hashed\n"
                        "data: 0 B shared with the inputs, 512 B copied and "
                        "{} written (read back and hashed)\n"
                        "exact: 2 imported tensors read back: 1,024 values decode to the same "
                        "float bits as code * scale + min, 512 bytes of plain tensors equal\n",
                        human_bytes(std::filesystem::file_size(in)),
                        human_bytes(std::filesystem::file_size(out)), out,
                        human_bytes(std::filesystem::file_size(out) - 512)));

  r = run_cli("gguf-requant", {in, "-o", dir.file("m5.gguf"), "--type", "Q5_1", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tensors"][0]["type_before"], nullptr);  // no ggml type: bits and group below
  EXPECT_EQ(j["tensors"][1]["type_before"], "f32");
  for (const auto& t : j["tensors"]) {  // every key of a GGUF input's report
    EXPECT_EQ(t["importance"], nullptr);
    EXPECT_EQ(t["rule"], nullptr);
  }
  EXPECT_EQ(j["tensors"][0]["type_after"], "q5_1");
  EXPECT_EQ(j["tensors"][0]["action"], "encode");
  EXPECT_EQ(j["tensors"][0]["bits"], 3);
  EXPECT_EQ(j["tensors"][0]["group"], 64);
  EXPECT_EQ(j["tensors"][0]["lossy"], false);
  EXPECT_EQ(j["tensors"][1]["action"], "copy");
  EXPECT_EQ(j["exact"]["values"], 1024);
  EXPECT_EQ(j["exact"]["bytes"], 512);
  EXPECT_EQ(j["output"], dir.file("m5.gguf"));
  EXPECT_EQ(j["verified"], true);

  // --no-verify skips the proof with the hash check, and says so.
  r = run_cli("gguf-requant", {in, "-o", dir.file("nv.gguf"), "--no-verify"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\nexact: not proven (--no-verify): the output was not read back\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("verified:"), std::string::npos) << r.out;

  // A dry run writes nothing and proves nothing.
  r = run_cli("gguf-requant", {in, "-o", dir.file("dry.gguf"), "--dry-run", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out)["exact"].is_null());
  EXPECT_FALSE(std::filesystem::exists(dir.file("dry.gguf")));
}

TEST(affine_cli, errors_and_usage) {
  TempDir dir;
  AffineFile af(22);
  af.add_packed("w", 6, 32, {2, 64});
  const std::string in = af.write(dir.file("six.safetensors"));
  auto r = run_cli("gguf-requant", {in, "-o", dir.file("o.gguf")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gguf-requant: error: " + in +
                       ": tensor 'w': at byte 25: cannot be moved exactly: its 6-bit codes do not "
                       "fit q4_1 (4 bits) or q5_1 (5 bits); --type f32 holds them exactly\n");
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.gguf")));
  EXPECT_EQ(r.out, "");

  r = run_cli("gguf-requant", {in, "-o", dir.file("o.gguf"), "--type", "q8_0"});
  EXPECT_EQ(r.code, 2);
  r = run_cli("gguf-requant", {in, "-o", dir.file("o.gguf"), "--imatrix", in});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gguf-requant: error: --imatrix: a packed-affine import re-encodes nothing, it moves "
            "values\nTry 'gguf-requant --help' for more information.\n");
  r = run_cli("gguf-requant", {in, "-o", dir.file("o.gguf"), "--role", "routed"});
  EXPECT_EQ(r.code, 2);
  r = run_cli("gguf-requant", {in, "-o", dir.file("o.gguf"), "--type", "f32"});
  EXPECT_EQ(r.code, 0) << r.err;

  // A GGUF input still needs --type; --base needs a safetensors input.
  r = run_cli("gguf-requant", {dir.file("o.gguf"), "-o", dir.file("p.gguf")});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gguf-requant: error: --type is required (the type to re-encode to), or per-tensor "
            "types (--tensor-type, --tensor-type-file, --role-type, --output-tensor-type, "
            "--token-embedding-type, --recipe-from)\n"
            "Try 'gguf-requant --help' for more information.\n");
  r = run_cli("gguf-requant",
              {dir.file("o.gguf"), "-o", dir.file("p.gguf"), "--type", "q8_0", "--base", in});
  EXPECT_EQ(r.code, 2);

  // A damaged safetensors file named .safetensors gets the safetensors reader's message.
  std::ofstream(dir.file("bad.safetensors")) << "xx";
  r = run_cli("gguf-requant", {dir.file("bad.safetensors"), "-o", dir.file("q.gguf")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gguf-requant: error: " + dir.file("bad.safetensors") +
                       ": at byte 0: file is 2 bytes long: a safetensors file starts with an "
                       "8-byte header length\n");
}

}  // namespace
}  // namespace gguf
