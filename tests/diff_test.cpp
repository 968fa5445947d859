// gguf-diff's library half: every kind of difference on builder fixtures (metadata, tensor
// sets, types, shapes, bytes), selectors, split sets and manifests; the numeric metrics are
// diff_values_test.cpp.
#include "gguf/ops/diff.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "diff_fixture.h"
#include "gguf/codecs/codecs.h"
#include "gguf_builder.h"
#include "ops/diff_internal.h"

namespace gguf {
namespace {

using testing::GgufBuilder;
using testing::Tag;
using testing::TempDir;
using namespace diff_fixture;

TEST(diff, identical_files_are_identical) {
  const DiffReport r = diff(Fixture{}, Fixture{});
  EXPECT_TRUE(r.identical);
  EXPECT_TRUE(r.metadata.empty());
  EXPECT_EQ(r.counts.same, 4u);
  EXPECT_EQ(r.counts.changed(), 0u);
  EXPECT_EQ(r.hashed_bytes, 2u * (32 + 64 + 96 + 8) * 4);
  for (const auto& t : r.tensors) {
    ASSERT_TRUE(t.a && t.b && t.a->xxh3 && t.b->xxh3);
    EXPECT_EQ(*t.a->xxh3, *t.b->xxh3);
  }
}

TEST(diff, metadata_changes_are_reported_exactly) {
  Fixture a, b;
  a.name = "tiny";
  b.name = "tiny-2";
  a.u32s.push_back({"only.in.a", 1});
  b.u32s.push_back({"only.in.b", 2});
  b.tokens = {"a", "x", "c", "d"};
  const DiffReport r = diff(a, b);
  EXPECT_FALSE(r.identical);
  EXPECT_EQ(r.counts.changed(), 0u);
  ASSERT_EQ(r.metadata.size(), 4u);
  EXPECT_EQ(r.metadata[0].key, "general.name");
  EXPECT_EQ(r.metadata[0].change, MetadataChange::kChanged);
  EXPECT_EQ(*r.metadata[0].a->as_string(), "tiny");
  EXPECT_EQ(*r.metadata[0].b->as_string(), "tiny-2");
  EXPECT_EQ(r.metadata[0].first_difference, 4u);  // the byte after "tiny"
  EXPECT_EQ(r.metadata[1].key, "only.in.a");
  EXPECT_EQ(r.metadata[1].change, MetadataChange::kRemoved);
  EXPECT_FALSE(r.metadata[1].b);
  EXPECT_EQ(r.metadata[2].key, "tokenizer.ggml.tokens");
  EXPECT_EQ(r.metadata[2].first_difference, 1u);
  EXPECT_EQ(r.metadata[3].key, "only.in.b");
  EXPECT_EQ(r.metadata[3].change, MetadataChange::kAdded);
  EXPECT_EQ(*r.metadata[3].b->as_uint(), 2u);
}

// An empty array that changed its element type has no element to point at.
TEST(diff, empty_array_with_another_element_type_has_no_first_difference) {
  TempDir dir;
  GgufBuilder a, b;
  a.array("k.empty", Tag::kU32, std::vector<uint32_t>{});
  b.array("k.empty", Tag::kF32, std::vector<float>{});
  a.write_file(dir.file("a.gguf"));
  b.write_file(dir.file("b.gguf"));
  const Model ma = Model::open(dir.file("a.gguf")), mb = Model::open(dir.file("b.gguf"));
  const DiffReport r = diff_models(ma, mb, {});
  ASSERT_EQ(r.metadata.size(), 1u);
  EXPECT_EQ(r.metadata[0].change, MetadataChange::kChanged);
  EXPECT_FALSE(r.metadata[0].first_difference);
}

TEST(diff, value_type_and_array_changes) {
  TempDir dir;
  GgufBuilder a, b;
  a.u32("k.type", 7).array("k.prefix", Tag::kI32, std::vector<int32_t>{1, 2, 3});
  a.array("k.elem", Tag::kU32, std::vector<uint32_t>{1, 2});
  b.i32("k.type", 7).array("k.prefix", Tag::kI32, std::vector<int32_t>{1, 2, 3, 4});
  b.array("k.elem", Tag::kI32, std::vector<int32_t>{1, 2});
  a.write_file(dir.file("a.gguf"));
  b.write_file(dir.file("b.gguf"));
  const DiffReport r =
      diff_models(Model::open(dir.file("a.gguf")), Model::open(dir.file("b.gguf")), {});
  ASSERT_EQ(r.metadata.size(), 3u);
  EXPECT_EQ(r.metadata[0].a->type(), ValueType::kU32);
  EXPECT_EQ(r.metadata[0].b->type(), ValueType::kI32);
  EXPECT_EQ(r.metadata[1].first_difference, 3u);  // a prefix of the other
  EXPECT_EQ(r.metadata[2].first_difference, 0u);  // element type changed
  const std::string text = render_diff_text(r, {});
  EXPECT_EQ(
      text.substr(text.find("metadata:")),
      "metadata: 3 changed, 0 added, 0 removed\n"
      "  key       change   a                 b                    note\n"
      "  k.type    changed  u32 7             i32 7                value type changed\n"
      "  k.prefix  changed  i32[3] [1, 2, 3]  i32[4] [1, 2, 3, 4]  first difference at index 3\n"
      "  k.elem    changed  u32[2] [1, 2]     i32[2] [1, 2]        element type changed\n"
      "tensors: 0 compared\n"
      "different\n");
}

TEST(diff, each_tensor_change_is_detected) {
  Fixture a, b;
  a.tensors.push_back({"blk.1.ffn_down_exps.weight", kF32, {4}, f32_bytes({1, 2, 3, 4})});
  b.tensors.push_back({"blk.1.ffn_gate_exps.weight", kF32, {4}, f32_bytes({1, 2, 3, 4})});
  b.tensor("token_embd.weight").shape = {4, 8};  // shape
  b.tensor("blk.0.attn_q.weight").type = kBF16;  // type (half bytes)
  b.tensor("blk.0.attn_q.weight").payload.resize(64 * 2);
  b.tensor("blk.1.ffn_up_exps.weight").payload[5] ^= 1;  // bytes
  const DiffReport r = diff(a, b);
  EXPECT_FALSE(r.identical);
  EXPECT_EQ(find(r, "token_embd.weight").change, TensorChange::kShape);
  EXPECT_EQ(find(r, "blk.0.attn_q.weight").change, TensorChange::kType);
  EXPECT_EQ(find(r, "blk.0.attn_q.weight").a->bytes, 256u);
  EXPECT_EQ(find(r, "blk.0.attn_q.weight").b->bytes, 128u);
  EXPECT_EQ(find(r, "blk.1.ffn_up_exps.weight").change, TensorChange::kBytes);
  EXPECT_EQ(find(r, "output_norm.weight").change, TensorChange::kSame);
  EXPECT_EQ(find(r, "blk.1.ffn_down_exps.weight").change, TensorChange::kOnlyA);
  EXPECT_FALSE(find(r, "blk.1.ffn_down_exps.weight").b);
  EXPECT_EQ(find(r, "blk.1.ffn_gate_exps.weight").change, TensorChange::kOnlyB);
  EXPECT_EQ(r.tensors.back().name, "blk.1.ffn_gate_exps.weight");  // B-only tensors come last
  EXPECT_EQ(r.counts.same, 1u);
  EXPECT_EQ(r.counts.only_a + r.counts.only_b + r.counts.shape + r.counts.type + r.counts.bytes,
            5u);
  EXPECT_EQ(r.bytes_a, (32 + 64 + 96 + 8 + 4) * 4u);
  EXPECT_EQ(r.bytes_b, (32 + 96 + 8 + 4) * 4u + 128);
}

// Zero-element tensors of different types: --values has nothing to decode and must not divide
// by a zero row length.
TEST(diff, values_of_empty_tensors_of_different_types) {
  Fixture a, b;
  a.tensors.push_back({"blk.0.attn_k.weight", kF32, {0, 4}, {}});
  b.tensors.push_back({"blk.0.attn_k.weight", kBF16, {0, 4}, {}});
  DiffOptions o;
  o.values = true;
  const DiffReport r = diff(a, b, o);
  EXPECT_EQ(find(r, "blk.0.attn_k.weight").change, TensorChange::kType);
  EXPECT_FALSE(r.identical);
}

TEST(diff, shape_change_takes_precedence_over_type) {
  Fixture a, b;
  b.tensor("token_embd.weight").shape = {16, 2};
  b.tensor("token_embd.weight").type = kBF16;
  b.tensor("token_embd.weight").payload.resize(64);
  EXPECT_EQ(find(diff(a, b), "token_embd.weight").change, TensorChange::kShape);
}

// gguf-py keeps trailing dimensions of 1 that ggml's writer drops; ggml and llama.cpp see one
// shape, and so does the diff: the same bytes are identical, other bytes are measured.
TEST(diff, trailing_dimensions_of_one_are_the_same_shape) {
  Fixture a, b;
  a.tensor("output_norm.weight").shape = {8, 1};
  b.tensor("output_norm.weight").shape = {8, 1, 1, 1};
  a.tensor("blk.0.attn_q.weight").shape = {8, 8, 1};
  b.tensor("blk.0.attn_q.weight").payload = f32_bytes(eighths(64, 5));
  DiffOptions o;
  o.values = true;
  const DiffReport r = diff(a, b, o);
  EXPECT_EQ(find(r, "output_norm.weight").change, TensorChange::kSame);
  const TensorDiff& q = find(r, "blk.0.attn_q.weight");
  EXPECT_EQ(q.change, TensorChange::kBytes);
  ASSERT_TRUE(q.metrics);
  EXPECT_EQ(q.metrics->count, 64u);
  EXPECT_EQ(q.a->shape, (std::vector<int64_t>{8, 8, 1}));
  EXPECT_EQ(q.b->shape, (std::vector<int64_t>{8, 8}));
  Fixture c;
  c.tensor("output_norm.weight").shape = {8, 1, 1, 1};
  EXPECT_TRUE(diff(Fixture(), c).identical);
  c.tensor("output_norm.weight").shape = {1, 8};  // a leading 1 is another shape
  EXPECT_EQ(find(diff(Fixture(), c), "output_norm.weight").change, TensorChange::kShape);
}

TEST(diff, selectors_restrict_the_tensors) {
  Fixture a, b;
  b.tensor("blk.0.attn_q.weight").payload[0] ^= 1;
  DiffOptions o;
  o.selector = parse_selector({"1"}, {}, {});
  const DiffReport r = diff(a, b, o);
  EXPECT_TRUE(r.identical);
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_EQ(r.tensors[0].name, "blk.1.ffn_up_exps.weight");
  o.selector = parse_selector({}, {"attn-proj"}, {});
  EXPECT_FALSE(diff(a, b, o).identical);
  o.selector = parse_selector({"7"}, {}, {});
  EXPECT_THROW(diff(a, b, o), Error);
}

// Roles count dimensions as ggml does: [8, 1] is a vector like [8], so a 1-D tensor of a
// matrix kind is "other" whichever way a writer stored it, and which side is A does not change
// what --role selects (found by the logic audit: attn_sinks [4, 1] was "attn").
TEST(diff, roles_do_not_count_trailing_ones) {
  Fixture a, b;
  a.tensors.push_back({"blk.0.attn_sinks.weight", kF32, {8}, f32_bytes(eighths(8, 5))});
  b.tensors.push_back({"blk.0.attn_sinks.weight", kF32, {8, 1}, f32_bytes(eighths(8, 5))});
  DiffOptions o;
  o.selector = parse_selector({}, {"other"}, {});
  for (const bool swapped : {false, true}) {
    SCOPED_TRACE(swapped);
    const DiffReport r = swapped ? diff(b, a, o) : diff(a, b, o);
    EXPECT_TRUE(r.identical);
    ASSERT_EQ(r.tensors.size(), 1u);
    EXPECT_EQ(r.tensors[0].name, "blk.0.attn_sinks.weight");
    EXPECT_EQ(r.tensors[0].role, Role::kOther);
  }
  EXPECT_EQ(classify_tensor("blk.0.attn_sinks.weight", "deepseek2", ggml_dims({8, 1})).role,
            Role::kOther);
  EXPECT_EQ(ggml_dims({}), 1);
  EXPECT_EQ(ggml_dims({8, 1, 1}), 1);
  EXPECT_EQ(ggml_dims({8, 1, 3}), 3);
}

// The selection is made on the tensors of both sides; a layer with no matching tensor (layer
// 0 here, like DeepSeek's dense first layers) is passed over, and messages name both files.
TEST(diff, selection_errors_name_both_files) {
  TempDir dir;
  Fixture fa, fb;
  fb.tensors.push_back({"blk.2.attn_q.weight", kF32, {8, 8}, f32_bytes(eighths(64, 5))});
  const Model a = Model::open(fa.write(dir, "a.gguf"));
  const Model b = Model::open(fb.write(dir, "b.gguf"));
  DiffOptions o;
  o.threads = 2;
  o.selector = parse_selector({"0-1"}, {"routed"}, {});
  DiffReport r = diff_models(a, b, o);
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_EQ(r.tensors[0].name, "blk.1.ffn_up_exps.weight");
  // A layer that only B has is there to compare.
  o.selector = parse_selector({"2"}, {}, {});
  r = diff_models(a, b, o);
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_EQ(r.tensors[0].change, TensorChange::kOnlyB);
  const auto message = [&](const Selector& s) {
    o.selector = s;
    try {
      diff_models(a, b, o);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::kInput);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(
      message(parse_selector({"7-9"}, {}, {})),
      fmt::format("layers 7-9 do not exist in '{}' or '{}' (layers 0-2)", a.path(), b.path()));
  EXPECT_EQ(
      message(parse_selector({}, {}, {"nothing"})),
      fmt::format("no tensor in '{}' or '{}' is selected by match 'nothing'", a.path(), b.path()));
}

TEST(diff, stop_early_skips_the_rest) {
  Fixture a, b;
  b.tensor("blk.0.attn_q.weight").payload[0] ^= 1;
  DiffOptions o;
  o.stop_early = true;
  const DiffReport r = diff(a, b, o);
  EXPECT_FALSE(r.identical);
  EXPECT_TRUE(r.stopped_early);
  b = a;
  b.name = "other";
  const DiffReport m = diff(a, b, o);
  EXPECT_TRUE(m.stopped_early);
  EXPECT_EQ(m.hashed_bytes, 0u);
  EXPECT_FALSE(diff(a, a, o).stopped_early);
}

TEST(diff, paranoid_confirms_equal_hashes) {
  DiffOptions o;
  o.paranoid = true;
  const DiffReport r = diff(Fixture{}, Fixture{}, o);
  EXPECT_TRUE(r.identical);
  EXPECT_EQ(r.counts.same, 4u);
}

TEST(diff, split_set_equals_merged_file) {
  TempDir dir;
  const Fixture f;
  f.write(dir, "merged.gguf");
  GgufBuilder s1, s2;
  s1.string("general.architecture", "deepseek2").string("general.name", f.name);
  s1.u16("split.no", 0).u16("split.count", 2).i32("split.tensors.count", 4);
  for (const auto& [k, v] : f.u32s) s1.u32(k, v);
  s1.string_array("tokenizer.ggml.tokens", f.tokens);
  s2.u16("split.no", 1).u16("split.count", 2).i32("split.tensors.count", 4);
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const auto& t = f.tensors[i];
    (i < 2 ? s1 : s2).tensor(t.name, t.type, t.shape, t.payload);
  }
  s1.write_file(dir.file("m-00001-of-00002.gguf"));
  s2.write_file(dir.file("m-00002-of-00002.gguf"));
  const Model split = Model::open(dir.file("m-00001-of-00002.gguf"));
  const Model merged = Model::open(dir.file("merged.gguf"));
  EXPECT_TRUE(diff_models(split, merged, {}).identical);
  EXPECT_TRUE(diff_models(merged, split, {}).identical);
}

TEST(diff, manifest_matches_its_file) {
  TempDir dir;
  Fixture f;
  const Model m = Model::open(f.write(dir, "m.gguf"));
  nlohmann::json doc = manifest_of(f);
  EXPECT_TRUE(diff_manifest(parse_manifest(doc.dump(), "m.json"), m, {}).identical);
  doc["tensors"][1]["xxh3"] = "0123456789abcdef";
  doc["metadata"][1]["value"] = "renamed";
  const DiffReport r = diff_manifest(parse_manifest(doc.dump(), "m.json"), m, {});
  EXPECT_FALSE(r.identical);
  EXPECT_EQ(r.manifest, "m.json");
  EXPECT_EQ(find(r, "blk.0.attn_q.weight").change, TensorChange::kBytes);
  ASSERT_EQ(r.metadata.size(), 1u);
  EXPECT_EQ(r.metadata[0].key, "general.name");
  doc["tensors"][1].erase("xxh3");
  try {
    diff_manifest(parse_manifest(doc.dump(), "m.json"), m, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "m.json: tensor 'blk.0.attn_q.weight': the manifest has no xxh3 for this "
                 "tensor; write it with gguf-inspect --hashes --json");
  }
}

TEST(diff, manifest_errors_name_the_problem) {
  const auto error_of = [](std::string_view text) -> std::string {
    try {
      parse_manifest(text, "m.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(error_of("{\"tensors\": ["),
            "m.json: at byte 13: not a JSON document; expected the output of gguf-inspect "
            "--hashes --json");
  EXPECT_EQ(error_of("{}"),
            "m.json: no \"tensors\" array; expected the output of gguf-inspect --hashes --json");
  // A binary file is not JSON at its first byte, whatever brackets it holds further on (a
  // GGUF's were counted as 33 levels of nesting).
  const std::string brackets(40, '[');
  EXPECT_EQ(error_of("GGUF\x03" + brackets),
            "m.json: at byte 0: a GGUF file, not a manifest; expected the output of gguf-inspect "
            "--hashes --json");
  // A NUL byte ends nothing: what follows it is not taken as past the end of the document.
  EXPECT_EQ(error_of(std::string("{\"tensors\": []}\0garbage{", 24)),
            "m.json: at byte 15: not a JSON document (a NUL byte); expected the output of "
            "gguf-inspect --hashes --json");
  // A UTF-8 byte-order mark is skipped, as the JSON parser skips it.
  EXPECT_EQ(error_of("\xEF\xBB\xBF {}"),
            "m.json: no \"tensors\" array; expected the output of gguf-inspect --hashes --json");
  EXPECT_EQ(error_of(" \n\x01" + brackets),
            "m.json: at byte 2: not a JSON document; expected the output of gguf-inspect "
            "--hashes --json");
  // Deep nesting is refused before parsing (a million nested arrays in a shape, or a deep
  // value printed into a message, overflowed the stack), at the bracket one level too deep;
  // brackets inside strings do not count.
  {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    EXPECT_EQ(error_of(R"({"tensors": [{"name": "x", "type": "f32", "shape": )" + deep + "}]}"),
              "m.json: at byte 80: nests deeper than 32 levels; expected the output of "
              "gguf-inspect --hashes --json");
    // A string ending in an escaped backslash ends there; the brackets after it count.
    EXPECT_EQ(error_of(R"({"tensors": [], "k": "a\\", "x": )" + deep + "}"),
              "m.json: at byte 64: nests deeper than 32 levels; expected the output of "
              "gguf-inspect --hashes --json");
    // A text cut inside a string after a backslash is the parser's to report.
    EXPECT_EQ(error_of(R"({"tensors": ["\)"),
              "m.json: at byte 15: not a JSON document; expected the output of gguf-inspect "
              "--hashes --json");
    const std::string ok_deep = std::string(29, '[') + std::string(29, ']');
    EXPECT_EQ(error_of(R"({"tensors": [{"name": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"[[", )"
                       R"("type": "f32", "shape": [4], "x": )" +
                       ok_deep + "}]}"),
              "(no error)");
  }
  // A number too large for a double is not a syntax error to nlohmann, but still no manifest
  // (found by manifest_fuzz: it escaped as an uncaught exception).
  EXPECT_EQ(error_of(R"({"tensors": [{"name": "x", "type": "f32", "shape": [2e56000]}]})"),
            "m.json: not a JSON document gguf-diff can read ([json.exception.out_of_range.406] "
            "number overflow parsing '2e56000'); expected the output of gguf-inspect --hashes "
            "--json");
  EXPECT_EQ(error_of(R"({"tensors": [{"name": "x", "type": "q9_Z", "shape": [4]}]})"),
            "m.json: tensor 'x': unknown tensor type \"q9_Z\"");
  EXPECT_EQ(error_of(R"({"tensors": [{"name": "x", "type": "f32", "shape": [4], "xxh3": "12"}]})"),
            "m.json: tensor 'x': xxh3 \"12\" is not 16 hex digits");
  EXPECT_EQ(error_of(R"({"tensors": [], "metadata": [{"key": "k", "type": "u8", "value": 300}]})"),
            "m.json: key 'k': value 300 does not fit type u8");
  // A tampered entry: the type name against type_id, bytes against type and shape.
  EXPECT_EQ(error_of(R"({"tensors": [{"name": "x", "type": "q4_K", "type_id": 0, "shape": [4]}]})"),
            "m.json: tensor 'x': type \"q4_K\" disagrees with type_id 0");
  EXPECT_EQ(error_of(R"({"tensors": [{"name": "x", "type_id": -1, "shape": [4]}]})"),
            "m.json: tensor 'x': type_id -1 is not a type number");
  EXPECT_EQ(error_of(R"({"tensors": [{"name": "x", "type": "f32", "shape": [4], "bytes": -5}]})"),
            "m.json: tensor 'x': bytes -5 is not a byte count");
  EXPECT_EQ(
      error_of(R"({"tensors": [{"name": "x", "type": "f32", "shape": [4, 2], "bytes": 16}]})"),
      "m.json: tensor 'x': bytes 16 do not fit type f32 and shape [4,2]");
  EXPECT_EQ(
      error_of(R"({"tensors": [{"name": "x", "type": "q8_0", "shape": [32, 2], "bytes": 68}]})"),
      "(no error)");
}

TEST(diff, manifest_needs_no_values) {
  TempDir dir;
  const Fixture f;
  const Model m = Model::open(f.write(dir, "m.gguf"));
  DiffOptions o;
  o.values = true;
  EXPECT_THROW(diff_manifest(parse_manifest(manifest_of(f).dump(), "m.json"), m, o), Error);
}

// Stopping at the first difference (--quiet) must not skip what makes a run trouble: here the
// metadata already differs, and a selection error or a manifest without hashes is still an
// error, as it is without stop_early.
TEST(diff, stop_early_still_reports_trouble) {
  Fixture a, b;
  b.name = "other";
  DiffOptions o;
  o.stop_early = true;
  o.selector = parse_selector({"7"}, {}, {});
  EXPECT_THROW(diff(a, b, o), Error);
  o.selector = parse_selector({}, {}, {"nothing"});
  EXPECT_THROW(diff(a, b, o), Error);
  o.selector = {};
  EXPECT_TRUE(diff(a, b, o).stopped_early);
  TempDir dir;
  const Model m = Model::open(b.write(dir, "m.gguf"));
  nlohmann::json doc = manifest_of(a);
  doc["tensors"][1].erase("xxh3");
  EXPECT_THROW(diff_manifest(parse_manifest(doc.dump(), "m.json"), m, o), Error);
}

// An importance entry that fits no slicing of its tensor is an error whatever differs: also
// when that tensor is identical in A and B, and with stop_early.
TEST(diff, importance_entry_that_does_not_fit_is_an_error_even_when_unused) {
  Fixture a, b;
  Imatrix im;
  im.add("blk.1.ffn_up_exps.weight", {1, 5, std::vector<float>(5, 1.0f), {}, {}});
  DiffOptions o;
  o.values = true;
  o.importance = &im;
  EXPECT_THROW(diff(a, b, o), Error);
  b.name = "other";
  o.stop_early = true;
  EXPECT_THROW(diff(a, b, o), Error);
}

// A summary group whose measured tensors the importance matrix covers only in part has no
// weighted error: pooling the covered ones alone would leave the others' error out (a
// per-layer CI gate on weighted_rel would pass while an uncovered tensor got worse).
TEST(diff, partly_weighted_groups_have_no_weighted_error) {
  Fixture a, b;
  a.tensors.push_back({"blk.1.ffn_down_exps.weight", kF32, {4, 8, 3}, f32_bytes(eighths(96, 5))});
  b.tensors.push_back(a.tensors.back());
  const auto up = floats_of(a.tensor("blk.1.ffn_up_exps.weight"));
  const auto down = floats_of(a.tensor("blk.1.ffn_down_exps.weight"));
  b.tensor("blk.1.ffn_up_exps.weight").payload = f32_bytes(perturbed(up, 0.01, 1));
  b.tensor("blk.1.ffn_down_exps.weight").payload = f32_bytes(perturbed(down, 0.5, 2));
  Imatrix im;
  im.add("blk.1.ffn_up_exps.weight", {1, 8, std::vector<float>(8, 2.0f), {}, {}});
  DiffOptions o;
  o.values = true;
  o.importance = &im;
  const DiffReport r = diff(a, b, o);
  const auto group = [](const std::vector<DiffGroup>& gs, std::string_view key) {
    for (const auto& g : gs)
      if (g.key == key) return g;
    throw std::runtime_error("no group " + std::string(key));
  };
  const DiffGroup l1 = group(r.by_layer, "1");
  EXPECT_EQ(l1.measured, 2u);
  EXPECT_TRUE(std::isfinite(l1.metrics.rel()));
  EXPECT_TRUE(std::isnan(l1.metrics.weighted_rel()));
  EXPECT_TRUE(std::isnan(l1.metrics.weighted_rmse()));
  // A group covered in full keeps its weighted error.
  const DiffGroup up_group = group(r.by_role, "routed-up");
  const ErrorMetrics& t = *find(r, "blk.1.ffn_up_exps.weight").metrics;
  EXPECT_DOUBLE_EQ(up_group.metrics.weighted_rel(), t.weighted_rel());
  EXPECT_DOUBLE_EQ(up_group.metrics.weighted_rmse(), t.weighted_rmse());
}

}  // namespace
}  // namespace gguf
