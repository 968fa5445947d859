// gguf-requant: plans, types, selections, thread independence, and the binary; importance
// matrices and refused values are requant_imatrix_test.cpp.
#include "gguf/ops/requant.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "cli_run.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/hash.h"
#include "gguf/inputs/imatrix.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"
#include "gguf_builder.h"
#include "requant_fixture.h"

namespace gguf {
namespace {

using testing::decode_all;
using testing::encode_reference;
using testing::run_cli;
using testing::TempDir;
using testing::write_f16_model;
using testing::write_odd_row_model;

TEST(requant, encodes_quantizable_tensors_and_copies_the_rest) {
  TempDir dir;
  const Model in = Model::open(write_f16_model(dir));
  RequantOptions o;
  o.type = GgmlType::Q8_0;
  const auto r = requant(in, o);
  const auto w = write_plan(r.plan, dir.file("out.gguf"), {});
  const Model out = Model::open(w.paths.front());
  ASSERT_EQ(out.tensors().size(), in.tensors().size());
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    const TensorRef& a = in.tensors()[i];
    const TensorRef& b = out.tensors()[i];
    SCOPED_TRACE(a.name());
    ASSERT_EQ(a.name(), b.name());
    if (is_quantizable(*a.info, "deepseek2")) {
      EXPECT_EQ(r.rows[i].action, PlanAction::kEncode);
      EXPECT_EQ(b.info->type_id, static_cast<uint32_t>(GgmlType::Q8_0));
      const auto ref = encode_reference(a, GgmlType::Q8_0, {});
      ASSERT_EQ(ref.size(), b.data().size());
      EXPECT_EQ(0, std::memcmp(ref.data(), b.data().data(), ref.size()));
    } else {
      EXPECT_EQ(r.rows[i].action, PlanAction::kCopy);
      EXPECT_EQ(xxh3(a.data()), xxh3(b.data()));
      EXPECT_EQ(a.info->type_id, b.info->type_id);
    }
  }
  EXPECT_EQ(out.metadata().get_uint("general.file_type"), 7u);  // LLAMA_FTYPE_MOSTLY_Q8_0
  EXPECT_EQ(out.metadata().get_uint("general.quantization_version"), 2u);
}

// An input whose alignment lets tensor data start off a 32-byte boundary would make an output
// llama.cpp aborts on; requant raises it to 32 and says so.
TEST(requant, small_alignment_is_raised_to_32) {
  TempDir dir;
  MoeSpec s;
  s.n_layers = 2;
  s.n_experts = 2;
  s.vocab = 100;  // 100 x 64 f16 embeddings: the next tensor starts off 32 bytes at alignment 8
  s.alignment = 8;
  const std::string in_path =
      write_plan(synth_moe_plan(uniform_types(s, GgmlType::F16)), dir.file("a8.gguf"), {})
          .paths.front();
  const Model in = Model::open(in_path);
  ASSERT_EQ(in.first().alignment(), 8u);
  RequantOptions o;
  o.type = GgmlType::Q8_0;
  const auto r = requant(in, o);
  EXPECT_NE(std::find(r.notes.begin(), r.notes.end(),
                      "general.alignment 8 raised to 32 in the output: with less, tensor data may "
                      "start off a 32-byte boundary, and llama.cpp aborts on that when it "
                      "memory-maps the file"),
            r.notes.end());
  const Model out = Model::open(write_plan(r.plan, dir.file("out.gguf"), {}).paths.front());
  EXPECT_EQ(out.first().alignment(), 32u);
  EXPECT_EQ(out.metadata().get_uint("general.alignment"), 32u);
  for (const TensorRef& t : out.tensors()) EXPECT_EQ(t.data_start() % 32, 0u) << t.name();
}

// ggml reads general.alignment as the first key that says so up to a NUL byte: an input whose
// key is "general.alignment\0x" is laid out by it, and so must every output be (the writer
// used to take the default 32 while the key, copied, said 64), shards included; and a small one
// is raised on that key.
TEST(requant, alignment_key_is_found_up_to_a_nul_as_ggml_finds_it) {
  TempDir dir;
  const std::string key("general.alignment\0x", 19);
  for (const uint32_t a : {64u, 8u}) {
    SCOPED_TRACE(a);
    MoeSpec s;
    s.n_layers = 2;
    s.n_experts = 2;
    s.vocab = 100;
    Plan p = synth_moe_plan(uniform_types(s, GgmlType::F16));
    p.metadata.erase("general.alignment");
    p.metadata.set(key, Value::u32(a));
    const Model in =
        Model::open(write_plan(p, dir.file(fmt::format("in{}.gguf", a)), {}).paths.front());
    ASSERT_EQ(in.first().alignment(), a);
    for (const TensorRef& t : in.tensors()) EXPECT_EQ(t.data_start() % a, 0u) << t.name();
    RequantOptions o;
    o.type = GgmlType::Q8_0;
    const auto r = requant(in, o);
    EXPECT_EQ(r.plan.metadata.find("general.alignment"), nullptr);
    WriteOptions wo;
    wo.split_max_tensors = 5;
    const auto written = write_plan(r.plan, dir.file(fmt::format("out{}.gguf", a)), wo);
    ASSERT_GT(written.paths.size(), 1u);
    const Model out = Model::open(written.paths.front());
    for (const auto& shard : out.shards()) {
      EXPECT_EQ(shard->alignment(), std::max(a, 32u)) << shard->path();
      ASSERT_NE(shard->metadata().find(key), nullptr);
      EXPECT_EQ(shard->metadata().find(key)->as_uint(), std::max(a, 32u));
    }
    for (const TensorRef& t : out.tensors())
      EXPECT_EQ(t.data_start() % std::max(a, 32u), 0u) << t.name();
  }
}

// Values an i-quant encoder cannot place (squares that overflow float) in one row of a big
// tensor: the error names that row and its byte, not the block of rows a task held.
TEST(requant, an_encoder_refusal_names_the_row_and_its_byte) {
  TempDir dir;
  const int64_t ne0 = 256, rows = 64;
  std::vector<float> x(static_cast<size_t>(ne0 * rows));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * std::sin(static_cast<float>(i));
  for (int64_t i = 0; i < 8; ++i) x[40 * ne0 + i] = 3e38f;
  auto bytes = std::make_shared<std::vector<uint8_t>>(x.size() * 4);
  std::memcpy(bytes->data(), x.data(), bytes->size());
  Plan p;
  p.metadata.set("general.architecture", Value::string("llama"));
  p.tensors.push_back({"blk.0.attn_q.weight", 0, {ne0, rows}, bytes->size(), MemoryBytes{bytes}});
  const Model in = Model::open(write_plan(p, dir.file("in.gguf"), {}).paths.front());
  RequantOptions o;
  o.type = GgmlType::IQ3_S;
  const auto r = requant(in, o);
  const uint64_t at = in.tensors().front().data_start() + 40 * ne0 * 4;
  try {
    write_plan(r.plan, dir.file("out.gguf"), {});
    FAIL() << "encoded";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("{}: tensor 'blk.0.attn_q.weight': at byte {}: row 40: i-quant lattice "
                          "search found no neighbour (non-finite input?)",
                          dir.file("in.gguf"), at));
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.gguf")));
}

TEST(requant, router_norms_and_1d_tensors_are_never_encoded) {
  TempDir dir;
  const Model in = Model::open(write_f16_model(dir));
  const auto r = requant(in, {GgmlType::Q4_K, {}, nullptr, 1});
  for (const auto& row : r.rows) {
    if (row.name.find("ffn_gate_inp") != std::string::npos ||
        row.name.find("norm") != std::string::npos ||
        row.name.find("exp_probs_b") != std::string::npos) {
      EXPECT_EQ(row.action, PlanAction::kCopy) << row.name;
    }
  }
}

// Integer tensors are data (indices, masks), not weights: copied whatever the target type.
TEST(requant, integer_tensors_are_never_encoded) {
  TempDir dir;
  for (GgmlType it : {GgmlType::I8, GgmlType::I16, GgmlType::I32, GgmlType::I64}) {
    Plan plan;
    plan.metadata.set("general.architecture", Value::string("llama"));
    PlanTensor t;
    t.name = "blk.0.attn_q.weight";
    t.type_id = static_cast<uint32_t>(it);
    t.shape = {256, 2};
    t.bytes = *row_bytes(it, 256) * 2;
    t.source = MemoryBytes{std::make_shared<const std::vector<uint8_t>>(t.bytes, uint8_t{7})};
    plan.tensors.push_back(t);
    // A weight beside it, so that there is something to re-encode.
    t.name = "blk.0.attn_k.weight";
    t.type_id = static_cast<uint32_t>(GgmlType::F32);
    t.bytes = 256 * 2 * 4;
    t.source = MemoryBytes{std::make_shared<const std::vector<uint8_t>>(t.bytes, uint8_t{0})};
    plan.tensors.push_back(t);
    const std::string path = dir.file(fmt::format("i{}.gguf", static_cast<int>(it)));
    write_plan(plan, path, {});
    const auto r = requant(Model::open(path), {GgmlType::Q4_K, {}, nullptr, 1});
    ASSERT_EQ(r.rows.size(), 2u);
    EXPECT_EQ(r.rows[0].action, PlanAction::kCopy) << traits(it).name;
    EXPECT_EQ(r.plan.tensors[0].type_id, static_cast<uint32_t>(it));
    EXPECT_EQ(r.rows[1].action, PlanAction::kEncode);
  }
}

// What llama-quantize never quantizes is copied: biases (2-D ones too), shapes whose
// trailing 1s make them look 2-D, and the small special weights (a [4, 8192] Mamba
// convolution used to fail q4_K's row-length check, where llama-quantize keeps it f32).
TEST(requant, tensors_llama_quantize_keeps_are_copied) {
  TempDir dir;
  Plan plan;
  plan.metadata.set("general.architecture", Value::string("llama"));
  const auto f32 = [&](std::string name, std::vector<int64_t> shape) {
    PlanTensor t;
    t.name = std::move(name);
    t.type_id = static_cast<uint32_t>(GgmlType::F32);
    t.shape = std::move(shape);
    t.bytes = 4;
    for (int64_t d : t.shape) t.bytes *= static_cast<uint64_t>(d);
    t.source = MemoryBytes{std::make_shared<const std::vector<uint8_t>>(t.bytes, uint8_t{0})};
    plan.tensors.push_back(std::move(t));
  };
  f32("blk.0.ffn_gate_exps.bias", {256, 4});
  f32("blk.0.attn_q.bias", {256, 1});
  f32("blk.0.ffn_up.weight", {256, 1});
  f32("blk.0.ssm_conv1d.weight", {4, 8192});
  f32("blk.0.shortconv.conv.weight", {3, 256});
  f32("blk.0.time_mix_w1.weight", {256, 32});
  f32("blk.0.attn_rel_b.weight", {32, 8});
  f32("blk.0.altup_proj.weight", {256, 4});
  f32("blk.0.laurel_l.weight", {256, 4});
  f32("per_layer_model_proj.weight", {256, 4});
  f32("position_embd.weight", {256, 16});
  f32("token_types.weight", {256, 2});
  f32("v.position_embd.weight", {256, 16});
  f32("blk.0.attn_k.weight", {256, 2});       // the one to encode
  f32("blk.0.ffn_down.weight", {256, 2, 1});  // 2-D to ggml: encoded
  const std::string path = dir.file("in.gguf");
  write_plan(plan, path, {});
  const auto r = requant(Model::open(path), {GgmlType::Q4_K, {}, nullptr, 1});
  ASSERT_EQ(r.rows.size(), plan.tensors.size());
  for (const auto& row : r.rows) {
    const bool encoded = row.name == "blk.0.attn_k.weight" || row.name == "blk.0.ffn_down.weight";
    EXPECT_EQ(row.action, encoded ? PlanAction::kEncode : PlanAction::kCopy) << row.name;
  }
}

// A run that would write a copy of its input is an error saying why, dry run or not.
TEST(requant, nothing_to_re_encode_is_an_error) {
  TempDir dir;
  const std::string in = write_f16_model(dir);
  const Model m = Model::open(in);
  const auto message = [&](GgmlType type, const std::vector<std::string>& roles) {
    try {
      requant(m, {type, parse_selector({}, roles, {}), nullptr, 1});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(GgmlType::Q8_0, {"norm"}),
            in + ": nothing to re-encode: the 13 selected tensors are never re-encoded (1-D "
                 "tensors, biases, norms, the router, integer tensors and the small weights "
                 "llama-quantize keeps are always copied)");
  EXPECT_EQ(message(GgmlType::F16, {}),
            in + ": nothing to re-encode: the 35 selected tensors that can be re-encoded are "
                 "already f16");
  const auto r = run_cli("gguf-requant", {in, "-o", dir.file("o.gguf"), "--type", "q8_0", "--role",
                                          "router", "--dry-run"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gguf-requant: error: " + in +
                       ": nothing to re-encode: the 4 selected tensors are never re-encoded (1-D "
                       "tensors, biases, norms, the router, integer tensors and the small "
                       "weights llama-quantize keeps are always copied)\n");
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.gguf")));
}

// A file is what its first bytes say: a GGUF named *.safetensors is requantized as a GGUF.
TEST(requant, gguf_named_safetensors_is_a_gguf) {
  TempDir dir;
  const std::string in = dir.file("m.safetensors");
  std::filesystem::rename(write_f16_model(dir), in);
  const auto r = run_cli("gguf-requant", {in, "-o", dir.file("o.gguf"), "--type", "q8_0", "--role",
                                          "routed", "--json"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  size_t encoded = 0;
  for (const auto& t : j["tensors"]) encoded += t["type_after"] == "q8_0";
  EXPECT_GT(encoded, 0u);
  // Bytes that are neither GGUF nor safetensors under that name: the safetensors reader's error.
  std::ofstream(dir.file("x.safetensors")) << "GGUX and then some bytes";
  const auto x = run_cli("gguf-requant", {dir.file("x.safetensors"), "-o", dir.file("p.gguf")});
  EXPECT_EQ(x.code, 1);
  EXPECT_NE(x.err.find("safetensors header length"), std::string::npos) << x.err;
}

// Decoding to f32 is exact, so it is not reported as lossy; every other encode is, and one of
// a tensor that was already quantized is also "requantized" (its error adds up).
TEST(requant, only_decoding_to_f32_is_lossless) {
  TempDir dir;
  const std::string in = write_f16_model(dir);
  write_plan(requant(Model::open(in), {GgmlType::Q8_0, {}, nullptr, 1}).plan, dir.file("q.gguf"),
             {});
  const Model f16 = Model::open(in), q = Model::open(dir.file("q.gguf"));
  for (const Model* m : {&f16, &q})
    for (GgmlType type : {GgmlType::F32, GgmlType::BF16, GgmlType::Q4_K}) {
      const auto r = requant(*m, {type, {}, nullptr, 1});
      const bool quantized_source = m == &q;
      SCOPED_TRACE(fmt::format("{} from {}", traits(type).name, quantized_source ? "q8_0" : "f16"));
      size_t lossy = 0, requantized = 0, encoded = 0;
      for (const auto& row : r.rows) {
        lossy += row.lossy;
        requantized += row.requantized;
        encoded += row.action != PlanAction::kCopy;
      }
      EXPECT_EQ(encoded, 35u);
      EXPECT_EQ(lossy, type == GgmlType::F32 ? 0u : encoded);
      EXPECT_EQ(requantized, quantized_source ? lossy : 0u);
      EXPECT_EQ(std::count(r.notes.begin(), r.notes.end(),
                           "some tensors were already quantized: re-encoding them adds error"),
                requantized ? 1 : 0);
      const auto j = nlohmann::json::parse(render_requant_json(r, nullptr, nullptr));
      for (size_t i = 0; i < r.rows.size(); ++i) {
        EXPECT_EQ(j["tensors"][i]["lossy"], r.rows[i].lossy);
        EXPECT_EQ(j["tensors"][i]["requantized"], r.rows[i].requantized);
      }
    }
}

// f64 holds values f32 cannot: decoding it to f32 may round, so it is lossy, and --exact (whose
// paths and proof go through f32) has no path from it.
TEST(requant, f64_to_f32_is_lossy_and_has_no_exact_path) {
  TempDir dir;
  std::vector<double> v(256);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1.0 + static_cast<double>(i) * 1e-12;
  std::vector<uint8_t> bytes(v.size() * 8);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  testing::GgufBuilder b;
  b.string("general.architecture", "llama").tensor("blk.0.attn_q.weight", 28, {64, 4}, bytes);
  b.write_file(dir.file("f64.gguf"));
  const Model m = Model::open(dir.file("f64.gguf"));
  const auto r = requant(m, {GgmlType::F32, {}, nullptr, 1});
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].action, PlanAction::kDecode);
  EXPECT_TRUE(r.rows[0].lossy);
  EXPECT_FALSE(r.rows[0].requantized);
  RequantOptions o;
  o.type = GgmlType::F32;
  o.exact = true;
  try {
    (void)requant(m, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no exact path from f64 to f32: f64 values are wider "
                                         "than f32's, which --exact moves values through"),
              std::string::npos)
        << e.what();
  }
}

TEST(requant, output_does_not_depend_on_thread_count) {
  TempDir dir;
  const Model in = Model::open(write_f16_model(dir));
  std::vector<uint64_t> hashes[2];
  for (unsigned threads : {1u, 2u}) {
    RequantOptions o{GgmlType::Q4_K, {}, nullptr, threads};
    const auto w = write_plan(requant(in, o).plan, dir.file(fmt::format("o{}.gguf", threads)), {});
    hashes[threads - 1] = hash_tensors(Model::open(w.paths.front()), {});
  }
  EXPECT_EQ(hashes[0], hashes[1]);
}

TEST(requant, selectors_restrict_what_is_encoded) {
  TempDir dir;
  const Model in = Model::open(write_f16_model(dir));
  RequantOptions o{GgmlType::Q4_K, parse_selector({"2"}, {"routed-down"}, {}), nullptr, 1};
  const auto r = requant(in, o);
  size_t encoded = 0;
  for (const auto& row : r.rows)
    if (row.action != PlanAction::kCopy) {
      ++encoded;
      EXPECT_EQ(row.name, "blk.2.ffn_down_exps.weight");
    }
  EXPECT_EQ(encoded, 1u);
}

// Layer 0 is dense (as in DeepSeek): --layers 0-2 --role routed re-encodes the routed experts
// of layers 1-2 rather than failing on layer 0.
TEST(requant, layer_range_may_include_layers_without_a_match) {
  TempDir dir;
  const Model in = Model::open(write_f16_model(dir));
  RequantOptions o{GgmlType::Q8_0, parse_selector({"0-2"}, {"routed"}, {}), nullptr, 1};
  const auto r = requant(in, o);
  std::vector<std::string> encoded;
  for (const auto& row : r.rows)
    if (row.action != PlanAction::kCopy) encoded.push_back(row.name);
  EXPECT_EQ(encoded,
            (std::vector<std::string>{"blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight",
                                      "blk.1.ffn_down_exps.weight", "blk.2.ffn_gate_exps.weight",
                                      "blk.2.ffn_up_exps.weight", "blk.2.ffn_down_exps.weight"}));
  // A layer the model does not have is still an error.
  o.selector = parse_selector({"0-5"}, {"routed"}, {});
  try {
    requant(in, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), fmt::format("layers 3-5 do not exist in '{}' (layers 0-2)", in.path()));
  }
}

// The write would fail to create its temp file there: the dry run says so too (exit 1, an I/O
// problem, not a usage error).
TEST(requant, dry_run_refuses_an_output_directory_that_cannot_take_it) {
  TempDir dir;
  const std::string in = write_f16_model(dir);
  const std::string file = dir.file("plain");
  std::ofstream(file) << "x";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dir.file("nodir/o.gguf"), "'" + dir.file("nodir") + "': no such file or directory"},
      {file + "/o.gguf", "'" + file + "': not a directory"},
  };
  for (const auto& [out, reason] : cases) {
    for (const bool dry : {true, false}) {
      std::vector<std::string> args = {in, "-o", out, "--type", "q8_0"};
      if (dry) args.push_back("--dry-run");
      const auto res = run_cli("gguf-requant", args);
      EXPECT_EQ(res.code, 1) << dry;
      EXPECT_EQ(res.out, "");
      EXPECT_EQ(res.err, fmt::format("gguf-requant: error: {}: cannot create the output in "
                                     "directory {}\n",
                                     out, reason));
    }
  }
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"in.gguf", "plain"}));
}

TEST(requant, row_length_not_fitting_the_block_is_an_error_naming_the_tensor) {
  TempDir dir;
  const Model in = Model::open(write_odd_row_model(dir));
  try {
    requant(in, {GgmlType::Q4_K, {}, nullptr, 1});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    // Byte 100 is ne0: the tensor info at 69, its name's length and 19 bytes, n_dims.
    EXPECT_EQ(std::string(e.what()),
              dir.file("odd.gguf") +
                  ": tensor 'blk.0.attn_q.weight': at byte 100: row length 96 is not a multiple "
                  "of the q4_K block size 256");
  }
}

TEST(requant, cli_reports_json_and_usage_errors) {
  TempDir dir;
  const std::string in = write_f16_model(dir);
  auto res = run_cli("gguf-requant", {in, "-o", dir.file("o.gguf"), "--type", "Q8_0", "--json"});
  ASSERT_EQ(res.code, 0) << res.err;
  const auto j = nlohmann::json::parse(res.out);
  EXPECT_TRUE(j["tensors"][0]["importance"].is_null());  // q8_0 takes no importance
  EXPECT_EQ(j["output"], dir.file("o.gguf"));
  EXPECT_EQ(j["outputs"], nlohmann::json::array({dir.file("o.gguf")}));  // as gguf-splice's
  EXPECT_TRUE(j["verified"].get<bool>());
  const auto dry = run_cli("gguf-requant", {in, "--type", "q8_0", "--dry-run", "--json"});
  ASSERT_EQ(dry.code, 0) << dry.err;
  EXPECT_TRUE(nlohmann::json::parse(dry.out)["output"].is_null());
  EXPECT_EQ(nlohmann::json::parse(dry.out)["outputs"], nlohmann::json::array());
  for (const char* k :
       {"name", "source", "type_before", "type_after", "bytes_before", "bytes_after", "action"})
    EXPECT_TRUE(j["tensors"][0].contains(k)) << k;
  EXPECT_EQ(j["bytes_after"], std::filesystem::file_size(dir.file("o.gguf")));
  // A report that cannot be written fails the run (the file itself is complete).
  res = run_cli("gguf-requant", {in, "-o", dir.file("p.gguf"), "--type", "q8_0"}, "/dev/full");
  EXPECT_EQ(res.code, 1);
  EXPECT_EQ(res.err,
            "gguf-requant: error: cannot write to standard output: no space left on device\n");
  res = run_cli("gguf-requant", {in, "-o", dir.file("o.gguf"), "--type", "q8_0"});
  EXPECT_EQ(res.code, 2);
  EXPECT_NE(res.err.find("--force"), std::string::npos) << res.err;
  res = run_cli("gguf-requant", {in, "-o", dir.file("x.gguf"), "--type", "q9_9"});
  EXPECT_EQ(res.code, 2);
  EXPECT_TRUE(
      res.err.starts_with("gguf-requant: error: --type: unknown type 'q9_9' (types it "
                          "can write: f32, f16, q4_0,"))
      << res.err;
  // llama-quantize's presets are mixes: the message says which type and how to mix.
  res = run_cli("gguf-requant", {in, "-o", dir.file("x.gguf"), "--type", "Q4_K_M"});
  EXPECT_EQ(res.code, 2);
  EXPECT_EQ(res.err,
            "gguf-requant: error: --type: 'Q4_K_M' is a llama-quantize preset (a mix of types), "
            "not a ggml type: it is built around q4_K; make a mix with --type (for the rest) "
            "and per-tensor types (--tensor-type PATTERN=TYPE, --role-type ROLE=TYPE)\n"
            "Try 'gguf-requant --help' for more information.\n");
  res = run_cli("gguf-requant", {in, "-o", in, "--type", "q8_0", "--force"});
  EXPECT_EQ(res.code, 2);
  EXPECT_FALSE(res.err.empty());
  // --dry-run refuses what the write would refuse (the output is the input).
  res = run_cli("gguf-requant", {in, "-o", in, "--type", "q8_0", "--dry-run"});
  EXPECT_EQ(res.code, 2);
  EXPECT_NE(res.err.find("output is the same file as input"), std::string::npos) << res.err;
  // A dry run that passes says it wrote nothing.
  res = run_cli("gguf-requant", {in, "-o", dir.file("d.gguf"), "--type", "q8_0", "--dry-run"});
  EXPECT_EQ(res.code, 0) << res.err;
  EXPECT_TRUE(res.out.ends_with("\ndry run: no GGUF written\n")) << res.out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("d.gguf")));
  // Counts are digits only and in range (-1 used to become four billion threads).
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--threads", "-1"}, "the argument ('-1') for option '--threads' is invalid"},
      {{"--threads", "5000"}, "the argument ('5000') for option '--threads' is larger than 1024"},
      {{"--split-max-tensors", "0"},
       "the argument ('0') for option '--split-max-tensors' is smaller than 1"},
      {{"--split-max-size", "0"}, "--split-max-size: '0' is not a size of at least 1 byte"},
  };
  for (const auto& [args, message] : bad) {
    std::vector<std::string> argv = {in, "-o", dir.file("y.gguf"), "--type", "q8_0"};
    argv.insert(argv.end(), args.begin(), args.end());
    res = run_cli("gguf-requant", argv);
    EXPECT_EQ(res.code, 2) << args[0];
    EXPECT_EQ(res.err, "gguf-requant: error: " + message +
                           "\nTry 'gguf-requant --help' for more information.\n");
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("y.gguf")));
  // Usage errors come first: exit 2 whether or not the input or the matrix can be opened.
  res = run_cli("gguf-requant", {dir.file("missing.gguf"), "-o", dir.file("y.gguf"), "--type",
                                 "q4_K", "--role", "nosuchrole"});
  EXPECT_EQ(res.code, 2) << res.err;
  res = run_cli("gguf-requant", {in, "-o", dir.file("y.gguf"), "--type", "q4_1", "--exact",
                                 "--imatrix", dir.file("missing.dat")});
  EXPECT_EQ(res.code, 2) << res.err;
  EXPECT_NE(res.err.find("--imatrix has no use with --exact"), std::string::npos) << res.err;
  // q8_1 can be written, with a note that llama.cpp cannot compute with it.
  res = run_cli("gguf-requant",
                {in, "-o", dir.file("q81.gguf"), "--type", "q8_1", "--role", "attn-proj"});
  ASSERT_EQ(res.code, 0) << res.err;
  EXPECT_NE(res.err.find("q8_1 is a type ggml uses only for activations"), std::string::npos)
      << res.err;
  res = run_cli("gguf-inspect", {"--check", dir.file("q81.gguf")});
  EXPECT_EQ(res.code, 0) << res.out;  // a warning, not an error
  EXPECT_NE(res.err.find("type q8_1 is one ggml uses only for activations"), std::string::npos)
      << res.err;
}

}  // namespace
}  // namespace gguf
