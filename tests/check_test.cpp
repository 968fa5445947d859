// check_model against builder fixtures: exact problems for what ggml refuses but the lenient
// reader accepts, NaN/Inf scans, and agreement with ggml's own reader and decoders.
#include "gguf/ops/check.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "cli_run.h"
#include "ggml_ref.h"
#include "gguf/base/fp16.h"
#include "gguf/format/types.h"
#include "gguf_builder.h"

namespace gguf {
namespace {

using testing::Defect;
using testing::DefectKind;
using testing::GgufBuilder;
using testing::Layout;

constexpr const char* kName = "mem.gguf";
constexpr const char* kRule =
    "; ggml requires each tensor's data to follow the previous one's in header order, padded to "
    "the alignment";

// Tensors: 0 f32 [8, 4] (128 bytes), 1 q4_0 [64, 2] (72 bytes), 2 f16 [16] (32 bytes).
GgufBuilder base() {
  GgufBuilder b;
  b.string("general.architecture", "llama")
      .u32("general.quantization_version", 2)
      .tensor("token_embd.weight", 0, {8, 4})
      .tensor("blk.0.attn_q.weight", 2, {64, 2})
      .tensor("output.weight", 1, {16});
  return b;
}

Model model_of(const GgufBuilder& b) {
  return Model::from_files({GgufFile::parse(memory_source(b.build(), kName))});
}

// Problems as "severity: path: object: at byte N: message". Most fixtures are minimal files
// without general.architecture (so that the byte offsets they assert stay small); that one
// problem is left out here and checked by check.architecture_missing_or_not_a_string.
std::vector<std::string> all_problems(const Model& m, const CheckOptions& o = {}) {
  std::vector<std::string> out;
  for (const Problem& p : check_model(m, o))
    out.push_back(fmt::format("{}: {}", p.severity, format_problem(p)));
  return out;
}
std::vector<std::string> problems(const Model& m, const CheckOptions& o = {}) {
  std::vector<std::string> out;
  for (auto& p : all_problems(m, o))
    if (p.find("key 'general.architecture': missing;") == std::string::npos)
      out.push_back(std::move(p));
  return out;
}
std::vector<std::string> problems(const GgufBuilder& b) { return problems(model_of(b)); }

using Strings = std::vector<std::string>;

TEST(check, sound_file_has_no_problems) { EXPECT_EQ(problems(base()), Strings{}); }

// llama.cpp's loader refuses a model without general.architecture or with one that is not a
// string; a non-model GGUF (general.type, e.g. an imatrix) needs none.
TEST(check, architecture_missing_or_not_a_string) {
  GgufBuilder none;
  none.tensor("t", 0, {4});
  EXPECT_EQ(all_problems(model_of(none)),
            Strings{"error: mem.gguf: key 'general.architecture': missing; llama.cpp's loader "
                    "refuses a model without its architecture"});
  GgufBuilder number;
  number.u32("general.architecture", 7).tensor("t", 0, {4});
  EXPECT_EQ(all_problems(model_of(number)),
            Strings{fmt::format("error: mem.gguf: key 'general.architecture': at byte {}: "
                                "general.architecture must be a string, found u32",
                                number.layout().kv_type_offsets[0])});
  GgufBuilder imatrix;
  imatrix.string("general.type", "imatrix").tensor("t.in_sum2", 0, {4});
  EXPECT_EQ(all_problems(model_of(imatrix)), Strings{});
}

TEST(check, problem_fields) {
  const auto b = base().defect({DefectKind::kLongTensorName, 1});
  const auto ps = check_model(model_of(b));
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].path, kName);
  EXPECT_EQ(ps[0].object,
            "tensor 'blk.0.attn_q.weightxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'");
  EXPECT_EQ(ps[0].offset, b.layout().tensor_info_offsets[1]);
  EXPECT_EQ(ps[0].message, "name is 64 bytes; ggml requires fewer than 64");
  EXPECT_EQ(ps[0].severity, "error");
}

TEST(check, name_of_63_bytes_is_fine) {
  GgufBuilder b;
  b.tensor(std::string(63, 'n'), 0, {1});
  EXPECT_EQ(problems(b), Strings{});
}

TEST(check, name_with_nul) {
  GgufBuilder b;
  b.tensor(std::string("ab\0c", 4), 0, {1});
  EXPECT_EQ(problems(b), Strings{"error: mem.gguf: tensor 'ab\\x00c': at byte 24: name contains a "
                                 "NUL byte at position 2; ggml would read it as 'ab'"});
}

TEST(check, key_with_nul) {
  GgufBuilder b;
  b.u32(std::string("general.alignment\0x", 19), 64);
  EXPECT_EQ(problems(b),
            Strings{"error: mem.gguf: key 'general.alignment\\x00x': at byte 24: key contains a "
                    "NUL byte; ggml's lookups by name see it as 'general.alignment', other readers "
                    "may not"});
}

TEST(check, empty_tensor_name) {
  const auto b = base().defect({DefectKind::kEmptyTensorName, 1});
  EXPECT_EQ(problems(b), Strings{fmt::format("error: mem.gguf: tensor '': at byte {}: empty tensor "
                                             "name; llama.cpp's loader refuses a tensor it does "
                                             "not know",
                                             b.layout().tensor_info_offsets[1])});
}

TEST(check, unknown_type_id) {
  const auto b = base().defect({DefectKind::kUnknownTypeId, 2});
  EXPECT_EQ(problems(b), Strings{fmt::format("error: mem.gguf: tensor 'output.weight': at byte {}: "
                                             "unknown type id 99; ggml refuses ids outside 0-42",
                                             b.layout().tensor_type_offsets[2])});
}

TEST(check, removed_type_id) {
  const auto b = base().defect({DefectKind::kRemovedTypeId, 0});
  EXPECT_EQ(problems(b),
            Strings{fmt::format("error: mem.gguf: tensor 'token_embd.weight': at byte {}: type id "
                                "4 (q4_2) was removed from ggml, which refuses it",
                                b.layout().tensor_type_offsets[0])});
}

// ---- layout ----

TEST(check, overlapping_data) {
  const auto b = base().defect({DefectKind::kOverlap, 1});
  const uint64_t d = b.layout().data_offset;
  EXPECT_EQ(problems(b),
            (Strings{fmt::format("error: mem.gguf: tensor 'blk.0.attn_q.weight': at byte {}: data "
                                 "overlaps tensor 'token_embd.weight' (offset 0, 128 bytes){}",
                                 d + 32, kRule),
                     fmt::format("error: mem.gguf: tensor 'output.weight': at byte {}: 96 unused "
                                 "bytes before this tensor's data (offset 224; the data before it "
                                 "ends at 128 after padding){}",
                                 d + 224, kRule)}));
}

TEST(check, shared_data) {
  GgufBuilder b;
  b.tensor("a", 0, {32})
      .tensor("b", 0, {32})
      .tensor("c", 0, {32})
      .defect({DefectKind::kSharedData, 1});
  const uint64_t d = b.layout().data_offset;
  EXPECT_EQ(problems(b),
            (Strings{fmt::format("error: mem.gguf: tensor 'b': at byte {}: shares its data with "
                                 "tensor 'a' (offset 0, 128 bytes){}",
                                 d, kRule),
                     fmt::format("error: mem.gguf: tensor 'c': at byte {}: 128 unused bytes before "
                                 "this tensor's data (offset 256; the data before it ends at 128 "
                                 "after padding){}",
                                 d + 256, kRule)}));
}

// requant and splice read such files (and give each tensor its own bytes) but say so.
TEST(check, overlap_warning_names_the_file_and_both_tensors) {
  GgufBuilder b;
  b.tensor("a", 0, {32})
      .tensor("b", 0, {32})
      .tensor("c", 0, {32})
      .defect({DefectKind::kSharedData, 1});
  EXPECT_EQ(overlap_warning(model_of(b)),
            "'mem.gguf': tensor 'b' shares its data with tensor 'a' (offset 0, 128 bytes): ggml's "
            "reader refuses such a file; the output gives each tensor its own copy of the bytes");
  EXPECT_EQ(overlap_warning(model_of(base())), std::nullopt);
}

TEST(check, gap_between_tensors) {
  const auto b = base().defect({DefectKind::kGap, 1});
  EXPECT_EQ(problems(b),
            Strings{fmt::format("error: mem.gguf: tensor 'blk.0.attn_q.weight': at byte {}: 32 "
                                "unused bytes before this tensor's data (offset 160; the data "
                                "before it ends at 128 after padding){}",
                                b.layout().data_offset + 160, kRule)});
}

TEST(check, gap_at_start_of_data) {
  const auto b = base().defect({DefectKind::kGap, 0});
  EXPECT_EQ(problems(b),
            Strings{fmt::format("error: mem.gguf: tensor 'token_embd.weight': at byte {}: 32 "
                                "unused bytes at the start of the data section before this "
                                "tensor's data (offset 32){}",
                                b.layout().data_offset + 32, kRule)});
}

TEST(check, data_out_of_header_order) {
  const auto b = base().defect({DefectKind::kReorder, 0});
  EXPECT_EQ(problems(b),
            Strings{fmt::format("error: mem.gguf: tensor 'blk.0.attn_q.weight': at byte {}: data "
                                "at offset 0 starts before the end of the previous tensor "
                                "'token_embd.weight' (offset 96, 128 bytes){}",
                                b.layout().data_offset, kRule)});
}

TEST(check, empty_tensor_must_sit_where_the_next_would) {
  // An empty tensor placed at the start of its predecessor's data: canonical is offset 128.
  GgufBuilder b;
  b.tensor("a", 0, {32}).tensor("empty", 0, {0}).defect({DefectKind::kSharedData, 1});
  EXPECT_EQ(problems(b),
            Strings{fmt::format("error: mem.gguf: tensor 'empty': at byte {}: data at offset 0 "
                                "starts before the end of the previous tensor 'a' (offset 0, 128 "
                                "bytes){}",
                                b.layout().data_offset, kRule)});
  GgufBuilder ok;
  ok.tensor("a", 0, {32}).tensor("empty", 0, {0}).tensor("b", 0, {4});
  EXPECT_EQ(problems(ok), Strings{});
}

// ---- alignment and keys ----

TEST(check, alignment_problems_in_a_partially_read_file) {
  // The reader stops at a bad general.alignment; check_model still names it.
  // A wrong type is named at the value's type field, a wrong value at the value.
  for (auto [d, msg] : {std::pair{DefectKind::kAlignmentWrongType, "must be u32, found u64"},
                        std::pair{DefectKind::kAlignmentNotPowerOf2,
                                  "must be a non-zero power of two, found 48"}}) {
    const auto b = base().defect({d});
    std::optional<Error> err;
    const auto f = GgufFile::parse_partial(memory_source(b.build(), kName), err);
    ASSERT_TRUE(err);
    EXPECT_EQ(
        problems(Model::from_files({f})),
        Strings{fmt::format("error: mem.gguf: key 'general.alignment': at byte {}: "
                            "general.alignment {}",
                            d == DefectKind::kAlignmentWrongType ? b.layout().kv_type_offsets[2]
                                                                 : b.layout().kv_value_offsets[2],
                            msg)});
  }
}

TEST(check, small_alignment_that_breaks_32_byte_data) {
  GgufBuilder b;
  b.alignment(8).tensor("a", 0, {3}).tensor("b", 0, {8});
  const Layout l = b.layout();
  ASSERT_NE((l.data_offset + 16) % 32, 0u);  // b lands on an 8- but not 32-byte boundary
  const std::string first_off = l.data_offset % 32 != 0
                                    ? fmt::format("'a' at byte {}", l.data_offset)
                                    : fmt::format("'b' at byte {}", l.data_offset + 16);
  EXPECT_EQ(problems(b),
            Strings{fmt::format("error: mem.gguf: key 'general.alignment': at byte {}: "
                                "general.alignment 8 lets tensor data start off a 32-byte boundary "
                                "({}); llama.cpp aborts when it memory-maps the file (ggml's CPU "
                                "backend asserts 32-byte alignment)",
                                l.kv_value_offsets[0], first_off)});
  GgufBuilder big;
  big.alignment(64).tensor("a", 0, {3}).tensor("b", 0, {8});
  EXPECT_EQ(problems(big), Strings{});
}

// Keys llama.cpp's loader reads with an exact type ("key general.file_type has wrong type i32
// but expected type u32"); the table is checked against libllama in llama_e2e_test.
TEST(check, keys_llama_cpp_reads_with_an_exact_type) {
  // These files are llama models that lack most required keys (check.required_keys): only
  // the types are looked at here.
  const auto type_problems = [](const GgufBuilder& b) {
    Strings out;
    for (const std::string& p : problems(b))
      if (p.find("': missing; llama.cpp's loader refuses the model without it") ==
          std::string::npos)
        out.push_back(p);
    return out;
  };
  const auto one = [](const std::function<void(GgufBuilder&)>& add) {
    GgufBuilder b;
    b.string("general.architecture", "llama");
    add(b);
    return b;
  };
  const auto expect_one = [&](const GgufBuilder& b, size_t kv, const std::string& key,
                              const std::string& what) {
    EXPECT_EQ(type_problems(b), Strings{fmt::format("error: mem.gguf: key '{}': at byte {}: {}",
                                                    key, b.layout().kv_type_offsets[kv], what)});
  };
  GgufBuilder b = one([](GgufBuilder& g) { g.i32("general.file_type", 15); });
  expect_one(b, 1, "general.file_type",
             "general.file_type must be u32, found i32; llama.cpp's loader refuses the model");
  b = one([](GgufBuilder& g) { g.u64("llama.block_count", 2); });
  expect_one(b, 1, "llama.block_count",
             "llama.block_count must be u32, found u64; llama.cpp's loader refuses the model");
  b = one([](GgufBuilder& g) { g.f64("llama.rope.freq_base", 1e4); });
  expect_one(b, 1, "llama.rope.freq_base",
             "llama.rope.freq_base must be f32, found f64; llama.cpp's loader refuses the model");
  b = one([](GgufBuilder& g) { g.u8("tokenizer.ggml.add_bos_token", 1); });
  expect_one(b, 1, "tokenizer.ggml.add_bos_token",
             "tokenizer.ggml.add_bos_token must be bool, found u8; llama.cpp's loader refuses "
             "the model");
  b = one([](GgufBuilder& g) { g.string_array("general.name", {"x"}); });
  expect_one(b, 1, "general.name",
             "general.name must be string, found array of string; llama.cpp's loader refuses "
             "the model");
  b = one([](GgufBuilder& g) {
    g.array("tokenizer.ggml.token_type", testing::Tag::kU32, std::vector<uint32_t>{1, 2});
  });
  expect_one(b, 1, "tokenizer.ggml.token_type",
             "tokenizer.ggml.token_type must be an array of i32, found array of u32; llama.cpp's "
             "loader refuses the model");
  b = one([](GgufBuilder& g) { g.u32("tokenizer.ggml.scores", 1); });
  expect_one(b, 1, "tokenizer.ggml.scores",
             "tokenizer.ggml.scores must be an array of f32 or i32, found u32; llama.cpp's loader "
             "refuses the model");
  // Per-layer keys: a u32, or an array of u32, i32 or bool with one entry per layer.
  b = one([](GgufBuilder& g) { g.i32("llama.attention.head_count", 4); });
  expect_one(b, 1, "llama.attention.head_count",
             "llama.attention.head_count must be u32, or an array of u32, i32 or bool with one "
             "entry per layer, found i32; llama.cpp's loader refuses the model");
  b = one([](GgufBuilder& g) {
    g.u32("llama.block_count", 2)
        .array("llama.feed_forward_length", testing::Tag::kI32,
               std::vector<int32_t>{256, 256, 256});
  });
  expect_one(b, 2, "llama.feed_forward_length",
             "llama.feed_forward_length has 3 entries; llama.cpp's loader wants one per layer (2, "
             "as llama.block_count says)");
  // Accepted forms, keys llama.cpp does not type-check, and keys of other architectures.
  const std::vector<GgufBuilder> fine = {
      one([](GgufBuilder& g) {
        g.u32("llama.block_count", 2)
            .array("llama.feed_forward_length", testing::Tag::kI32, std::vector<int32_t>{256, 0})
            .array("llama.attention.head_count", testing::Tag::kU32, std::vector<uint32_t>{4, 4})
            .array("tokenizer.ggml.scores", testing::Tag::kI32, std::vector<int32_t>{0})
            .u64("tokenizer.ggml.cls_token_id", 3)
            .u64("tokenizer.chat_template", 3)
            .i32("deepseek2.attention.q_lora_rank", 3)
            .i32("llama.attention.q_lora_rank", 3)
            .u64("llama.rope.scale_linear", 3)
            .f32("llama.rope.scaling.factor", 2);
      }),
      // merges are read only by the BPE tokenizers; key_length only with attention heads.
      one([](GgufBuilder& g) {
        g.string("tokenizer.ggml.model", "llama")
            .u32("tokenizer.ggml.merges", 1)
            .u32("llama.attention.head_count", 0)
            .i32("llama.attention.key_length", 64);
      }),
      one([](GgufBuilder& g) { g.i32("llama.rope.dimension_count", 64); }),  // no head_count
      // No vocabulary: no other tokenizer key is read.
      one([](GgufBuilder& g) {
        g.string("tokenizer.ggml.model", "none").i32("tokenizer.ggml.bos_token_id", 1);
      }),
  };
  for (const GgufBuilder& g : fine) EXPECT_EQ(type_problems(g), Strings{});
  b = one([](GgufBuilder& g) {
    g.string("tokenizer.ggml.model", "gpt2").u32("tokenizer.ggml.merges", 1);
  });
  expect_one(b, 2, "tokenizer.ggml.merges",
             "tokenizer.ggml.merges must be an array of string, found u32; llama.cpp's loader "
             "refuses the model");
  // DeepSeek's own keys, for deepseek2 only.
  b = GgufBuilder();
  b.string("general.architecture", "deepseek2").u64("deepseek2.expert_shared_count", 1);
  expect_one(b, 1, "deepseek2.expert_shared_count",
             "deepseek2.expert_shared_count must be u32, found u64; llama.cpp's loader refuses "
             "the model");
  // Not a model: an imatrix or adapter is read by other code.
  b = GgufBuilder();
  b.string("general.type", "imatrix").i32("general.file_type", 1);
  EXPECT_EQ(problems(b), Strings{});
}

// Keys a language model cannot do without (libllama 3.21.1: "key not found in model:
// llama.block_count", "cannot find tokenizer vocab in model file", "cannot find tokenizer
// merges in model file"); each is reported, once, without an offset.
TEST(check, required_keys) {
  const auto model = [](std::string_view without, std::string_view tokenizer = "llama") {
    GgufBuilder b;
    b.string("general.architecture", "llama");
    for (const char* k : {"llama.context_length", "llama.embedding_length", "llama.block_count"})
      if (k != without) b.u32(k, 8);
    if (without != "llama.attention.layer_norm_rms_epsilon")
      b.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    if (without != "tokenizer.ggml.model") b.string("tokenizer.ggml.model", std::string(tokenizer));
    if (without != "tokenizer.ggml.tokens") b.string_array("tokenizer.ggml.tokens", {"a", "b"});
    b.tensor("token_embd.weight", 0, {4});
    return b;
  };
  const auto missing = [](std::string_view key, std::string_view why) {
    return Strings{
        fmt::format("error: mem.gguf: key '{}': missing; llama.cpp's loader refuses "
                    "the model without it ({})",
                    key, why)};
  };
  EXPECT_EQ(problems(model("")), Strings{});
  for (const char* k : {"llama.context_length", "llama.embedding_length", "llama.block_count",
                        "llama.attention.layer_norm_rms_epsilon"})
    EXPECT_EQ(problems(model(k)), missing(k, fmt::format("key not found in model: {}", k)));
  EXPECT_EQ(problems(model("tokenizer.ggml.model")),
            missing("tokenizer.ggml.model", "it reads every model's vocabulary"));
  EXPECT_EQ(problems(model("tokenizer.ggml.tokens")),
            missing("tokenizer.ggml.tokens", "cannot find tokenizer vocab in model file"));
  EXPECT_EQ(problems(model("", "gpt2")),
            missing("tokenizer.ggml.merges",
                    "a gpt2 (BPE) vocabulary: cannot find tokenizer merges in model file"));
  GgufBuilder merges = model("", "gpt2");
  merges.string_array("tokenizer.ggml.merges", {"a b"});
  EXPECT_EQ(problems(merges), Strings{});
  // A model without a vocabulary needs no tokens.
  EXPECT_EQ(problems(model("tokenizer.ggml.tokens", "none")), Strings{});
  // A vocabulary without tensors (llama-tokenize loads one with vocab_only, reading no
  // hyperparameter) needs only its vocabulary.
  GgufBuilder vocab;
  vocab.string("general.architecture", "llama")
      .string("tokenizer.ggml.model", "llama")
      .string_array("tokenizer.ggml.tokens", {"a", "b"});
  EXPECT_EQ(problems(vocab), Strings{});
  vocab.tensor("token_embd.weight", 0, {4});
  EXPECT_EQ(problems(vocab).size(), 4u);
  // Not language models: another architecture without a vocabulary (an mmproj's "clip"), a
  // llama-named container without hyperparameters or vocabulary, an imatrix.
  GgufBuilder clip;
  clip.string("general.architecture", "clip").u32("clip.vision.block_count", 4);
  EXPECT_EQ(problems(clip), Strings{});
  GgufBuilder bare;
  bare.string("general.architecture", "llama").tensor("x", 0, {4});
  EXPECT_EQ(problems(bare), Strings{});
  GgufBuilder imatrix;
  imatrix.string("general.type", "imatrix")
      .string("general.architecture", "llama")
      .u32("llama.block_count", 2);
  EXPECT_EQ(problems(imatrix), Strings{});
  // Another architecture with a vocabulary is a language model too.
  GgufBuilder qwen;
  qwen.string("general.architecture", "qwen2")
      .string("tokenizer.ggml.model", "gpt2")
      .string_array("tokenizer.ggml.tokens", {"a"})
      .string_array("tokenizer.ggml.merges", {"a b"})
      .u32("qwen2.context_length", 8)
      .u32("qwen2.embedding_length", 8)
      .tensor("token_embd.weight", 0, {4});
  EXPECT_EQ(problems(qwen),
            missing("qwen2.block_count", "key not found in model: qwen2.block_count"));
}

TEST(check, quantization_version_missing) {
  GgufBuilder b;
  b.tensor("x", 0, {4}).tensor("blk.0.ffn_up.weight", 12, {256});
  EXPECT_EQ(problems(b),
            Strings{"warning: mem.gguf: key 'general.quantization_version': missing, but "
                    "tensor 'blk.0.ffn_up.weight' is quantized (q4_K); quantized GGUFs record "
                    "general.quantization_version (u32, currently 2), though llama.cpp's loader "
                    "does not read it"});
  GgufBuilder floats;
  floats.tensor("x", 0, {4}).tensor("y", 30, {4});
  EXPECT_EQ(problems(floats), Strings{});
}

TEST(check, quantization_version_of_wrong_type_or_value) {
  GgufBuilder wrong;
  wrong.i32("general.quantization_version", 2);
  EXPECT_EQ(problems(wrong),
            Strings{fmt::format("warning: mem.gguf: key 'general.quantization_version': at "
                                "byte {}: general.quantization_version must be u32, found i32 "
                                "(llama.cpp's loader does not read it; other readers may refuse "
                                "it)",
                                wrong.layout().kv_type_offsets[0])});
  GgufBuilder old;
  old.u32("general.quantization_version", 1);
  EXPECT_EQ(problems(old),
            Strings{fmt::format("warning: mem.gguf: key 'general.quantization_version': at "
                                "byte {}: general.quantization_version is 1; ggml's quantized "
                                "formats are at version 2",
                                old.layout().kv_value_offsets[0])});
}

TEST(check, gate_and_up_experts_of_a_layer_share_a_type) {
  GgufBuilder b;
  b.string("general.architecture", "deepseek2")
      .u32("general.quantization_version", 2)
      .tensor("blk.3.ffn_gate_exps.weight", 16, {256, 2, 2})  // iq2_xxs
      .tensor("blk.3.ffn_up_exps.weight", 12, {256, 2, 2})    // q4_K
      .tensor("blk.3.ffn_down_exps.weight", 10, {256, 2, 2})  // q2_K: down may differ
      .tensor("blk.4.ffn_gate_exps.weight", 12, {256, 2, 2})
      .tensor("blk.4.ffn_up_exps.weight", 12, {256, 2, 2});
  EXPECT_EQ(problems(b),
            Strings{fmt::format("warning: mem.gguf: tensor 'blk.3.ffn_up_exps.weight': at byte "
                                "{}: type q4_K differs from iq2_xxs of tensor "
                                "'blk.3.ffn_gate_exps.weight' in layer 3; ds4 requires the routed "
                                "gate and up experts of a layer to share one type",
                                b.layout().tensor_type_offsets[1])});
}

TEST(check, partially_read_file_with_data_past_eof) {
  const auto b = base().defect({DefectKind::kDataPastEof});
  std::optional<Error> err;
  const auto f = GgufFile::parse_partial(memory_source(b.build(), kName), err);
  ASSERT_TRUE(err);
  EXPECT_EQ(problems(Model::from_files({f})),
            Strings{fmt::format("error: mem.gguf: tensor 'output.weight': at byte {}: data runs "
                                "past end of file (needs 32 bytes at offset 224, file has {})",
                                b.layout().tensor_offset_fields[2], b.layout().file_size)});
}

TEST(check, problems_name_the_shard) {
  testing::TempDir dir;
  const std::string p1 = split_path(dir.file("m"), 1, 2), p2 = split_path(dir.file("m"), 2, 2);
  GgufBuilder a;
  a.string("general.architecture", "llama")
      .u16("split.no", 0)
      .u16("split.count", 2)
      .i32("split.tensors.count", 2)
      .tensor("a", 0, {4});
  GgufBuilder b;
  b.u16("split.no", 1).u16("split.count", 2).i32("split.tensors.count", 2);
  b.tensor(std::string(70, 'b'), 0, {4});
  a.write_file(p1);
  b.write_file(p2);
  const auto ps = check_model(Model::open(p1));
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].path, p2);
  EXPECT_EQ(ps[0].message, "name is 70 bytes; ggml requires fewer than 64");
}

// ---- data ----

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST(check, non_finite_float_values) {
  std::vector<float> f(16, 1.0f);
  f[5] = NAN;
  f[9] = INFINITY;
  std::vector<uint16_t> h(8, fp32_to_fp16(0.5f));
  h[0] = 0xFC00;  // -inf
  std::vector<uint16_t> bf(8, fp32_to_bf16(2.0f));
  bf[7] = 0x7FC1;  // nan
  std::vector<double> d(4, 1.0);
  d[3] = -INFINITY;
  const auto raw = [](const auto& v) {
    std::vector<uint8_t> out(v.size() * sizeof(v[0]));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  };
  GgufBuilder b;
  b.tensor("f32", 0, {16}, raw(f))
      .tensor("f16", 1, {8}, raw(h))
      .tensor("bf16", 30, {8}, raw(bf))
      .tensor("f64", 28, {4}, raw(d))
      .tensor("fine", 0, {4}, f32_bytes({1, -1, 0, 3e38f}));
  const uint64_t o = b.layout().data_offset;
  EXPECT_EQ(problems(b),
            (Strings{fmt::format("error: mem.gguf: tensor 'f32': at byte {}: 2 non-finite values "
                                 "(first: nan at element 5)",
                                 o + 20),
                     fmt::format("error: mem.gguf: tensor 'f16': at byte {}: 1 non-finite value "
                                 "(first: -inf at element 0)",
                                 o + 64),
                     fmt::format("error: mem.gguf: tensor 'bf16': at byte {}: 1 non-finite value "
                                 "(first: nan at element 7)",
                                 o + 96 + 14),
                     fmt::format("error: mem.gguf: tensor 'f64': at byte {}: 1 non-finite value "
                                 "(first: -inf at element 3)",
                                 o + 128 + 24)}));
  CheckOptions no_scan;
  no_scan.scan_data = false;
  EXPECT_EQ(problems(model_of(b), no_scan), Strings{});
}

TEST(check, scan_is_the_same_for_any_chunking_and_threads) {
  std::vector<float> f(1000, 0.25f);
  f[300] = INFINITY;
  f[301] = NAN;
  f[999] = -INFINITY;
  GgufBuilder b;
  b.tensor("t", 0, {1000}, f32_bytes(f));
  const Model m = model_of(b);
  const Strings want{
      fmt::format("error: mem.gguf: tensor 't': at byte {}: 3 non-finite values "
                  "(first: inf at element 300)",
                  b.layout().data_offset + 1200)};
  for (uint64_t chunk :
       {uint64_t{4}, uint64_t{64}, uint64_t{1200}, uint64_t{1204}, uint64_t{1} << 20})
    for (unsigned threads : {1u, 2u}) {
      CheckOptions o;
      o.chunk_bytes = chunk;
      o.threads = threads;
      EXPECT_EQ(problems(m, o), want) << chunk << " " << threads;
    }
}

TEST(check, non_finite_block_scales) {
  // Three blocks each; block 1 gets an infinite or NaN scale in one field.
  struct Case {
    uint32_t type;
    uint16_t at;
    uint16_t bits;
    const char* text;
  };
  for (const Case& c : {Case{2, 0, 0x7C00, "d = inf"}, Case{3, 2, 0xFE00, "m = nan"},
                        Case{10, 82, 0xFC00, "dmin = -inf"}, Case{11, 108, 0x7C00, "d = inf"},
                        Case{12, 2, 0x7C01, "dmin = nan"}, Case{14, 208, 0x7C00, "d = inf"},
                        Case{16, 0, 0x7C00, "d = inf"}, Case{34, 52, 0x7C00, "d = inf"},
                        Case{35, 64, 0x7C00, "d = inf"}}) {
    const TypeTraits& tr = *find_type(c.type);
    const uint64_t bs = tr.type_size;
    auto payload = testing::pattern_bytes(3 * bs, c.type);
    std::memcpy(payload.data() + bs + c.at, &c.bits, 2);
    GgufBuilder b;
    b.u32("general.quantization_version", 2)
        .tensor("q", c.type, {static_cast<int64_t>(3 * tr.block_size)}, payload);
    EXPECT_EQ(problems(b),
              Strings{fmt::format("error: mem.gguf: tensor 'q': at byte {}: 1 block with a "
                                  "non-finite scale (first: block 1, {})",
                                  b.layout().data_offset + bs + c.at, c.text)})
        << c.type;
  }
}

TEST(check, block_scale_counts_blocks_not_fields) {
  // q4_1 with d and m both infinite in block 0 and d in block 2: 2 blocks.
  auto payload = testing::pattern_bytes(3 * 20, 5);
  const uint16_t inf = 0x7C00;
  for (size_t at : {0, 2, 40}) std::memcpy(payload.data() + at, &inf, 2);
  GgufBuilder b;
  b.u32("general.quantization_version", 2).tensor("q", 3, {96}, payload);
  EXPECT_EQ(problems(b), Strings{fmt::format("error: mem.gguf: tensor 'q': at byte {}: 2 blocks "
                                             "with a non-finite scale (first: block 0, d = inf)",
                                             b.layout().data_offset)});
}

// mxfp4's E8M0 exponent 0xFF is the format's NaN, which ggml_validate_row_data (llama.cpp's
// tensor check) refuses; 0xFE is the largest valid exponent.
TEST(check, mxfp4_nan_exponent) {
  auto payload = testing::pattern_bytes(3 * 17, 39);
  payload[0] = 0x7F;
  payload[17] = 0xFF;
  payload[34] = 0xFE;
  GgufBuilder b;
  b.u32("general.quantization_version", 2).tensor("q", 39, {96}, payload);
  EXPECT_EQ(problems(b), Strings{fmt::format("error: mem.gguf: tensor 'q': at byte {}: 1 block "
                                             "with a non-finite scale (first: block 1, e = nan "
                                             "(E8M0 0xff))",
                                             b.layout().data_offset + 17)});
}

TEST(check, q8_k_and_iq1_m_scales) {
  auto q8k = testing::pattern_bytes(2 * 292, 1);
  const float nan = NAN;
  std::memcpy(q8k.data() + 292, &nan, 4);
  // iq1_m assembles its fp16 scale from the top nibbles of four u16 words at byte 48:
  // 0x7C00 = nibbles 0, 0, 0xC, 0x7 (low to high).
  auto iq1m = testing::pattern_bytes(56, 2);
  for (int k = 0; k < 4; ++k) iq1m[49 + 2 * k] &= 0x0F;
  iq1m[53] |= 0xC0;
  iq1m[55] |= 0x70;
  GgufBuilder b;
  b.u32("general.quantization_version", 2)
      .tensor("q8k", 15, {512}, q8k)
      .tensor("iq1m", 29, {256}, iq1m);
  const uint64_t o = b.layout().data_offset;
  EXPECT_EQ(problems(b),
            (Strings{fmt::format("warning: mem.gguf: tensor 'q8k': at byte {}: type q8_K is one "
                                 "ggml uses only for activations: llama.cpp loads the file but "
                                 "crashes computing with this tensor",
                                 b.layout().tensor_type_offsets[0]),
                     fmt::format("error: mem.gguf: tensor 'q8k': at byte {}: 1 block with a "
                                 "non-finite scale (first: block 1, d = nan)",
                                 o + 292),
                     fmt::format("error: mem.gguf: tensor 'iq1m': at byte {}: 1 block with a "
                                 "non-finite scale (first: block 0, scale = inf)",
                                 o + 608 + 48)}));
}

// ---- ggml as the judge ----

// Whether ggml's decoder turns this one block into any non-finite value; nullopt when ggml has
// no decoder for the type (q8_1).
std::optional<bool> ggml_decodes_nonfinite(uint32_t type, const std::vector<uint8_t>& block) {
  const TypeTraits& tr = *find_type(type);
  std::vector<float> out(tr.block_size);
  if (!testing::GgmlRef::get().dequantize_row(static_cast<int>(type), block.data(), out.data(),
                                              tr.block_size))
    return std::nullopt;
  for (float v : out)
    if (!std::isfinite(v)) return true;
  return false;
}

bool check_flags_block(uint32_t type, const std::vector<uint8_t>& block) {
  GgufBuilder b;
  b.string("general.architecture", "llama")
      .u32("general.quantization_version", 2)
      .tensor("q", type, {static_cast<int64_t>(find_type(type)->block_size)}, block);
  // Errors only: q8_K and q8_1 always get a warning (activation-only types).
  const auto found = check_model(model_of(b));
  return std::any_of(found.begin(), found.end(),
                     [](const auto& p) { return p.severity == "error"; });
}

TEST(check, scale_fields_agree_with_ggml_decoders) {
  // Put an fp16 infinity at every even byte of a block: ggml's decoder yields a non-finite
  // value exactly when the check flags the block. (mxfp4/nvfp4 have no fp16 scale; their
  // E8M0/UE4M3 scales always decode to finite numbers.)
  GGUF_REQUIRE_GGML();
  for (GgmlType t : active_types()) {
    const TypeTraits& tr = traits(t);
    if (!tr.quantized || t == GgmlType::MXFP4 || t == GgmlType::NVFP4) continue;
    SCOPED_TRACE(tr.name);
    const auto clean = testing::pattern_bytes(tr.type_size, tr.id);
    if (!ggml_decodes_nonfinite(tr.id, clean)) continue;  // no decoder to judge with
    ASSERT_FALSE(*ggml_decodes_nonfinite(tr.id, clean));
    ASSERT_FALSE(check_flags_block(tr.id, clean));
    int flagged = 0;
    for (uint32_t at = 0; at + 2 <= tr.type_size; at += 2) {
      auto block = clean;
      const uint16_t inf = 0x7C00;
      std::memcpy(block.data() + at, &inf, 2);
      const bool ggml = ggml_decodes_nonfinite(tr.id, block).value();
      EXPECT_EQ(check_flags_block(tr.id, block), ggml) << "fp16 inf at byte " << at;
      flagged += ggml;
    }
    if (t == GgmlType::Q8_K) {
      auto block = clean;
      const float inf = INFINITY;
      std::memcpy(block.data(), &inf, 4);
      EXPECT_TRUE(ggml_decodes_nonfinite(tr.id, block).value());
      EXPECT_TRUE(check_flags_block(tr.id, block));
    } else if (t == GgmlType::IQ1_M) {
      auto block = clean;
      for (int k = 0; k < 4; ++k) block[49 + 2 * k] &= 0x0F;
      block[53] |= 0xC0;
      block[55] |= 0x70;
      EXPECT_TRUE(ggml_decodes_nonfinite(tr.id, block).value());
      EXPECT_TRUE(check_flags_block(tr.id, block));
    } else {
      EXPECT_GE(flagged, 1);  // every other block type has an fp16 scale somewhere
    }
  }
}

TEST(check, errors_agree_with_ggml_reader) {
  // For files our reader accepts, check_model finds an error exactly when ggml refuses.
  GGUF_REQUIRE_GGML();
  testing::TempDir dir;
  const auto zero_first = [] {
    GgufBuilder b;
    b.tensor("a", 0, {32}).tensor("empty", 0, {0}).defect({DefectKind::kSharedData, 1});
    return b;
  };
  const std::vector<std::pair<std::string, GgufBuilder>> cases = {
      {"sound", base()},
      {"shared", base().defect({DefectKind::kSharedData, 1})},
      {"overlap", base().defect({DefectKind::kOverlap, 1})},
      {"gap", base().defect({DefectKind::kGap, 1})},
      {"gap0", base().defect({DefectKind::kGap, 0})},
      {"gap2", base().defect({DefectKind::kGap, 2})},
      {"reorder", base().defect({DefectKind::kReorder, 0})},
      {"reorder1", base().defect({DefectKind::kReorder, 1})},
      {"long", base().defect({DefectKind::kLongTensorName, 2})},
      {"unknown", base().defect({DefectKind::kUnknownTypeId, 1})},
      {"removed", base().defect({DefectKind::kRemovedTypeId, 1})},
      {"empty_misplaced", zero_first()},
      {"align64", base().alignment(64)},
  };
  for (const auto& [name, b] : cases) {
    SCOPED_TRACE(name);
    const std::string path = testing::write_bytes(dir.file(name + ".gguf"), b.build());
    const Model m = Model::open(path);
    bool errors = false;
    for (const Problem& p : check_model(m)) errors |= p.severity == "error";
    EXPECT_EQ(errors, !testing::GgmlRef::get().gguf_accepts(path));
  }
}

}  // namespace
}  // namespace gguf
