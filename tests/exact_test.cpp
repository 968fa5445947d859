// gguf-requant --exact: q4_0 -> q4_1 and q5_0 -> q5_1 keep every value (judged by ggml's own
// decoders when it is available), f16 -> f32 -> f16 gives the original bytes back, and every
// pair or value without an exact path is refused naming the tensor, the block or the element;
// the proof runs before the output reaches its path.
#include "gguf/ops/exact.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "ggml_ref.h"
#include "gguf/base/fp16.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/hash.h"
#include "gguf/format/names.h"
#include "gguf/ops/requant.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"

namespace gguf {
namespace {

using testing::run_cli;
using testing::TempDir;

std::string write_model(const TempDir& dir, GgmlType type, const std::string& name,
                        uint64_t seed = 1) {
  MoeSpec s;
  s.n_layers = 3;
  s.n_experts = 4;
  s.vocab = 256;
  s.seed = seed;
  return write_plan(synth_moe_plan(uniform_types(s, type)), dir.file(name), {}).paths.front();
}

// Decodes with ggml's own row decoder when the library is there, else with ours (which the
// codec conformance tests hold bit-exact with ggml's).
std::vector<float> decode(const TensorRef& t) {
  std::vector<float> out(t.info->n_elements);
  const auto& ggml = testing::GgmlRef::get();
  if (!ggml.available() || !ggml.dequantize_row(static_cast<int>(t.info->type_id), t.data().data(),
                                                out.data(), static_cast<int64_t>(out.size())))
    dequantize(static_cast<GgmlType>(t.info->type_id), t.data(), out);
  return out;
}

struct Moved {
  ExactProof proof;
  std::string out;
};

Moved move_exactly(const TempDir& dir, const std::string& in, GgmlType to, const std::string& name,
                   unsigned threads = 1) {
  const Model m = Model::open(in);
  RequantOptions o;
  o.type = to;
  o.exact = true;
  o.threads = threads;
  // The synthetic model keeps its indexer (role attn) at f16 and its norms at f32, whatever
  // the recipe: the other roles are the ones at the model's type.
  if (to != GgmlType::F32)
    o.selector.roles = {Role::kRoutedGate, Role::kRoutedUp, Role::kRoutedDown, Role::kShared,
                        Role::kAttnProj,   Role::kDenseFfn, Role::kEmbedding,  Role::kOutput};
  const RequantResult r = requant(m, o);
  Moved moved;
  moved.out = dir.file(name);
  WriteOptions wo;
  const std::vector<std::string> names = {moved.out};
  wo.before_commit = [&](const Model& w) { moved.proof = prove_exact(m, r, w, threads, names); };
  write_plan(r.plan, moved.out, wo);
  return moved;
}

TEST(exact, q4_0_and_q5_0_move_to_q4_1_and_q5_1_without_changing_a_value) {
  TempDir dir;
  for (auto [from, to] :
       {std::pair{GgmlType::Q4_0, GgmlType::Q4_1}, std::pair{GgmlType::Q5_0, GgmlType::Q5_1}}) {
    SCOPED_TRACE(traits(from).name);
    const std::string in = write_model(dir, from, std::string(traits(from).name) + ".gguf");
    for (unsigned threads : {1u, 2u}) {
      const Moved m =
          move_exactly(dir, in, to, fmt::format("{}-{}.gguf", traits(to).name, threads), threads);
      const Model a = Model::open(in), b = Model::open(m.out);
      uint64_t moved = 0, values = 0, zeros = 0;
      for (const TensorRef& ta : a.tensors()) {
        const TensorRef* tb = b.find(ta.name());
        ASSERT_NE(tb, nullptr);
        if (ta.info->type_id != traits(from).id) {
          EXPECT_EQ(xxh3(ta.data()), xxh3(tb->data())) << ta.name();  // copied
          continue;
        }
        EXPECT_EQ(tb->info->type_id, traits(to).id) << ta.name();
        const auto va = decode(ta), vb = decode(*tb);
        for (size_t i = 0; i < va.size(); ++i) {
          ASSERT_EQ(va[i], vb[i]) << ta.name() << " element " << i;
          zeros += va[i] == 0 && std::signbit(va[i]) != std::signbit(vb[i]);
        }
        ++moved;
        values += va.size();
      }
      EXPECT_GT(moved, 10u);
      EXPECT_EQ(m.proof.tensors, moved);
      EXPECT_EQ(m.proof.values, values);
      EXPECT_EQ(m.proof.zeros_sign_changed, zeros);
      EXPECT_GT(zeros, 0u);  // q4_0 scales are negative about half the time
    }
    EXPECT_EQ(std::filesystem::file_size(dir.file(fmt::format("{}-1.gguf", traits(to).name))),
              std::filesystem::file_size(dir.file(fmt::format("{}-2.gguf", traits(to).name))));
  }
}

// Decoding to f32 and back to f16 (or bf16) gives the original bytes: every value fits.
TEST(exact, f16_through_f32_and_back_is_byte_identical) {
  TempDir dir;
  for (GgmlType half : {GgmlType::F16, GgmlType::BF16}) {
    const std::string in = write_model(dir, half, std::string(traits(half).name) + ".gguf");
    const Moved f32 =
        move_exactly(dir, in, GgmlType::F32, std::string(traits(half).name) + "-32.gguf");
    const Moved back =
        move_exactly(dir, f32.out, half, std::string(traits(half).name) + "-back.gguf");
    EXPECT_EQ(back.proof.zeros_sign_changed, 0u);
    const Model a = Model::open(in), b = Model::open(back.out);
    size_t same = 0;
    for (const TensorRef& t : a.tensors()) {
      const TensorRef* back_t = b.find(t.name());
      if (t.info->type_id != traits(half).id || back_t->info->type_id != traits(half).id) continue;
      EXPECT_EQ(xxh3(t.data()), xxh3(b.find(t.name())->data())) << t.name();
      ++same;
    }
    EXPECT_GT(same, 10u);
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(exact, refuses_what_has_no_exact_path) {
  TempDir dir;
  const std::string in = write_model(dir, GgmlType::Q4_0, "q4_0.gguf");
  const Model m = Model::open(in);
  const TensorRef& first = *m.find("token_embd.weight");
  EXPECT_EQ(error_of([&] {
              RequantOptions o;
              o.type = GgmlType::Q4_K;
              o.exact = true;
              (void)requant(m, o);
            }),
            fmt::format("{}: tensor 'token_embd.weight': at byte {}: no exact path from q4_0 to "
                        "q4_K: --exact moves values to f32, to f16 or bf16 when every value is one "
                        "of theirs, and q4_0 to q4_1, q5_0 to q5_1 (--layers, --role and --match "
                        "choose the tensors to move; the others are copied)",
                        in,  // the type field: after name, n_dims and two dimensions
                        first.info->info_offset + 8 + first.name().size() + 4 + 8 * 2));
  // q4_0 values have up to 15 significant bits; f16 keeps 11: the encoder names the input's
  // element (so --no-verify cannot let it through either) and the output never appears.
  const auto va = decode(first);
  const float rounded = fp16_to_fp32(fp32_to_fp16(va[0]));
  const std::string want = fmt::format(
      "{}: tensor 'token_embd.weight': at byte {}: element 0 (row 0) is {} (bits "
      "0x{:08x}), which f16 cannot hold (it would read back as {} (bits 0x{:08x}))",
      in, first.data_start(), va[0], std::bit_cast<uint32_t>(va[0]), rounded,
      std::bit_cast<uint32_t>(rounded));
  EXPECT_EQ(error_of([&] { move_exactly(dir, in, GgmlType::F16, "f16.gguf"); }), want);
  const auto cli = run_cli("gguf-requant", {in, "-o", dir.file("f16.gguf"), "--type", "f16",
                                            "--exact", "--no-verify", "--role", "embedding"});
  EXPECT_EQ(cli.code, 1);
  EXPECT_EQ(cli.err, "gguf-requant: error: " + want + "\n");
  EXPECT_FALSE(std::filesystem::exists(dir.file("f16.gguf")));
  EXPECT_EQ(error_of([&] {
              RequantOptions o;
              o.type = GgmlType::Q4_1;
              o.exact = true;
              const Imatrix* none = reinterpret_cast<const Imatrix*>(&o);  // any non-null
              o.imatrix = none;
              (void)requant(m, o);
            }),
            "--imatrix has no use with --exact: exact paths quantize nothing");
}

// A q4_0 block whose scale is so large that -8d overflows f16 cannot be a q4_1 block: the
// error names the input, the tensor, the block and its row, at the block's byte.
TEST(exact, refuses_a_block_whose_min_overflows) {
  TempDir dir;
  std::vector<uint8_t> bytes(4 * 18, 0x11);
  for (int b = 0; b < 4; ++b) {
    const uint16_t d = fp32_to_fp16(b == 2 ? 9000.0f : 0.5f);
    std::memcpy(bytes.data() + 18 * b, &d, 2);
  }
  Plan plan;
  PlanTensor t;
  t.name = "token_embd.weight";
  t.type_id = traits(GgmlType::Q4_0).id;
  t.shape = {64, 2};
  t.bytes = bytes.size();
  t.source = MemoryBytes{std::make_shared<const std::vector<uint8_t>>(bytes)};
  plan.tensors.push_back(t);
  const std::string in = write_plan(plan, dir.file("big.gguf"), {}).paths.front();
  const Model m = Model::open(in);
  const std::string msg = error_of([&] { move_exactly(dir, in, GgmlType::Q4_1, "o.gguf"); });
  EXPECT_EQ(
      msg,
      fmt::format(
          "{}: tensor 'token_embd.weight': at byte {}: block 2 (row 1): its scale 9000 makes a "
          "min of -8 times it, which is not a finite f16: q4_1 cannot hold this "
          "block exactly",
          in, m.find("token_embd.weight")->data_start() + 2 * 18));
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.gguf")));
}

// The proof compares with the source it is given: another model's values are refused with the
// first differing element, before the output reaches its path.
TEST(exact, proof_names_the_first_difference) {
  TempDir dir;
  const std::string in = write_model(dir, GgmlType::Q4_0, "a.gguf", 1);
  const std::string other = write_model(dir, GgmlType::Q4_0, "b.gguf", 2);
  const Model a = Model::open(in), b = Model::open(other);
  RequantOptions o;
  o.type = GgmlType::Q4_1;
  o.exact = true;
  o.selector.roles = {Role::kEmbedding};
  const RequantResult r2 = requant(a, o);
  const std::string out = dir.file("o.gguf");
  WriteOptions wo;
  wo.before_commit = [&](const Model& w) { prove_exact(b, r2, w, 1, std::vector{out}); };
  const std::string msg = error_of([&] { write_plan(r2.plan, out, wo); });
  EXPECT_NE(msg.find(out + ": tensor 'token_embd.weight': at byte "), std::string::npos) << msg;
  EXPECT_NE(msg.find(": reading back: element 0 is "), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(exact, binary_reports_the_proof) {
  TempDir dir;
  const std::string in = write_model(dir, GgmlType::Q4_0, "in.gguf");
  const std::vector<std::string> roles = {"--role",
                                          "routed,shared,attn-proj,dense-ffn,embedding,output"};
  const auto args = [&](std::vector<std::string> a) {
    a.insert(a.end(), roles.begin(), roles.end());
    return a;
  };
  auto r =
      run_cli("gguf-requant", args({in, "-o", dir.file("o.gguf"), "--type", "q4_1", "--exact"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\nexact: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" re-encoded tensors read back: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" zeros lost their sign: q4_1 and q5_1 cannot make -0.0)\n"),
            std::string::npos)
      << r.out;
  r = run_cli("gguf-requant",
              args({in, "-o", dir.file("j.gguf"), "--type", "q4_1", "--exact", "--json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["exact"]["values"].get<uint64_t>(), 0u);
  EXPECT_GT(j["exact"]["zeros_sign_changed"].get<uint64_t>(), 0u);
  for (const auto& t : j["tensors"]) EXPECT_EQ(t["lossy"], false) << t["name"];
  r = run_cli("gguf-requant",
              args({in, "-o", dir.file("n.gguf"), "--type", "q4_1", "--exact", "--no-verify"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\nexact: not proven (--no-verify): the output was not read back\n"),
            std::string::npos)
      << r.out;
  // Without --exact nothing is claimed.
  r = run_cli("gguf-requant", args({in, "-o", dir.file("p.gguf"), "--type", "q4_1", "--json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out)["exact"].is_null());
  r = run_cli("gguf-requant", args({in, "-o", dir.file("q.gguf"), "--type", "q4_K", "--exact"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_FALSE(std::filesystem::exists(dir.file("q.gguf")));
}

}  // namespace
}  // namespace gguf
