// SequentialRelease: which page ranges a reader streaming through a mapping gives back, and
// when. A recording source stands in for the mapping (release() of a real file source is
// advice to the kernel and cannot be observed from here).
#include "gguf/source.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gguf {
namespace {

constexpr uint64_t kW = kReleaseWindow;

// Records release calls as the windows they cover (release() rounds out to whole windows).
class RecordingSource : public ByteSource {
 public:
  explicit RecordingSource(uint64_t size) : size_(size) {}
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return size_; }
  void release(uint64_t offset, uint64_t len) const override {
    ASSERT_GT(len, 0u) << "an empty release";
    ASSERT_LE(offset + len, size_);
    const uint64_t lo = offset / kW, hi = (offset + len + kW - 1) / kW;
    calls.push_back({lo, hi});
    for (uint64_t w = lo; w < hi; ++w) released.push_back(w);
  }
  mutable std::vector<std::pair<uint64_t, uint64_t>> calls;  // [first, last + 1) windows
  mutable std::vector<uint64_t> released;                    // every window, as often as hit

 protected:
  const uint8_t* base() const override { return nullptr; }

 private:
  std::string name_ = "recorded";
  uint64_t size_;
};

uint64_t times_released(const RecordingSource& s, uint64_t window) {
  uint64_t n = 0;
  for (uint64_t w : s.released) n += w == window;
  return n;
}

TEST(sequential_release, releases_each_window_once_after_the_reads_leave_it) {
  // 576 KiB pieces (1M q4_K elements), as gguf-diff --values reads them: each window is released
  // once, and never while a later piece still reads it.
  RecordingSource s(64 * kW);
  constexpr uint64_t kPiece = 576 * 1024;
  SequentialRelease r;
  uint64_t off = 0;
  for (; off + kPiece <= 20 * kW; off += kPiece) {
    r.done(s, off, kPiece);
    for (const auto& [lo, hi] : s.calls) EXPECT_LE(hi, (off + kPiece) / kW) << "at " << off;
  }
  r.flush();
  for (uint64_t w = 0; w < off / kW; ++w) EXPECT_EQ(times_released(s, w), 1u) << "window " << w;
  EXPECT_EQ(times_released(s, off / kW), 1u) << "the last, partly read window";
  EXPECT_EQ(times_released(s, off / kW + 1), 0u);
}

TEST(sequential_release, two_sources_read_in_turn_are_followed_separately) {
  RecordingSource a(16 * kW), b(16 * kW);
  SequentialRelease r;
  for (uint64_t off = 0; off < 8 * kW; off += kW / 4) {
    r.done(a, off, kW / 4);
    r.done(b, 3 + off, kW / 4);  // b's payload starts 3 bytes into its file
  }
  EXPECT_EQ(a.released.size(), 8u);  // a's reads end on a window boundary
  EXPECT_EQ(b.released.size(), 8u);  // b's 9th window is still being read as far as r knows
  r.flush();
  EXPECT_EQ(a.released, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(b.released, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  r.flush();  // nothing is pending any more
  EXPECT_EQ(a.released.size(), 8u);
  EXPECT_EQ(b.released.size(), 9u);
}

TEST(sequential_release, a_jump_releases_what_was_pending_at_once) {
  RecordingSource s(64 * kW);
  SequentialRelease r;
  r.done(s, 10, 100);  // pending: window 0
  EXPECT_TRUE(s.calls.empty());
  r.done(s, 5 * kW, 100);  // more than a window ahead: window 0 goes now
  EXPECT_EQ(s.released, (std::vector<uint64_t>{0}));
  r.done(s, kW + 7, 100);  // backwards (another tensor): window 5 goes
  EXPECT_EQ(s.released, (std::vector<uint64_t>{0, 5}));
  r.done(s, kW + 7 + 100 + kW / 2, 100);  // a gap under a window (padding) continues the range
  EXPECT_EQ(s.released, (std::vector<uint64_t>{0, 5}));
  r.done(s, 2 * kW + 1, kW);  // reaches window 3: windows 1 and 2 are done
  EXPECT_EQ(s.released, (std::vector<uint64_t>{0, 5, 1, 2}));
  r.flush();
  EXPECT_EQ(s.released, (std::vector<uint64_t>{0, 5, 1, 2, 3}));
}

TEST(sequential_release, a_range_ending_on_a_window_boundary_leaves_nothing_pending) {
  RecordingSource s(8 * kW);
  SequentialRelease r;
  r.done(s, 0, 2 * kW);
  EXPECT_EQ(s.released, (std::vector<uint64_t>{0, 1}));
  r.flush();
  EXPECT_EQ(s.released, (std::vector<uint64_t>{0, 1}));
  r.done(s, 2 * kW, 0);  // an empty range is nothing
  r.flush();
  EXPECT_EQ(s.released.size(), 2u);
}

TEST(sequential_release, more_sources_than_slots_release_the_oldest) {
  std::vector<RecordingSource> s;
  for (int i = 0; i < 6; ++i) s.emplace_back(4 * kW);
  {
    SequentialRelease r;
    for (int i = 0; i < 6; ++i) r.done(s[i], 100, 100);
    // Four are followed at once: the first two were released when the fifth and sixth came.
    EXPECT_EQ(s[0].released.size(), 1u);
    EXPECT_EQ(s[1].released.size(), 1u);
    for (int i = 2; i < 6; ++i) EXPECT_TRUE(s[i].released.empty()) << i;
  }  // the destructor flushes
  for (int i = 0; i < 6; ++i) EXPECT_EQ(s[i].released, (std::vector<uint64_t>{0})) << i;
}

}  // namespace
}  // namespace gguf
