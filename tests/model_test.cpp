// Split sets opened as one model: shard discovery, split.* key checks across shards, and the
// errors that name the offending shard.
#include "gguf/format/model.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_run.h"
#include "gguf/base/escape.h"
#include "gguf_builder.h"

namespace gguf {
namespace {

using testing::GgufBuilder;

// Shard `no` (0-based) of a set of `count`, holding f32 [4] tensors with the given names.
GgufBuilder shard(int no, int count, int32_t total, const std::vector<std::string>& names) {
  GgufBuilder b;
  if (no == 0) b.string("general.architecture", "llama");
  b.u16("split.no", static_cast<uint16_t>(no))
      .u16("split.count", static_cast<uint16_t>(count))
      .i32("split.tensors.count", total);
  for (const auto& n : names) b.tensor(n, 0, {4});
  return b;
}

// Where the value of key #index of a builder's file is (after its key, and its value type).
uint64_t value_at(const GgufBuilder& b, size_t index, std::string_view key) {
  return b.layout().kv_offsets[index] + 8 + key.size() + 4;
}

// A split set m-0000N-of-00003.gguf in a private directory.
struct SplitSet {
  std::string path(int index) const { return split_path(dir.file(stem), index, 3); }
  void write(int index, const GgufBuilder& b) const { b.write_file(path(index)); }
  // The sound set: a, b | c | d, e.
  void write_all() const {
    write(1, shard(0, 3, 5, {"a", "b"}));
    write(2, shard(1, 3, 5, {"c"}));
    write(3, shard(2, 3, 5, {"d", "e"}));
  }
  std::string error_of(const std::string& p) const {
    try {
      Model::open(p);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
  testing::TempDir dir;
  std::string stem = "m";
};

TEST(model, opens_by_first_shard) {
  SplitSet s;
  s.write_all();
  const Model m = Model::open(s.path(1));
  ASSERT_EQ(m.shards().size(), 3u);
  EXPECT_EQ(m.paths(), (std::vector<std::string>{s.path(1), s.path(2), s.path(3)}));
  EXPECT_EQ(m.path(), s.path(1));
  EXPECT_EQ(m.architecture(), "llama");
  ASSERT_EQ(m.tensors().size(), 5u);
  const std::vector<std::string> names = {"a", "b", "c", "d", "e"};
  const std::vector<size_t> shards = {0, 0, 1, 2, 2};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(m.tensors()[i].name(), names[i]);
    EXPECT_EQ(m.tensors()[i].shard, shards[i]);
  }
  const TensorRef* e = m.find("e");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->file->path(), s.path(3));
  // Shard 3's second tensor carries the builder's pattern for the second tensor of that file.
  const auto d = e->data();
  EXPECT_EQ(std::vector<uint8_t>(d.begin(), d.end()), testing::pattern_bytes(16, 2));
  EXPECT_EQ(m.find("zz"), nullptr);
  uint64_t sizes = 0;
  for (int i = 1; i <= 3; ++i) sizes += std::filesystem::file_size(s.path(i));
  EXPECT_EQ(m.total_bytes(), sizes);
}

TEST(model, opens_by_any_shard_name) {
  SplitSet s;
  s.write_all();
  const Model m = Model::open(s.path(2));
  EXPECT_EQ(m.path(), s.path(1));
  EXPECT_EQ(m.tensors().size(), 5u);
}

TEST(model, missing_shard_is_named) {
  SplitSet s;
  s.write_all();
  std::filesystem::remove(s.path(2));
  EXPECT_EQ(s.error_of(s.path(1)), s.path(2) + ": shard 2 of 3 of the split set is missing");
}

TEST(model, corrupt_shard_is_named) {
  SplitSet s;
  s.write_all();
  s.write(3, shard(2, 3, 5, {"d", "e"}).defect({testing::DefectKind::kBadMagic}));
  EXPECT_EQ(s.error_of(s.path(1)),
            s.path(3) + ": at byte 0: not a GGUF file (magic 'GGML', expected 'GGUF')");
}

TEST(model, split_count_mismatch) {
  SplitSet s;
  s.write_all();
  s.write(2, shard(1, 4, 5, {"c"}));
  EXPECT_EQ(s.error_of(s.path(1)),
            fmt::format("{}: key 'split.count': at byte {}: split.count is 4, expected 3",
                        s.path(2), value_at(shard(1, 4, 5, {"c"}), 1, "split.count")));
}

TEST(model, split_count_missing) {
  SplitSet s;
  s.write_all();
  GgufBuilder b;
  b.u16("split.no", 1).tensor("c", 0, {4});
  s.write(2, b);
  EXPECT_EQ(s.error_of(s.path(1)),
            s.path(2) + ": key 'split.count': split.count is missing, expected 3");
}

TEST(model, split_no_wrong) {
  SplitSet s;
  s.write_all();
  s.write(3, shard(1, 3, 5, {"d", "e"}));
  EXPECT_EQ(s.error_of(s.path(1)),
            fmt::format("{}: key 'split.no': at byte {}: split.no is 1, expected 2", s.path(3),
                        value_at(shard(1, 3, 5, {"d", "e"}), 0, "split.no")));
}

TEST(model, split_no_missing) {
  SplitSet s;
  s.write_all();
  GgufBuilder b;
  b.u16("split.count", 3).tensor("c", 0, {4});
  s.write(2, b);
  EXPECT_EQ(s.error_of(s.path(1)), s.path(2) + ": key 'split.no': split.no is missing, expected 1");
}

TEST(model, split_tensors_count_mismatch) {
  SplitSet s;
  s.write(1, shard(0, 3, 7, {"a", "b"}));
  s.write(2, shard(1, 3, 7, {"c"}));
  s.write(3, shard(2, 3, 7, {"d", "e"}));
  EXPECT_EQ(s.error_of(s.path(1)),
            fmt::format("{}: key 'split.tensors.count': at byte {}: split.tensors.count is 7, "
                        "but the shards hold 5 tensors",
                        s.path(1), value_at(shard(0, 3, 7, {"a", "b"}), 3, "split.tensors.count")));
}

// gguf-split writes one total into every shard: a shard that says otherwise is from another set.
TEST(model, split_tensors_count_differs_between_shards) {
  SplitSet s;
  s.write_all();
  s.write(2, shard(1, 3, 6, {"c"}));
  EXPECT_EQ(
      s.error_of(s.path(1)),
      fmt::format("{}: key 'split.tensors.count': at byte {}: split.tensors.count is 6, "
                  "but the first shard ('{}') says 5",
                  s.path(2), value_at(shard(1, 3, 6, {"c"}), 2, "split.tensors.count"), s.path(1)));
}

TEST(model, split_key_of_wrong_type) {
  SplitSet s;
  s.write_all();
  GgufBuilder b;
  b.u32("split.no", 1).u16("split.count", 3).i32("split.tensors.count", 5).tensor("c", 0, {4});
  s.write(2, b);
  EXPECT_EQ(s.error_of(s.path(1)), s.path(2) +
                                       ": key 'split.no': at byte 40: split.no must be a "
                                       "non-negative u16, found u32");
}

TEST(model, negative_split_tensors_count) {
  SplitSet s;
  s.write(1, shard(0, 3, -1, {"a", "b"}));
  s.write(2, shard(1, 3, 5, {"c"}));
  s.write(3, shard(2, 3, 5, {"d", "e"}));
  const uint64_t at = value_at(shard(0, 3, -1, {"a", "b"}), 3, "split.tensors.count");
  EXPECT_EQ(s.error_of(s.path(1)),
            fmt::format("{}: key 'split.tensors.count': at byte {}: split.tensors.count must be "
                        "a non-negative i32, found -1",
                        s.path(1), at));
}

TEST(model, duplicate_tensor_across_shards) {
  SplitSet s;
  s.write_all();
  const auto dup = shard(2, 3, 5, {"d", "a"});
  s.write(3, dup);
  EXPECT_EQ(s.error_of(s.path(1)),
            fmt::format("{}: tensor 'a': at byte {}: tensor also defined in shard 1 ('{}')",
                        s.path(3), dup.layout().tensor_info_offsets[1], s.path(1)));
}

TEST(model, duplicate_tensor_across_shards_names_the_other_shard_escaped) {
  SplitSet s;
  s.stem = "e\x1b[31mm";
  s.write_all();
  const auto dup = shard(2, 3, 5, {"d", "a"});
  s.write(3, dup);
  const std::string error = s.error_of(s.path(1));
  EXPECT_EQ(error.find('\x1b'), std::string::npos) << error;
  EXPECT_NE(error.find("tensor also defined in shard 1 ('" + escape_for_terminal(s.path(1)) + "')"),
            std::string::npos)
      << error;
}

TEST(model, single_file_of_a_set_is_refused_with_hint) {
  SplitSet s;
  const std::string p = s.dir.file("lonely.gguf");
  shard(0, 3, 5, {"a", "b"}).write_file(p);
  EXPECT_EQ(s.error_of(p),
            fmt::format("{}: key 'split.count': at byte {}: file is shard 1 of a split set of 3; "
                        "open the set by its first shard's name (<prefix>-00001-of-00003.gguf)",
                        p, value_at(shard(0, 3, 5, {"a", "b"}), 2, "split.count")));
  const std::string q = s.dir.file("middle.gguf");
  shard(1, 3, 5, {"c"}).write_file(q);
  EXPECT_EQ(s.error_of(q),
            fmt::format("{}: key 'split.count': at byte {}: file is shard 2 of a split set of 3; "
                        "open the set by its first shard's name (<prefix>-00001-of-00003.gguf)",
                        q, value_at(shard(1, 3, 5, {"c"}), 1, "split.count")));
}

TEST(model, set_of_one_opens_as_a_single_file) {
  SplitSet s;
  const std::string p = split_path(s.dir.file("one"), 1, 1);
  shard(0, 1, 1, {"a"}).write_file(p);
  const Model m = Model::open(p);
  EXPECT_EQ(m.shards().size(), 1u);
  EXPECT_EQ(m.tensors().size(), 1u);
}

// A whole model that only looks like a shard by its name (no split keys) opens as itself,
// as ggml would load it, whether or not other "shards" exist beside it.
TEST(model, file_named_like_a_shard_without_split_keys) {
  SplitSet s;
  const std::string p = split_path(s.dir.file("solo"), 1, 2);
  GgufBuilder b;
  b.string("general.architecture", "qwen3").tensor("t", 1, {8});
  b.write_file(p);
  const Model m = Model::open(p);
  EXPECT_EQ(m.paths(), std::vector<std::string>{p});
  EXPECT_EQ(m.tensors().size(), 1u);
}

// The keys decide over the name, as in llama.cpp: a file named as shard 1 of 3 whose
// split.count is 1 is the whole model, even with no other shard beside it.
TEST(model, file_named_like_a_shard_whose_keys_say_it_is_whole) {
  SplitSet s;
  const std::string p = split_path(s.dir.file("whole"), 1, 3);
  shard(0, 1, 2, {"a", "b"}).write_file(p);
  const Model m = Model::open(p);
  EXPECT_EQ(m.paths(), std::vector<std::string>{p});
  EXPECT_EQ(m.tensors().size(), 2u);
  // A count that disagrees with the name is still refused.
  const std::string q = split_path(s.dir.file("two"), 1, 3);
  shard(0, 2, 2, {"a"}).write_file(q);
  EXPECT_EQ(s.error_of(q),
            split_path(s.dir.file("two"), 2, 3) + ": shard 2 of 3 of the split set is missing");
}

TEST(model, plain_file_without_split_keys) {
  GgufBuilder b;
  b.string("general.architecture", "qwen3").tensor("t", 1, {8});
  const Model m = Model::from_files({GgufFile::parse(memory_source(b.build(), "x.gguf"))});
  EXPECT_EQ(m.architecture(), "qwen3");
  EXPECT_EQ(m.tensors().size(), 1u);
  EXPECT_EQ(m.tensors()[0].shard, 0u);
}

TEST(model, shards_from_memory_may_hold_different_types) {
  GgufBuilder a = shard(0, 2, 2, {});
  a.tensor("blk.0.ffn_up.weight", 2, {64});  // q4_0
  GgufBuilder b = shard(1, 2, 2, {});
  b.tensor("blk.1.ffn_up.weight", 12, {256});  // q4_K
  const Model m = Model::from_files({GgufFile::parse(memory_source(a.build(), "a.gguf")),
                                     GgufFile::parse(memory_source(b.build(), "b.gguf"))});
  ASSERT_EQ(m.tensors().size(), 2u);
  EXPECT_EQ(m.tensors()[0].info->type_id, 2u);
  EXPECT_EQ(m.tensors()[1].info->type_id, 12u);
  EXPECT_EQ(m.find("blk.1.ffn_up.weight")->data().size(), 144u);
}

TEST(model, from_files_needs_a_file) {
  try {
    Model::from_files({});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "a model needs at least one file");
  }
}

TEST(model, split_names) {
  const auto s = parse_split_name("dir/m-00002-of-00010.gguf");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->prefix, "dir/m");
  EXPECT_EQ(s->index, 2);
  EXPECT_EQ(s->count, 10);
  EXPECT_FALSE(parse_split_name("m-00000-of-00003.gguf"));
  EXPECT_FALSE(parse_split_name("m-00004-of-00003.gguf"));
  EXPECT_FALSE(parse_split_name("m-00001-of-00000.gguf"));
  EXPECT_FALSE(parse_split_name("m-1-of-3.gguf"));
  EXPECT_FALSE(parse_split_name("m.gguf"));
  EXPECT_EQ(split_path("p", 3, 12), "p-00003-of-00012.gguf");
}

}  // namespace
}  // namespace gguf
