// Extent sharing on a copy-on-write file system (a loop-mounted XFS with reflink=1 made by each
// test): the FIEMAP proof of io/reflink, and the writer sharing every payload block of a splice
// between two 4096-aligned files, proving it, and falling back to copying and reading back
// where the file system does not share (ext4) or the proof fails.
#include "io/reflink.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "ggml_ref.h"
#include "gguf/base/units.h"
#include "gguf/format/model.h"
#include "gguf/ops/splice.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"
#include "writer_test_util.h"
#include "xfs_mount.h"

namespace gguf {
namespace {

using detail::range_is_shared;
using detail::why_not_same_extents;
using testing::pattern_bytes;
using testing::TempDir;
using testing::XfsMount;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// An open descriptor, closed by the destructor.
struct Fd {
  int fd = -1;
  Fd(const std::string& path, int flags) : fd(::open(path.c_str(), flags | O_CLOEXEC, 0644)) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  operator int() const { return fd; }
};

void write_all(int fd, const std::vector<uint8_t>& bytes, uint64_t at) {
  ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(at)),
            static_cast<ssize_t>(bytes.size()));
  ASSERT_EQ(::fsync(fd), 0);
}

// copy_file_range of n bytes from src at s to dst at d, in full.
void copy(int src, uint64_t s, int dst, uint64_t d, uint64_t n) {
  loff_t in = static_cast<loff_t>(s), out = static_cast<loff_t>(d);
  while (n > 0) {
    const ssize_t k = ::copy_file_range(src, &in, dst, &out, n, 0);
    ASSERT_GT(k, 0) << std::strerror(errno);
    n -= static_cast<uint64_t>(k);
  }
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Extents split at different places in the two files (as the kernel's 1 GiB copy steps and
// its extent size limit make them) still prove byte by byte; a shift or a flag does not.
TEST(reflink, proof_follows_extents_split_differently_in_the_two_files) {
  using detail::Extent;
  constexpr uint32_t kShared = 0x2000, kDelalloc = 0x4;
  // Input bytes [0, 3000) on device [10000, 13000) and [50000, 51000); the output has them from
  // byte 100, cut at other places.
  const std::vector<Extent> in = {{0, 10000, 3000, kShared}, {3000, 50000, 1000, kShared}};
  const std::vector<Extent> out = {{0, 7, 100, 0},
                                   {100, 10000, 1000, kShared},
                                   {1100, 11000, 2500, kShared | 1},  // runs past the split
                                   {3600, 50500, 500, kShared}};
  EXPECT_FALSE(why_not_same_extents(in, 0, out, 100, 3000).has_value());
  EXPECT_EQ(why_not_same_extents(in, 0, out, 100, 4000),
            "byte 3000 of the range is at device byte 50000 in the input, 13000 in the output");
  EXPECT_FALSE(why_not_same_extents(in, 2500, out, 2600, 500).has_value());
  EXPECT_EQ(why_not_same_extents(in, 0, out, 0, 10),
            "byte 0 of the range is in an extent of the output flagged none");
  EXPECT_EQ(why_not_same_extents(in, 3500, out, 3600, 1000),
            "byte 500 of the range is in a hole of the input");
  std::vector<Extent> delayed = out;
  delayed[1].flags |= kDelalloc;
  EXPECT_EQ(why_not_same_extents(in, 0, delayed, 100, 10),
            "byte 0 of the range is in an extent of the output flagged delalloc,shared");
}

TEST(reflink, proof_of_ranges_the_kernel_shared) {
  XfsMount xfs;
  GGUF_REQUIRE_XFS(xfs);
  Fd x(xfs.file("x"), O_RDWR | O_CREAT), y(xfs.file("y"), O_RDWR | O_CREAT);
  Fd src(xfs.file("src"), O_RDWR | O_CREAT), dst(xfs.file("dst"), O_RDWR | O_CREAT);
  // src: two extents on unrelated blocks (y's come first on the device); dst: the same bytes
  // one block further on, shared in two calls cut elsewhere (1.5 MiB), after a block of its own.
  write_all(y, pattern_bytes(kMiB, 2), 0);
  write_all(x, pattern_bytes(kMiB, 1), 0);
  copy(x, 0, src, 0, kMiB);
  copy(y, 0, src, kMiB, kMiB);
  write_all(dst, pattern_bytes(4096, 3), 0);
  copy(src, 0, dst, 4096, 3 * kMiB / 2);
  copy(src, 3 * kMiB / 2, dst, 4096 + 3 * kMiB / 2, kMiB / 2);
  ASSERT_EQ(::fsync(dst), 0);
  const auto extents = detail::file_extents(src, 0, 2 * kMiB);
  ASSERT_TRUE(extents);
  EXPECT_EQ(extents->size(), 2u);
  EXPECT_TRUE(range_is_shared(dst, 4096, 2 * kMiB));
  EXPECT_FALSE(range_is_shared(dst, 0, 4096));
  EXPECT_EQ(why_not_same_extents(src, 0, dst, 4096, 2 * kMiB), std::nullopt);
  // A range ending inside a block, and one starting inside one.
  EXPECT_EQ(why_not_same_extents(src, 0, dst, 4096, 2 * kMiB - 100), std::nullopt);
  EXPECT_EQ(why_not_same_extents(src, 100, dst, 4196, kMiB), std::nullopt);
  // Shifted by a block: the same extents, but not the same bytes.
  EXPECT_EQ(why_not_same_extents(src, 4096, dst, 4096, 4096),
            fmt::format("byte 0 of the range is at device byte {} in the input, {} in the output",
                        (*extents)[0].physical + 4096, (*extents)[0].physical));
  // A block rewritten in the output is copied on write: the proof now fails there.
  write_all(dst, pattern_bytes(4096, 1), 4096 + 8192);
  const auto why = why_not_same_extents(src, 0, dst, 4096, 2 * kMiB);
  ASSERT_TRUE(why);
  EXPECT_TRUE(why->starts_with("byte 8192 of the range ")) << *why;
}

TEST(reflink, proof_refuses_holes_unwritten_extents_and_other_file_systems) {
  XfsMount xfs;
  GGUF_REQUIRE_XFS(xfs);
  Fd a(xfs.file("a"), O_RDWR | O_CREAT);
  ASSERT_EQ(::ftruncate(a, 4 * 4096), 0);
  EXPECT_EQ(why_not_same_extents(a, 0, a, 0, 4096),
            "byte 0 of the range is in a hole of the input");
  ASSERT_EQ(::fallocate(a, 0, 0, 4096), 0);  // allocated, reads as zeros
  EXPECT_EQ(why_not_same_extents(a, 0, a, 0, 4096),
            "byte 0 of the range is in an extent of the input flagged unwritten");
  // Written but not shared (the same file on both sides: a copy's blocks are its own).
  write_all(a, pattern_bytes(4096, 1), 4096);
  EXPECT_EQ(why_not_same_extents(a, 4096, a, 4096, 4096),
            "byte 0 of the range is in an extent of the input flagged none");
  // ext4 copies in the kernel: nothing is shared, whatever the alignment.
  TempDir dir;
  Fd e(dir.file("e"), O_RDWR | O_CREAT), f(dir.file("f"), O_RDWR | O_CREAT);
  write_all(e, pattern_bytes(kMiB, 1), 0);
  copy(e, 0, f, 0, kMiB);
  ASSERT_EQ(::fsync(f), 0);
  EXPECT_FALSE(range_is_shared(f, 0, kMiB));
  EXPECT_TRUE(why_not_same_extents(e, 0, f, 0, kMiB));
}

// A scaled-down DeepSeek-style MoE (layer 0 dense, 1-6 with 3-D routed experts) at alignment
// 4096: routed experts f16 in the base, q8_0 in the donor, the rest q8_0 and f32 norms, so
// payloads end inside blocks as well as on them.
Plan moe_plan(GgmlType routed, uint64_t seed) {
  MoeSpec s;
  s.n_layers = 7;
  s.n_dense_layers = 1;
  s.n_experts = 6;
  s.n_embd = 512;
  s.n_ff_exp = 512;
  s.n_ff_dense = 512;
  s.vocab = 600;
  s.alignment = 4096;
  s.seed = seed;
  s.threads = 2;
  s = uniform_types(s, GgmlType::Q8_0);
  s.routed_gate_up = s.routed_down = routed;
  return synth_moe_plan(s);
}

struct SpliceOnXfs {
  std::string base, donor;
  explicit SpliceOnXfs(const XfsMount& xfs)
      : base(xfs.file("base.gguf")), donor(xfs.file("donor.gguf")) {
    write_plan(moe_plan(GgmlType::F16, 1), base, {});
    write_plan(moe_plan(GgmlType::Q8_0, 2), donor, {});
  }
};

uint64_t payload_bytes(const Plan& p) {
  uint64_t n = 0;
  for (const auto& t : p.tensors) n += t.bytes;
  return n;
}

TEST(reflink, routed_expert_splice_of_4096_aligned_files_shares_its_payloads) {
  XfsMount xfs;
  GGUF_REQUIRE_XFS(xfs);
  const SpliceOnXfs in(xfs);
  const Model base = Model::open(in.base), donor = Model::open(in.donor);
  Selector sel = with_default_role(parse_selector({"1-6"}, {}, {}));
  const Donor donors[] = {{&donor, sel}};
  const SpliceResult r = splice(base, donors, {});
  ASSERT_EQ(r.spliced, 18u);
  WriteOptions o;
  o.inputs = r.inputs;
  const uint64_t free_before = xfs.free_bytes();
  const WriteResult w = write_plan(r.plan, xfs.file("out.gguf"), o);
  const uint64_t used = free_before - xfs.free_bytes();
  const uint64_t payload = payload_bytes(r.plan);
  EXPECT_TRUE(w.verified);
  EXPECT_GE(w.bytes_shared, payload * 99 / 100);
  EXPECT_EQ(w.bytes_shared + w.bytes_copied + w.bytes_written, w.bytes);
  EXPECT_LT(used, w.bytes / 100) << "of " << w.bytes << " bytes, " << used << " took new blocks";
  for (const auto& t : w.tensors) EXPECT_FALSE(t.xxh3) << t.name;  // proven, never hashed

  // The same splice written to the ordinary file system: copied (here from another file
  // system, so read and written), read back, and the same bytes.
  TempDir dir;
  const WriteResult c = write_plan(r.plan, dir.file("out.gguf"), o);
  EXPECT_TRUE(c.verified);
  EXPECT_EQ(c.bytes_shared, 0u);
  EXPECT_EQ(c.bytes_copied + c.bytes_written, c.bytes);
  // The first payload, copied while finding out whether sharing works, took its zero
  // padding's first block along.
  EXPECT_GE(c.bytes_copied, payload);
  EXPECT_LT(c.bytes_copied, payload + 4096);
  EXPECT_TRUE(read_file(xfs.file("out.gguf")) == read_file(dir.file("out.gguf")));
  GGUF_REQUIRE_GGML();
  EXPECT_TRUE(testing::GgmlRef::get().gguf_accepts(xfs.file("out.gguf"), true));
}

// Through gguf-splice --set: its report says what was shared and how it was proven.
TEST(reflink, metadata_edit_of_a_4096_aligned_file_shares_every_payload_block) {
  XfsMount xfs;
  GGUF_REQUIRE_XFS(xfs);
  const SpliceOnXfs in(xfs);
  const std::string out = xfs.file("out.gguf");
  const auto r = testing::run_cli("gguf-splice",
                                  {in.base, "--set", "general.name=edited", "-o", out, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const uint64_t size = std::filesystem::file_size(out);
  const uint64_t data = Model::open(out).first().data_offset();
  // Every payload block, padding included: only the header is the output's own.
  EXPECT_EQ(j["bytes_shared"], size - data);
  EXPECT_EQ(j["bytes_copied"], 0u);
  EXPECT_EQ(j["bytes_written"], data);
  EXPECT_EQ(j["verification"], nlohmann::json::array({"fiemap", "read-back"}));
  const auto text = testing::run_cli(
      "gguf-splice", {in.base, "--set", "general.name=edited", "-o", out, "--force"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find(fmt::format("data: {} shared with the inputs (proven by FIEMAP), 0 B "
                                      "copied and {} written (read back and hashed)\n",
                                      human_bytes(size - data), human_bytes(data))),
            std::string::npos)
      << text.out;
  GGUF_REQUIRE_GGML();
  EXPECT_TRUE(testing::GgmlRef::get().gguf_accepts(out, true));
}

// Where the proof fails, the range is read on both sides: a source rewritten with the same
// bytes during the write (its blocks copied on write, so no longer shared) passes as copied; one
// rewritten with other bytes fails naming the tensor and the file.
TEST(reflink, unproven_ranges_are_read_back_and_a_changed_source_is_named) {
  XfsMount xfs;
  GGUF_REQUIRE_XFS(xfs);
  const std::string src = xfs.file("src.gguf");
  Plan p;
  p.metadata.set("general.alignment", Value::u32(4096));
  for (int i = 0; i < 2; ++i)
    p.tensors.push_back(testing::memory_tensor(fmt::format("t{}", i), GgmlType::I8, {300000}, i));
  write_plan(p, src, {});
  const auto file = open_file_source(src);
  const Model m = Model::open(src);
  Plan copy = p;
  for (size_t i = 0; i < copy.tensors.size(); ++i)
    copy.tensors[i].source =
        FileRange{file, m.shards()[0]->data_start(m.shards()[0]->tensors()[i])};
  const uint64_t first = m.shards()[0]->data_start(m.shards()[0]->tensors()[0]);
  for (const bool same : {true, false}) {
    SCOPED_TRACE(same ? "same bytes" : "other bytes");
    WriteOptions o;
    o.force = true;
    // Once the second payload is under way, the first's source block is rewritten.
    bool done = false;
    o.progress = [&](uint64_t at, uint64_t) {
      if (done || at < first + 300000) return;
      done = true;
      Fd w(src, O_WRONLY);
      std::vector<uint8_t> block = testing::payload_of(p.tensors[0]);
      block.resize(4096);
      if (!same) block[7] ^= 1;
      write_all(w, block, first);
    };
    if (same) {
      const WriteResult w = write_plan(copy, xfs.file("out.gguf"), o);
      EXPECT_TRUE(done);
      // The first payload's blocks (its padding included) are no longer shared; the second's are.
      EXPECT_EQ(w.bytes_copied, 74u * 4096);
      EXPECT_EQ(w.bytes_shared, 74u * 4096);
    } else {
      try {
        write_plan(copy, xfs.file("out.gguf"), o);
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        EXPECT_EQ(e.object(), "tensor 't0'");
        EXPECT_TRUE(std::string(e.what()).find("did that file change during the write?") !=
                    std::string::npos)
            << e.what();
      }
    }
  }
}

// The fallback: ext4 copies in the kernel, so everything is hashed and read back as before,
// and the report says so.
TEST(reflink, on_ext4_aligned_copies_are_copied_and_read_back) {
  TempDir dir;
  const std::string src = dir.file("src.gguf");
  write_plan(moe_plan(GgmlType::F16, 1), src, {});
  const Model base = Model::open(src);
  SpliceOptions so;
  so.edits = parse_edits({"general.name=edited"}, {}, {}, false);
  const SpliceResult r = splice(base, {}, so);
  WriteOptions o;
  o.inputs = r.inputs;
  const WriteResult w = write_plan(r.plan, dir.file("out.gguf"), o);
  EXPECT_TRUE(w.verified);
  EXPECT_EQ(w.bytes_shared, 0u);
  EXPECT_EQ(w.bytes_copied + w.bytes_written, w.bytes);
  EXPECT_GE(w.bytes_copied, payload_bytes(r.plan));
  EXPECT_LT(w.bytes_copied, payload_bytes(r.plan) + 4096);
  // Hashed whole as they were copied, but for the first (copied in pieces while finding out
  // whether the kernel shares).
  for (size_t i = 1; i < w.tensors.size(); ++i) EXPECT_TRUE(w.tensors[i].xxh3) << w.tensors[i].name;
  const auto cli = testing::run_cli(
      "gguf-splice", {src, "--set", "general.name=edited", "-o", dir.file("cli.gguf"), "--json"});
  ASSERT_EQ(cli.code, 0) << cli.err;
  const auto j = nlohmann::json::parse(cli.out);
  EXPECT_EQ(j["bytes_shared"], 0u);
  EXPECT_EQ(j["bytes_copied"], w.bytes_copied);
  EXPECT_EQ(j["verification"], nlohmann::json::array({"read-back"}));
}

}  // namespace
}  // namespace gguf
