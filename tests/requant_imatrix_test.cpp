// gguf-requant with importance matrices (legacy .dat and GGUF: expert slices, counts, what is
// refused and where) and the values an encoder refuses.
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
#include "gguf/ops/requant.h"
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

// Writes a legacy llama.cpp imatrix .dat with the given entries (values stored as sums).
void write_legacy_imatrix(const std::string& path,
                          const std::vector<std::pair<std::string, std::vector<float>>>& entries,
                          int32_t ncall) {
  std::ofstream f(path, std::ios::binary);
  const auto i32 = [&](int32_t v) { f.write(reinterpret_cast<const char*>(&v), 4); };
  i32(static_cast<int32_t>(entries.size()));
  for (const auto& [name, values] : entries) {
    i32(static_cast<int32_t>(name.size()));
    f.write(name.data(), static_cast<std::streamsize>(name.size()));
    i32(ncall);
    i32(static_cast<int32_t>(values.size()));
    for (float v : values) {
      const float sum = v * static_cast<float>(ncall);
      f.write(reinterpret_cast<const char*>(&sum), 4);
    }
  }
  i32(100);
  const std::string ds = "calibration.txt";
  i32(static_cast<int32_t>(ds.size()));
  f.write(ds.data(), static_cast<std::streamsize>(ds.size()));
}

std::vector<float> ramp(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i % 37) * 0.25f;
  return v;
}

TEST(requant, legacy_imatrix_weights_each_expert_with_its_slice) {
  TempDir dir;
  const Model in = Model::open(write_f16_model(dir));
  const std::string name = "blk.1.ffn_up_exps.weight";
  const TensorRef* t = in.find(name);
  ASSERT_NE(t, nullptr);
  const int64_t ne0 = t->info->shape[0], n_exp = t->info->shape[2];
  const auto values = ramp(static_cast<size_t>(ne0 * n_exp), 0.5f);
  write_legacy_imatrix(dir.file("imatrix.dat"), {{name, values}}, 4);
  const Imatrix im = Imatrix::load(dir.file("imatrix.dat"));
  EXPECT_EQ(im.datasets(), std::vector<std::string>{"calibration.txt"});
  EXPECT_EQ(im.chunk_count(), 100);
  RequantOptions o{GgmlType::Q4_K, parse_selector({}, {}, {name}), &im, 1};
  const auto r = requant(in, o);
  const auto w = write_plan(r.plan, dir.file("out.gguf"), {});
  const Model out = Model::open(w.paths.front());
  const auto expect = encode_reference(*t, GgmlType::Q4_K, [&](int64_t m) {
    return std::vector<float>(values.begin() + m * ne0, values.begin() + (m + 1) * ne0);
  });
  const auto got = out.find(name)->data();
  ASSERT_EQ(expect.size(), got.size());
  EXPECT_EQ(0, std::memcmp(expect.data(), got.data(), got.size()));
  // Without the matrix the bytes differ: the weights were really used.
  const auto plain = encode_reference(*t, GgmlType::Q4_K, {});
  EXPECT_NE(0, std::memcmp(plain.data(), got.data(), got.size()));
  EXPECT_EQ(out.metadata().get_string("quantize.imatrix.file"), dir.file("imatrix.dat"));
  EXPECT_EQ(out.metadata().get_string("quantize.imatrix.dataset"), "calibration.txt");
  // As llama-quantize writes them: its integer overrides are u32.
  const Value* entries = out.metadata().find("quantize.imatrix.entries_count");
  const Value* chunks = out.metadata().find("quantize.imatrix.chunks_count");
  ASSERT_NE(entries, nullptr);
  ASSERT_NE(chunks, nullptr);
  EXPECT_EQ(entries->type(), ValueType::kU32);
  EXPECT_EQ(entries->as_uint(), 1u);
  EXPECT_EQ(chunks->type(), ValueType::kU32);
  EXPECT_EQ(chunks->as_uint(), 100u);
}

// A legacy .dat without its trailer (older llama-imatrix), or with an empty dataset name, gives
// no chunk count and no dataset: llama-quantize then writes neither key, and neither do we.
TEST(requant, imatrix_without_chunks_or_dataset_records_neither) {
  TempDir dir;
  const Model in = Model::open(write_f16_model(dir));
  const std::string name = "blk.0.attn_q_a.weight";
  const TensorRef* t = in.find(name);
  ASSERT_NE(t, nullptr);
  write_legacy_imatrix(dir.file("im.dat"), {{name, ramp(t->info->shape[0], 0.5f)}}, 1);
  const auto full = std::filesystem::file_size(dir.file("im.dat"));
  const auto run = [&](const std::string& out) {
    const Imatrix im = Imatrix::load(dir.file("im.dat"));
    const auto r = requant(in, {GgmlType::Q4_K, parse_selector({}, {}, {name}), &im, 1});
    return Model::open(write_plan(r.plan, dir.file(out), {}).paths.front());
  };
  std::filesystem::resize_file(dir.file("im.dat"), full - 23);  // no trailer
  const Model plain = run("plain.gguf");
  EXPECT_EQ(plain.metadata().get_string("quantize.imatrix.file"), dir.file("im.dat"));
  EXPECT_EQ(plain.metadata().find("quantize.imatrix.chunks_count"), nullptr);
  EXPECT_EQ(plain.metadata().find("quantize.imatrix.dataset"), nullptr);
  ASSERT_NE(plain.metadata().find("quantize.imatrix.entries_count"), nullptr);
  {  // a trailer with chunk count 12 and a dataset name of length 0
    std::ofstream f(dir.file("im.dat"), std::ios::binary | std::ios::app);
    const int32_t trailer[2] = {12, 0};
    f.write(reinterpret_cast<const char*>(trailer), sizeof trailer);
  }
  const Model unnamed = run("unnamed.gguf");
  EXPECT_EQ(unnamed.metadata().find("quantize.imatrix.dataset"), nullptr);
  EXPECT_EQ(unnamed.metadata().get_uint("quantize.imatrix.chunks_count"), 12u);
}

// quantize.imatrix.* name the matrix an encoder used: a later step that uses none (q8_0 takes
// no weights, or no entry matches) leaves the earlier step's record and says so.
TEST(requant, imatrix_keys_record_only_a_matrix_that_was_used) {
  TempDir dir;
  const Model in = Model::open(write_f16_model(dir));
  const std::string name = "blk.1.ffn_up_exps.weight";
  const TensorRef* t = in.find(name);
  ASSERT_NE(t, nullptr);
  write_legacy_imatrix(dir.file("im.dat"), {{name, ramp(t->info->shape[0], 0.5f)}}, 4);
  const Imatrix im = Imatrix::load(dir.file("im.dat"));
  const auto r1 = requant(in, {GgmlType::Q4_K, parse_selector({}, {}, {name}), &im, 1});
  const Model step1 = Model::open(write_plan(r1.plan, dir.file("s1.gguf"), {}).paths.front());
  EXPECT_EQ(step1.metadata().get_string("quantize.imatrix.file"), dir.file("im.dat"));

  write_legacy_imatrix(dir.file("other.dat"), {{name, ramp(t->info->shape[0], 1.5f)}}, 4);
  const Imatrix other = Imatrix::load(dir.file("other.dat"));
  const std::string attn = "blk.0.attn_q_a.weight";
  ASSERT_NE(step1.find(attn), nullptr);
  const auto notes_of = [](const RequantResult& r) { return r.notes; };
  // q8_0 takes no weights.
  const auto r2 = requant(step1, {GgmlType::Q8_0, parse_selector({}, {}, {attn}), &other, 1});
  EXPECT_EQ(r2.plan.metadata.get_string("quantize.imatrix.file"), dir.file("im.dat"));
  EXPECT_EQ(notes_of(r2), std::vector<std::string>{
                              "the importance matrix was not used (q8_0 takes no importance "
                              "weights): the quantize.imatrix.* keys are left as they were"});
  // q4_K would take them, but the matrix has no entry for the tensor re-encoded.
  const auto r3 = requant(step1, {GgmlType::Q4_K, parse_selector({}, {}, {attn}), &other, 1});
  EXPECT_EQ(r3.plan.metadata.get_string("quantize.imatrix.file"), dir.file("im.dat"));
  EXPECT_EQ(notes_of(r3), std::vector<std::string>{
                              "the importance matrix was not used (it has no entry for any "
                              "re-encoded tensor): the quantize.imatrix.* keys are left as they "
                              "were"});
}

// The ds4 recipe's gate/up codec: iq2_xxs with each expert's slice of the matrix, and without
// a matrix the documented fallback (each expert matrix's column energy), said once.
TEST(requant, iq2_xxs_uses_expert_slices_or_the_column_energy) {
  TempDir dir;
  const Model in = Model::open(write_f16_model(dir));
  const std::string name = "blk.2.ffn_gate_exps.weight";
  const TensorRef* t = in.find(name);
  ASSERT_NE(t, nullptr);
  const int64_t ne0 = t->info->shape[0], ne1 = t->info->shape[1], n_exp = t->info->shape[2];
  const auto values = ramp(static_cast<size_t>(ne0 * n_exp), 0.25f);
  write_legacy_imatrix(dir.file("imatrix.dat"), {{name, values}}, 2);
  const Imatrix im = Imatrix::load(dir.file("imatrix.dat"));
  const auto sel = parse_selector({}, {}, {name});
  const auto with =
      write_plan(requant(in, {GgmlType::IQ2_XXS, sel, &im, 2}).plan, dir.file("with.gguf"), {});
  const auto expect = encode_reference(*t, GgmlType::IQ2_XXS, [&](int64_t m) {
    return std::vector<float>(values.begin() + m * ne0, values.begin() + (m + 1) * ne0);
  });
  const Model out = Model::open(with.paths.front());
  ASSERT_EQ(out.find(name)->info->type_id, static_cast<uint32_t>(GgmlType::IQ2_XXS));
  const auto got = out.find(name)->data();
  ASSERT_EQ(expect.size(), got.size());
  EXPECT_EQ(0, std::memcmp(expect.data(), got.data(), got.size()));

  const auto r = requant(in, {GgmlType::IQ2_XXS, sel, nullptr, 2});
  const auto without = write_plan(r.plan, dir.file("without.gguf"), {});
  const auto floats = decode_all(*t);
  const auto energy = encode_reference(*t, GgmlType::IQ2_XXS, [&](int64_t m) {
    return column_energy(std::span(floats).subspan(m * ne0 * ne1, ne0 * ne1), ne1, ne0);
  });
  const Model out2 = Model::open(without.paths.front());
  const auto got2 = out2.find(name)->data();
  ASSERT_EQ(energy.size(), got2.size());
  EXPECT_EQ(0, std::memcmp(energy.data(), got2.data(), got2.size()));
  EXPECT_NE(0, std::memcmp(expect.data(), got2.data(), got2.size()));
}

// The fallback's column energy is one float sum per column in row order over the whole matrix,
// although the matrix is read 256 rows at a time: on 300 rows, adding the sums of the two
// pieces rounds differently, and iq1_s (the codec most sensitive to its weights) shows it.
TEST(requant, column_energy_sums_a_matrix_of_many_rows_in_row_order) {
  TempDir dir;
  constexpr int64_t kCols = 512, kRows = 300;
  std::vector<float> values(kCols * kRows);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t r = 0; r < kRows; ++r) {  // rows of scales far apart, so rounding shows
    const float scale = std::array{1e-3f, 1.0f, 100.0f, 3e4f}[rng() % 4];
    for (int64_t c = 0; c < kCols; ++c)
      values[r * kCols + c] = rng() % 10 ? scale * normal(rng) : 0;
  }
  Plan p;
  p.metadata.set("general.architecture", Value::string("llama"));
  auto data = std::make_shared<std::vector<uint8_t>>(values.size() * 4);
  std::memcpy(data->data(), values.data(), data->size());
  p.tensors.push_back({"blk.0.attn_q.weight", 0, {kCols, kRows}, data->size(), MemoryBytes{data}});
  const Model in = Model::open(write_plan(p, dir.file("in.gguf"), {}).paths.front());
  const auto r = requant(in, {GgmlType::IQ1_S, {}, nullptr, 2});
  const Model out = Model::open(write_plan(r.plan, dir.file("out.gguf"), {}).paths.front());
  const auto got = out.find("blk.0.attn_q.weight")->data();
  const TensorRef& t = *in.find("blk.0.attn_q.weight");
  const auto whole = encode_reference(t, GgmlType::IQ1_S,
                                      [&](int64_t) { return column_energy(values, kRows, kCols); });
  ASSERT_EQ(whole.size(), got.size());
  EXPECT_EQ(0, std::memcmp(whole.data(), got.data(), got.size()));
  // The test means something: summed in two pieces, the weights give other bytes.
  const auto pieces = encode_reference(t, GgmlType::IQ1_S, [&](int64_t) {
    auto w = column_energy(std::span(values).first(256 * kCols), 256, kCols);
    const auto rest = column_energy(std::span(values).subspan(256 * kCols), kRows - 256, kCols);
    for (int64_t c = 0; c < kCols; ++c) w[c] += rest[c];
    return w;
  });
  EXPECT_NE(0, std::memcmp(whole.data(), pieces.data(), got.size()));
}

// An entry of zero columns (found by imatrix_fuzz: an empty payload was copied through a null
// pointer) loads, and asking it for weights is the usual length error.
TEST(requant, gguf_imatrix_with_an_empty_entry) {
  TempDir dir;
  Plan p;
  p.metadata.set("general.type", Value::string("imatrix"));
  const auto one = std::make_shared<std::vector<uint8_t>>(4, 0);
  p.tensors.push_back(
      {"w.in_sum2", 0, {0, 1}, 0, MemoryBytes{std::make_shared<std::vector<uint8_t>>()}});
  p.tensors.push_back({"w.counts", 0, {1, 1}, 4, MemoryBytes{one}});
  write_plan(p, dir.file("im.gguf"), {});
  const Imatrix im = Imatrix::load(dir.file("im.gguf"));
  ASSERT_NE(im.find("w"), nullptr);
  EXPECT_EQ(im.find("w")->values.size(), 0u);
  EXPECT_THROW(im.weights("w", 32, 1, 0), Error);
  // A shape whose values are not all there ([4, 2, 0]: no bytes for 4 x 2) is refused; the
  // division by counts used to write through the empty entry.
  Plan bad;
  bad.metadata.set("general.type", Value::string("imatrix"));
  bad.tensors.push_back(
      {"w.in_sum2", 0, {4, 2, 0}, 0, MemoryBytes{std::make_shared<std::vector<uint8_t>>()}});
  bad.tensors.push_back(
      {"w.counts", 0, {1, 2}, 8, MemoryBytes{std::make_shared<std::vector<uint8_t>>(8, 0)}});
  write_plan(bad, dir.file("bad.gguf"), {});
  // Named at its shape: n_dims, after the name's length and its 9 bytes.
  const auto info =
      GgufFile::open(dir.file("bad.gguf"))->find_tensor("w.in_sum2")->info_offset + 8 + 9;
  try {
    Imatrix::load(dir.file("bad.gguf"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("{}: tensor 'w.in_sum2': at byte {}: shape [4, 2, 0] holds 0 values, "
                          "not 4 columns x 2 matrices",
                          dir.file("bad.gguf"), info));
  }
}

TEST(requant, gguf_imatrix_divides_by_counts_and_unused_experts_weigh_one) {
  TempDir dir;
  const int64_t ne0 = 256, n_mat = 3;
  std::vector<float> sums(ne0 * n_mat), counts = {2.0f, 0.0f, 4.0f};
  for (int64_t i = 0; i < ne0 * n_mat; ++i) sums[i] = static_cast<float>(i % 11) + 1.0f;
  Plan p;
  p.metadata.set("general.type", Value::string("imatrix"));
  p.metadata.set("imatrix.datasets", Value::string_array({"wiki.txt"}));
  p.metadata.set("imatrix.chunk_count", Value::u32(7));
  const auto bytes = [](const std::vector<float>& v) {
    auto b = std::make_shared<std::vector<uint8_t>>(v.size() * 4);
    std::memcpy(b->data(), v.data(), b->size());
    return b;
  };
  p.tensors.push_back({"blk.0.ffn_up_exps.weight.in_sum2",
                       0,
                       {ne0, n_mat},
                       sums.size() * 4,
                       MemoryBytes{bytes(sums)}});
  p.tensors.push_back(
      {"blk.0.ffn_up_exps.weight.counts", 0, {1, n_mat}, 12, MemoryBytes{bytes(counts)}});
  write_plan(p, dir.file("im.gguf"), {});
  const Imatrix im = Imatrix::load(dir.file("im.gguf"));
  EXPECT_EQ(im.datasets(), std::vector<std::string>{"wiki.txt"});
  const auto w0 = im.weights("blk.0.ffn_up_exps.weight", ne0, n_mat, 0);
  const auto w1 = im.weights("blk.0.ffn_up_exps.weight", ne0, n_mat, 1);
  const auto w2 = im.weights("blk.0.ffn_up_exps.weight", ne0, n_mat, 2);
  EXPECT_EQ(w0[5], sums[5] / 2.0f);
  EXPECT_EQ(w1[5], 1.0f);
  EXPECT_EQ(w2[5], sums[2 * ne0 + 5] / 4.0f);
  // A misfit is named at the in_sum2 tensor's shape (n_dims, after its name's length and bytes).
  const std::string sums_name = "blk.0.ffn_up_exps.weight.in_sum2";
  const uint64_t shape_at =
      GgufFile::open(dir.file("im.gguf"))->find_tensor(sums_name)->info_offset + 8 +
      sums_name.size();
  try {
    im.weights("blk.0.ffn_up_exps.weight", 512, 3, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("{}: tensor 'blk.0.ffn_up_exps.weight': at byte {}: importance entry "
                          "has 768 values; expected 512 (columns) or 1536 (3 experts x 512 "
                          "columns)",
                          dir.file("im.gguf"), shape_at));
  }
  try {  // a 2-D tensor has no experts to speak of
    im.weights("blk.0.ffn_up_exps.weight", 512, 1, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("{}: tensor 'blk.0.ffn_up_exps.weight': at byte {}: importance entry "
                          "has 768 values; expected 512 (one per column)",
                          dir.file("im.gguf"), shape_at));
  }
}

// A count below 1 can take a finite sum past FLT_MAX; the infinite mean would make the i-quant
// searches write all-zero blocks with exit 0, so the file is refused at the value.
TEST(requant, gguf_imatrix_mean_that_overflows_is_refused) {
  TempDir dir;
  const int64_t ne0 = 256, n_mat = 2;
  std::vector<float> sums(ne0 * n_mat, 1.0f), counts = {1.0f, 0.5f};
  sums[ne0 + 5] = 3e38f;
  Plan p;
  p.metadata.set("general.type", Value::string("imatrix"));
  const auto bytes = [](const std::vector<float>& v) {
    auto b = std::make_shared<std::vector<uint8_t>>(v.size() * 4);
    std::memcpy(b->data(), v.data(), b->size());
    return b;
  };
  const std::string sums_name = "blk.0.ffn_up_exps.weight.in_sum2";
  p.tensors.push_back({sums_name, 0, {ne0, n_mat}, sums.size() * 4, MemoryBytes{bytes(sums)}});
  p.tensors.push_back(
      {"blk.0.ffn_up_exps.weight.counts", 0, {1, n_mat}, 8, MemoryBytes{bytes(counts)}});
  write_plan(p, dir.file("im.gguf"), {});
  const auto f = GgufFile::open(dir.file("im.gguf"));
  const uint64_t at = f->data_start(*f->find_tensor(sums_name)) + 4 * (ne0 + 5);
  try {
    Imatrix::load(dir.file("im.gguf"));
    FAIL() << "an infinite mean was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("{}: tensor '{}': at byte {}: value [261] (3e+38) over its count [1] "
                          "(0.5) overflows to inf; importance values must be finite",
                          dir.file("im.gguf"), sums_name, at));
  }
  // The same sum over a count of 1 is a finite mean.
  counts[1] = 1.0f;
  p.tensors[1].source = MemoryBytes{bytes(counts)};
  WriteOptions overwrite;
  overwrite.force = true;
  write_plan(p, dir.file("im.gguf"), overwrite);
  EXPECT_EQ(
      Imatrix::load(dir.file("im.gguf")).weights("blk.0.ffn_up_exps.weight", ne0, n_mat, 1)[5],
      3e38f);
}

// A GGUF entry's shape says how it is cut; a cut made for another tensor is refused even when
// its total fits, and a legacy file converted by llama-imatrix (one matrix of all the experts'
// columns, one count) is taken.
TEST(requant, gguf_imatrix_cut_for_another_tensor_is_refused) {
  TempDir dir;
  Plan p;
  p.metadata.set("general.type", Value::string("imatrix"));
  const auto floats = [](size_t n, float v) {
    auto b = std::make_shared<std::vector<uint8_t>>(n * 4);
    for (size_t i = 0; i < n; ++i) std::memcpy(b->data() + 4 * i, &v, 4);
    return MemoryBytes{b};
  };
  p.tensors.push_back({"two.in_sum2", 0, {512, 2}, 4096, floats(1024, 2.0f)});
  p.tensors.push_back({"two.counts", 0, {1, 2}, 8, floats(2, 1.0f)});
  p.tensors.push_back({"four.in_sum2", 0, {256, 4}, 4096, floats(1024, 2.0f)});
  p.tensors.push_back({"four.counts", 0, {1, 4}, 16, floats(4, 1.0f)});
  p.tensors.push_back({"flat.in_sum2", 0, {1024, 1}, 4096, floats(1024, 2.0f)});
  p.tensors.push_back({"flat.counts", 0, {1, 1}, 4, floats(1, 2.0f)});
  write_plan(p, dir.file("im.gguf"), {});
  const Imatrix im = Imatrix::load(dir.file("im.gguf"));
  const auto shape_at = [&](const std::string& name) {
    return GgufFile::open(dir.file("im.gguf"))->find_tensor(name)->dims_offset();
  };
  const auto error_of = [&](const std::string& name, int64_t n_per_row, int64_t n_mat) {
    try {
      im.weights(name, n_per_row, n_mat, 0);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // 2 x 512 for 4 experts of 256 columns, and for a 2-D tensor of 512 x 2 as one of 1024.
  EXPECT_EQ(error_of("two", 256, 4),
            fmt::format("{}: tensor 'two': at byte {}: importance entry holds 2 matrices of 512 "
                        "columns; expected 4 of 256 (one per expert), or 1 of 256 or 1024",
                        dir.file("im.gguf"), shape_at("two.in_sum2")));
  EXPECT_EQ(error_of("four", 1024, 1),
            fmt::format("{}: tensor 'four': at byte {}: importance entry holds 4 matrices of 256 "
                        "columns; expected 1 of 1024",
                        dir.file("im.gguf"), shape_at("four.in_sum2")));
  EXPECT_EQ(im.weights("four", 256, 4, 3).size(), 256u);
  EXPECT_EQ(im.weights("flat", 256, 4, 3).size(), 256u);
  EXPECT_EQ(im.weights("flat", 256, 4, 3)[0], 1.0f);  // 2 / its single count 2
  EXPECT_EQ(im.weights("flat", 1024, 1, 0).size(), 1024u);
}

// llama.cpp's imatrix writes imatrix.chunk_count as u32, and the output records it as u32:
// a larger count is refused at its value rather than cut to its low 32 bits.
TEST(requant, gguf_imatrix_chunk_count_beyond_u32_is_refused) {
  TempDir dir;
  Plan p;
  p.metadata.set("general.type", Value::string("imatrix"));
  p.metadata.set("imatrix.chunk_count", Value::u64((uint64_t{1} << 32) + 7));
  const auto zeros = [](size_t n) {
    return MemoryBytes{std::make_shared<std::vector<uint8_t>>(n * 4, 0)};
  };
  p.tensors.push_back({"a.in_sum2", 0, {32, 1}, 128, zeros(32)});
  p.tensors.push_back({"a.counts", 0, {1, 1}, 4, zeros(1)});
  write_plan(p, dir.file("im.gguf"), {});
  const auto f = GgufFile::open(dir.file("im.gguf"));
  uint64_t at = 0;
  for (const auto& kv : f->metadata().entries())
    if (kv.key == "imatrix.chunk_count") at = kv.value_offset();
  ASSERT_NE(at, 0u);
  try {
    Imatrix::load(dir.file("im.gguf"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("{}: key 'imatrix.chunk_count': at byte {}: imatrix.chunk_count is "
                          "4294967303, more than the u32 llama.cpp's imatrix writes can hold "
                          "(4294967295)",
                          dir.file("im.gguf"), at));
  }
}

// A model GGUF given as --imatrix (no general.type, no '.in_sum2' tensors) is refused rather
// than read as an importance matrix with no entries.
TEST(requant, model_file_is_not_an_imatrix) {
  TempDir dir;
  const std::string model = write_f16_model(dir);
  try {
    Imatrix::load(model);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              model +
                  ": no importance entries (tensors named '<tensor>.in_sum2' with "
                  "'<tensor>.counts'); not an imatrix file?");
  }
}

// The counts of a legacy entry: each refusal names the field it is about.
TEST(requant, legacy_imatrix_with_bad_counts_is_refused_at_the_field) {
  TempDir dir;
  // 4 + 4 (entry count, name length) + 19 (name): ncall at byte 27, nval at 31.
  const std::string path = dir.file("im.dat");
  const auto patch = [&](uint64_t at, int32_t v) {
    write_legacy_imatrix(path, {{"blk.0.attn_q.weight", ramp(256, 1.0f)}}, 1);
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(reinterpret_cast<const char*>(&v), 4);
  };
  const auto error_of = [&] {
    try {
      Imatrix::load(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  patch(27, -1);
  EXPECT_EQ(error_of(), path + ": tensor 'blk.0.attn_q.weight': at byte 27: ncall -1 is negative");
  patch(31, 0);
  EXPECT_EQ(error_of(),
            path + ": tensor 'blk.0.attn_q.weight': at byte 31: nval 0 is not positive");
  // A length that does not fit the weight is found when the weight asks for it, at its nval.
  write_legacy_imatrix(path, {{"blk.0.attn_q.weight", ramp(255, 1.0f)}}, 1);
  const Imatrix im = Imatrix::load(path);
  try {
    im.weights("blk.0.attn_q.weight", 256, 1, 0);
    ADD_FAILURE() << "a misfit was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              path +
                  ": tensor 'blk.0.attn_q.weight': at byte 31: importance entry has 255 "
                  "values; expected 256 (one per column)");
  }
}

// llama-quantize refuses a GGUF imatrix whose sums and counts do not pair up, either way.
TEST(requant, gguf_imatrix_counts_without_sums_are_refused) {
  TempDir dir;
  Plan p;
  p.metadata.set("general.type", Value::string("imatrix"));
  const auto floats = [](size_t n) {
    return MemoryBytes{std::make_shared<std::vector<uint8_t>>(n * 4, 0)};
  };
  p.tensors.push_back({"a.in_sum2", 0, {32, 1}, 128, floats(32)});
  p.tensors.push_back({"a.counts", 0, {1, 1}, 4, floats(1)});
  p.tensors.push_back({"b.counts", 0, {1, 1}, 4, floats(1)});
  write_plan(p, dir.file("im.gguf"), {});
  const auto info = GgufFile::open(dir.file("im.gguf"))->find_tensor("b.counts")->info_offset;
  try {
    Imatrix::load(dir.file("im.gguf"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("{}: tensor 'b.counts': at byte {}: no matching 'b.in_sum2' tensor",
                          dir.file("im.gguf"), info));
  }
}

TEST(requant, truncated_legacy_imatrix_is_refused) {
  TempDir dir;
  write_legacy_imatrix(dir.file("im.dat"), {{"blk.0.attn_q.weight", ramp(256, 1.0f)}}, 1);
  std::filesystem::resize_file(dir.file("im.dat"), 40);
  try {
    Imatrix::load(dir.file("im.dat"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              dir.file("im.dat") +
                  ": tensor 'blk.0.attn_q.weight': at byte 35: values of 1024 bytes runs past "
                  "end of file (5 left)");
  }
}

TEST(requant, legacy_imatrix_with_a_partial_trailer_is_refused) {
  TempDir dir;
  write_legacy_imatrix(dir.file("im.dat"), {{"blk.0.attn_q.weight", ramp(256, 1.0f)}}, 1);
  const uint64_t entries_end = std::filesystem::file_size(dir.file("im.dat")) - 23;
  std::filesystem::resize_file(dir.file("im.dat"), entries_end + 5);
  try {
    Imatrix::load(dir.file("im.dat"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("{}: at byte {}: 5 bytes after the last entry, too few for the trailer "
                          "(int32 last chunk, int32 dataset name length, the name): a truncated "
                          "file?",
                          dir.file("im.dat"), entries_end));
  }
  // Without a trailer at all (older llama.cpp) the file is fine.
  std::filesystem::resize_file(dir.file("im.dat"), entries_end);
  EXPECT_EQ(Imatrix::load(dir.file("im.dat")).size(), 1u);
}

// Finite values whose encoding gets a non-finite block scale (importance weights so large that
// the encoder's float sums overflow: ggml writes NaN scales, llama-quantize refuses the row)
// are refused, naming the row; nothing is written.
TEST(requant, a_non_finite_scale_from_finite_values_is_refused) {
  TempDir dir;
  const std::string in = write_f16_model(dir);
  const Model m = Model::open(in);
  const TensorRef* t = m.find("blk.0.attn_q_a.weight");
  ASSERT_NE(t, nullptr);
  const int64_t ne0 = t->info->shape[0];
  write_legacy_imatrix(dir.file("im.dat"),
                       {{"blk.0.attn_q_a.weight", std::vector<float>(ne0, 3.0e38f)}}, 1);
  const auto res = run_cli("gguf-requant", {in, "-o", dir.file("o.gguf"), "--type", "q4_K",
                                            "--imatrix", dir.file("im.dat")});
  EXPECT_EQ(res.code, 1);
  EXPECT_EQ(res.err, fmt::format("gguf-requant: error: {}: tensor 'blk.0.attn_q_a.weight': at "
                                 "byte {}: row 0: its values are finite, but q4_K gives block 0 a "
                                 "non-finite scale ('d': the values or their importance weights "
                                 "are too large for its scale arithmetic, and llama.cpp would "
                                 "compute NaN with it)\n",
                                 in, t->data_start()));
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.gguf")));
}

// f16 and bf16 hold less range than f32: a finite value beyond it would be written as +-inf
// (ggml's conversion; llama.cpp's quantizer refuses such a file). Refused naming the row and
// element; the largest values that fit, and infinities of the input itself, are encoded.
TEST(requant, finite_values_beyond_f16_or_bf16_are_refused) {
  TempDir dir;
  int files = 0;
  const auto model = [&](float big) {
    std::vector<float> v(64, 1.0f);
    v[32 + 5] = big;  // row 1, element 5
    auto b = std::make_shared<std::vector<uint8_t>>(v.size() * 4);
    std::memcpy(b->data(), v.data(), b->size());
    Plan p;
    p.metadata.set("general.architecture", Value::string("llama"));
    p.tensors.push_back({"blk.0.attn_q.weight", 0, {32, 2}, b->size(), MemoryBytes{b}});
    return write_plan(p, dir.file(fmt::format("in{}.gguf", files++)), {}).paths.front();
  };
  const auto run = [&](float big, const char* type) {
    const std::string in = model(big);
    return std::pair{
        in, run_cli("gguf-requant", {in, "-o", dir.file("o.gguf"), "--type", type, "--force"})};
  };
  for (const auto& [big, type, shown] :
       {std::tuple{70000.0f, "f16", "70000"}, std::tuple{-65520.0f, "f16", "-65520"},
        std::tuple{std::numeric_limits<float>::max(), "bf16", "3.4028235e+38"}}) {
    const auto [in, res] = run(big, type);
    EXPECT_EQ(res.code, 1) << type;
    const uint64_t row1 = Model::open(in).find("blk.0.attn_q.weight")->data_start() + 32 * 4;
    EXPECT_EQ(res.err, fmt::format("gguf-requant: error: {}: tensor 'blk.0.attn_q.weight': at "
                                   "byte {}: row 1: element 5 is {}, beyond what {} can hold: it "
                                   "would be written as {}inf, which llama.cpp's quantizer "
                                   "refuses\n",
                                   in, row1, shown, type, big < 0 ? "-" : ""));
    EXPECT_FALSE(std::filesystem::exists(dir.file("o.gguf")));
  }
  EXPECT_EQ(run(65504.0f, "f16").second.code, 0);  // f16's largest finite value
  EXPECT_EQ(run(std::numeric_limits<float>::infinity(), "f16").second.code, 0);
  EXPECT_EQ(run(3.0e38f, "bf16").second.code, 0);
}

// mxfp4's exponent byte is floor(log2(max |x|)) - 2 + 127: a block whose largest magnitude is
// in [2^-126, 2^-125) gets 0xff, E8M0's NaN (ggml writes it; llama-quantize's validation
// refuses the file). Refused as a non-finite scale; a block just above or below is fine.
TEST(requant, mxfp4_block_whose_exponent_would_be_nan_is_refused) {
  TempDir dir;
  const auto model = [&](float tiny, const std::string& name) {
    std::vector<float> v(64, 0.0f);
    for (int i = 0; i < 32; ++i) v[i] = 1.0f + static_cast<float>(i) / 8.0f;
    v[32] = tiny;  // row 1: one tiny value, the rest zero
    auto b = std::make_shared<std::vector<uint8_t>>(v.size() * 4);
    std::memcpy(b->data(), v.data(), b->size());
    Plan p;
    p.metadata.set("general.architecture", Value::string("llama"));
    p.tensors.push_back({"blk.0.attn_q.weight", 0, {32, 2}, b->size(), MemoryBytes{b}});
    return write_plan(p, dir.file(name), {}).paths.front();
  };
  const float min_normal = std::numeric_limits<float>::min();  // 2^-126
  const std::string bad = model(min_normal * 1.5f, "bad.gguf");
  const Model m = Model::open(bad);
  const uint64_t row1 = m.find("blk.0.attn_q.weight")->data_start() + 32 * 4;
  auto res = run_cli("gguf-requant", {bad, "-o", dir.file("o.gguf"), "--type", "mxfp4"});
  EXPECT_EQ(res.code, 1);
  EXPECT_EQ(res.err,
            fmt::format("gguf-requant: error: {}: tensor 'blk.0.attn_q.weight': at byte {}: row "
                        "1: its values are finite, but mxfp4 gives block 0 a non-finite scale "
                        "('e': E8M0 0xff, the format's NaN, which ggml's exponent rule gives a "
                        "block whose largest magnitude lies in [2^-126, 2^-125); llama.cpp's "
                        "quantizer refuses it)\n",
                        bad, row1));
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.gguf")));
  for (const float ok : {min_normal * 2.0f, min_normal / 2.0f}) {
    const std::string in = model(ok, fmt::format("ok-{}.gguf", ok == min_normal / 2.0f));
    res = run_cli("gguf-requant", {in, "-o", dir.file("o.gguf"), "--type", "mxfp4", "--force"});
    EXPECT_EQ(res.code, 0) << ok << res.err;
  }
}

// Importance values are sums of squares: a negative, NaN or infinite one is refused, naming
// the entry, the index and the byte where it is stored.
TEST(requant, legacy_imatrix_with_a_negative_or_nan_value_is_refused) {
  TempDir dir;
  const std::string name = "blk.0.attn_q.weight";
  // 4 + 4 (entry count, name length) + 19 (name) + 4 + 4 (ncall, nval): values at byte 35.
  const std::vector<std::pair<float, std::string>> bad = {
      {-2.0f, "-2"},
      {std::numeric_limits<float>::quiet_NaN(), "nan"},
      {std::numeric_limits<float>::infinity(), "inf"}};
  for (const auto& [v, text] : bad) {
    auto values = ramp(256, 1.0f);
    values[5] = v;
    write_legacy_imatrix(dir.file("im.dat"), {{name, values}}, 1);
    try {
      Imatrix::load(dir.file("im.dat"));
      ADD_FAILURE() << text;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                dir.file("im.dat") + ": tensor 'blk.0.attn_q.weight': at byte 55: value [5] is " +
                    text + "; importance values must be finite and not negative");
    }
  }
  // With several calls the stored value is a sum (the helper stores mean x ncall: -18); the
  // message shows the value as stored and says so.
  auto values = ramp(256, 1.0f);
  values[7] = -6.0f;
  write_legacy_imatrix(dir.file("im.dat"), {{name, values}}, 3);
  try {
    Imatrix::load(dir.file("im.dat"));
    ADD_FAILURE() << "a negative sum was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              dir.file("im.dat") +
                  ": tensor 'blk.0.attn_q.weight': at byte 63: value [7] (a sum over 3 calls) is "
                  "-18; importance values must be finite and not negative");
  }
}

}  // namespace
}  // namespace gguf
