// write_plan: validation, shard assignment, refusal of unsafe output paths, streaming of the
// payloads into temp files (hashing each with xxh3, except block-aligned ranges of inputs that a
// copy-on-write file system shares), read-back verification (FIEMAP for shared ranges), rename
// (shards.cpp, output_checks.cpp and verify.cpp hold the steps around the streaming).
// A process killed mid-write leaves no partial output: the file is unnamed (O_TMPFILE) until
// written and synced; where O_TMPFILE is missing, its ".<name>.tmp.XXXXXX" file stays.
#include "gguf/write/writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <optional>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

#include "base/xxh3.h"
#include "gguf/base/escape.h"
#include "gguf/format/file.h"
#include "gguf/format/model.h"
#include "io/output_file.h"
#include "io/reflink.h"
#include "write/output_checks.h"
#include "write/serialize.h"
#include "write/shards.h"
#include "write/verify.h"

namespace gguf {
namespace {

using detail::Identity;
using detail::OutputFile;
using detail::Shard;
using detail::WrittenPayload;
using detail::Xxh3;

constexpr uint64_t kIoChunk = uint64_t{4} << 20;  // write() step of memory and produced payloads
constexpr uint64_t kCopyExtent = uint64_t{32} << 20;      // per copy_file_range + hash step
constexpr uint64_t kShareExtent = uint64_t{1} << 30;      // per copy_file_range that shares
constexpr uint64_t kReadPiece = uint64_t{4} << 20;        // pread step of hashing and reading
constexpr uint64_t kParallelHashMin = uint64_t{1} << 20;  // smaller extents hash inline
constexpr uint64_t kProgressStep = uint64_t{16} << 20;    // report at least this far apart

// Streams payloads into an output, hashing each as written, and reports progress.
class Streamer {
 public:
  Streamer(const WriteOptions& o, uint64_t total) : options_(o), total_(total) {}

  // Bytes of all earlier shards, so progress counts across a split set.
  void start_file(OutputFile& out, uint64_t base) {
    out_ = &out;
    base_ = base;
    block_ = detail::share_block_size(out.fd());
  }

  void header(std::span<const uint8_t> bytes) {
    out_->set_object({});
    out_->write(bytes);
    progress(false);
  }

  // Writes t's payload at byte `at` of the output, followed by its padding; returns how the
  // payload got there, piece by piece.
  WrittenPayload payload(const PlanTensor& t, uint64_t at, uint64_t padding) {
    out_->set_object(tensor_object(t.name));
    // A writer bug, but one that would put every later payload in the wrong place.
    if (out_->position() != at)
      throw error(t, fmt::format("internal error: payload starts at byte {}, layout says {}",
                                 out_->position(), at));
    pieces_.clear();
    padding_ = padding;
    std::visit([&](const auto& src) { write(t, src); }, t.source);
    out_->write_zeros(padding_);  // what a shared range did not cover
    progress(false);
    return std::move(pieces_);
  }

  void finish() { progress(true); }

  // Bytes that came from input files (shared or copied), of every file so far.
  uint64_t from_inputs() const { return from_inputs_; }

 private:
  // Whether copy_file_range from a source shares extents with the output (found out on the
  // first block-aligned range copied from it).
  enum class Sharing { kUnknown, kShares, kCopies };

  const WriteOptions& options_;
  uint64_t total_, base_ = 0, last_report_ = 0;
  OutputFile* out_ = nullptr;
  uint64_t block_ = 0;  // the output file system's block: the unit extents are shared in
  Xxh3 hash_;
  uint64_t run_start_ = 0;  // in the payload, of the piece being hashed
  WrittenPayload pieces_;
  uint64_t padding_ = 0;  // of the payload being written, not yet covered
  uint64_t from_inputs_ = 0;
  std::vector<uint8_t> buffer_;
  std::vector<uint8_t> hash_buffer_;        // the source as hashed, read beside the kernel copy
  std::unordered_set<int> no_kernel_copy_;  // source fds copy_file_range refused
  std::unordered_map<int, Sharing> sharing_;

  Error error(const PlanTensor& t, std::string msg) const {
    return Error(out_->path(), tensor_object(t.name), out_->position(), std::move(msg));
  }

  // Reports at least every kProgressStep bytes, and (total, total) exactly once at the end.
  void progress(bool final) {
    if (!options_.progress) return;
    const uint64_t done = base_ + out_->position();
    if (done == last_report_) return;
    if (!final && done - last_report_ < kProgressStep && done != total_) return;
    last_report_ = done;
    options_.progress(done, total_);
  }

  void start_hashed(uint64_t at) {
    hash_.reset();
    run_start_ = at;
  }
  // A zero-byte payload still gets its (empty) hashed piece.
  void end_hashed(uint64_t end) {
    if (end > run_start_ || end == 0)
      pieces_.push_back({run_start_, end - run_start_, hash_.digest()});
  }

  void emit(std::span<const uint8_t> bytes) {
    hash_.update(bytes);
    out_->write(bytes);
    progress(false);
  }

  // The part of a payload copied from src_at to the output's current position that the file
  // system could share: [begin, end) in the payload, from the first byte on a block boundary in
  // both files (there is none when the two offsets differ modulo the block) to the last whole
  // block. The last, partial block is included when the input has zeros after the payload and
  // the output's padding reaches as far: ggml and this writer pad with zeros, so a 4096-aligned
  // file shares every block of its payloads. Empty when nothing can be shared.
  std::pair<uint64_t, uint64_t> shareable(const ByteSource& src, uint64_t src_at, uint64_t n) {
    const int fd = src.fd();
    const uint64_t dst_at = out_->position();
    if (fd < 0 || block_ == 0 || no_kernel_copy_.count(fd) || sharing_[fd] == Sharing::kCopies ||
        src_at % block_ != dst_at % block_)
      return {};
    const uint64_t begin = (block_ - src_at % block_) % block_;
    if (begin >= n) return {};
    uint64_t end = begin + (n - begin) / block_ * block_;
    if (end < n) {
      const uint64_t tail_end = end + block_;  // past the payload, into the padding
      if (tail_end - n <= padding_ && src_at + tail_end <= src.size() &&
          all_zero(src.stream(src_at + n, tail_end - n, hash_buffer_)))
        end = tail_end;
    }
    if (end <= begin) return {};
    return {begin, end};
  }

  static bool all_zero(std::span<const uint8_t> bytes) {
    return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
  }

  // Copies payload bytes [from, to) of a file range hashed, as one piece: the source is hashed
  // as it is read (pread, or memory), independently of the kernel copy, so verification
  // compares two different paths to the same bytes. A large extent is hashed on a second thread
  // while the kernel copies it (the future joins even when the copy throws); one extent at a
  // time keeps both readers on the same pages.
  void copy_hashed(const ByteSource& src, uint64_t src_at, uint64_t from, uint64_t to) {
    const int fd = src.fd();
    start_hashed(from);
    for (uint64_t done = from; done < to;) {
      const uint64_t n = std::min(kCopyExtent, to - done), at = src_at + done;
      const auto hash_extent = [&] {
        for (uint64_t k = 0; k < n; k += kReadPiece)
          hash_.update(src.stream(at + k, std::min(kReadPiece, n - k), hash_buffer_));
      };
      std::future<void> hashed;
      if (n >= kParallelHashMin)
        hashed = std::async(std::launch::async, hash_extent);
      else
        hash_extent();
      uint64_t copied = 0;
      if (fd >= 0 && !no_kernel_copy_.count(fd)) {
        copied = out_->copy_range(fd, src.name(), at, n);
        if (copied < n) no_kernel_copy_.insert(fd);
      }
      for (uint64_t k = copied; k < n; k += kReadPiece)
        out_->write(src.stream(at + k, std::min(kReadPiece, n - k), buffer_));
      if (hashed.valid()) hashed.get();
      done += n;
      progress(false);
    }
    end_hashed(to);
  }

  // Hands payload bytes [from, to) of a file range to the kernel unread, in the hope that it
  // shares them (verified later by FIEMAP, or else read back). The first such range from a
  // source shows whether it does: if not, that range is hashed now and the source's later
  // ranges are copied the hashed way.
  void copy_unread(const ByteSource& src, uint64_t src_at, uint64_t from, uint64_t to) {
    const int fd = src.fd();
    for (uint64_t k = from; k < to;) {
      Sharing& sharing = sharing_[fd];
      if (sharing == Sharing::kCopies || no_kernel_copy_.count(fd))
        return copy_hashed(src, src_at, k, to);
      const uint64_t n =
          std::min(sharing == Sharing::kUnknown ? kCopyExtent : kShareExtent, to - k);
      const uint64_t dst = out_->position();
      const uint64_t copied = out_->copy_range(fd, src.name(), src_at + k, n);
      if (copied < n) no_kernel_copy_.insert(fd);
      if (copied == 0) continue;
      if (sharing == Sharing::kUnknown)
        sharing =
            detail::range_is_shared(out_->fd(), dst, copied) ? Sharing::kShares : Sharing::kCopies;
      if (sharing == Sharing::kShares) {
        pieces_.push_back({k, copied, std::nullopt, &src, src_at + k});
      } else {
        start_hashed(k);
        for (uint64_t j = 0; j < copied; j += kReadPiece)
          hash_.update(src.stream(src_at + k + j, std::min(kReadPiece, copied - j), hash_buffer_));
        end_hashed(k + copied);
      }
      k += copied;
      progress(false);
    }
  }

  void write(const PlanTensor& t, const FileRange& r) {
    if (!r.source) throw error(t, "file range has no source");
    const ByteSource& src = *r.source;
    if (r.offset > src.size() || t.bytes > src.size() - r.offset)
      throw error(t, fmt::format("source range [{}, {}) lies outside '{}' ({} bytes)", r.offset,
                                 r.offset + t.bytes, escape_for_terminal(src.name()), src.size()));
    const auto [begin, end] = shareable(src, r.offset, t.bytes);
    if (begin == end) {
      copy_hashed(src, r.offset, 0, t.bytes);
    } else {
      if (begin > 0) copy_hashed(src, r.offset, 0, begin);
      copy_unread(src, r.offset, begin, end);
      if (end < t.bytes) copy_hashed(src, r.offset, end, t.bytes);
      if (end > t.bytes) padding_ -= end - t.bytes;
    }
    from_inputs_ += std::max(end, t.bytes);
  }

  void write(const PlanTensor& t, const MemoryBytes& m) {
    if (!m.data) throw error(t, "memory payload has no data");
    if (m.data->size() != t.bytes)
      throw error(
          t, fmt::format("memory payload holds {} bytes, expected {}", m.data->size(), t.bytes));
    const std::span<const uint8_t> all(*m.data);
    start_hashed(0);
    for (uint64_t done = 0; done < t.bytes; done += kIoChunk)
      emit(all.subspan(static_cast<size_t>(done),
                       static_cast<size_t>(std::min(kIoChunk, t.bytes - done))));
    end_hashed(t.bytes);
  }

  void write(const PlanTensor& t, const Producer& p) {
    if (!p.fill) throw error(t, "producer has no fill function");
    uint64_t chunk = kIoChunk;
    if (p.chunk_bytes >= kIoChunk)
      chunk = p.chunk_bytes;
    else if (p.chunk_bytes > 0)
      chunk = kIoChunk / p.chunk_bytes * p.chunk_bytes;
    const uint64_t size = std::min(chunk, t.bytes);
    if (buffer_.size() < size) buffer_.resize(static_cast<size_t>(size));
    start_hashed(0);
    for (uint64_t done = 0; done < t.bytes;) {
      const uint64_t n = std::min(chunk, t.bytes - done);
      const std::span<uint8_t> out(buffer_.data(), static_cast<size_t>(n));
      try {
        p.fill(done, out);
      } catch (const Error& e) {
        // An error that names its file (an input whose values the codec refuses) stands as
        // it is; otherwise it is about this output.
        if (!e.path().empty()) throw;
        throw Error(out_->path(), tensor_object(t.name), out_->position(),
                    fmt::format("producing the payload failed: {}", e.what()), e.kind());
      } catch (const std::exception& e) {
        throw error(t, fmt::format("producing the payload failed: {}", e.what()));
      } catch (...) {
        throw error(t, "producing the payload failed: unknown exception");
      }
      emit(out);
      done += n;
    }
    end_hashed(t.bytes);
  }
};

// The checks made before anything is written; returns the shards and the inputs.
std::pair<std::vector<Shard>, std::vector<Identity>> prepare(const Plan& plan,
                                                             const std::string& path,
                                                             const WriteOptions& o,
                                                             bool check_paths) {
  // The writer owns the split keys: stale ones from a source would describe another layout.
  Metadata base = plan.metadata;
  for (const char* k : {detail::kSplitNo, detail::kSplitCount, detail::kSplitTensors})
    base.erase(k);
  std::vector<const PlanTensor*> all;
  for (const auto& t : plan.tensors) all.push_back(&t);
  detail::validate_header(base, plan.version, all);
  auto shards = detail::assign_shards(plan, base, path, o);
  auto inputs = detail::input_identities(plan, o);
  if (check_paths)
    for (const auto& sh : shards) detail::check_output_path(sh.path, inputs, o.force);
  return {std::move(shards), std::move(inputs)};
}

WriteResult write_impl(const Plan& plan, const std::string& path, const WriteOptions& o) {
  const auto [shards, inputs] = prepare(plan, path, o, true);
  // Each shard keeps its output descriptor, and once verified the descriptor behind its
  // read-back map, until the whole set is committed; the inputs stay open too.
  reserve_open_files(2 * shards.size() + inputs.size());

  WriteResult result;
  uint64_t total = 0;
  for (const auto& sh : shards) total += sh.layout.file_size;
  std::vector<std::unique_ptr<OutputFile>> outs;
  uint64_t from_inputs = 0;
  try {
    Streamer streamer(o, total);
    std::vector<std::vector<WrittenPayload>> payloads(shards.size());
    std::vector<std::shared_ptr<const GgufFile>> files;  // verified shards
    uint64_t base_bytes = 0;
    for (size_t s = 0; s < shards.size(); ++s) {
      const Shard& sh = shards[s];
      outs.push_back(std::make_unique<OutputFile>(sh.path));
      OutputFile& out = *outs.back();
      streamer.start_file(out, base_bytes);
      streamer.header(detail::encode_header(sh.metadata, plan.version, sh.tensors, sh.layout));
      for (size_t i = 0; i < sh.tensors.size(); ++i) {
        const PlanTensor& t = *sh.tensors[i];
        const uint64_t end = sh.layout.data_offset + sh.layout.offsets[i] + t.bytes;
        const uint64_t next = i + 1 < sh.tensors.size()
                                  ? sh.layout.data_offset + sh.layout.offsets[i + 1]
                                  : sh.layout.file_size;
        payloads[s].push_back(
            streamer.payload(t, sh.layout.data_offset + sh.layout.offsets[i], next - end));
        const auto& pieces = payloads[s].back();
        std::optional<uint64_t> whole;
        if (pieces.size() == 1 && pieces[0].bytes == t.bytes) whole = pieces[0].xxh3;
        result.tensors.push_back(
            {t.name, s, sh.layout.data_offset + sh.layout.offsets[i], t.bytes, whole});
      }
      // A mismatch here is a writer bug; never let such a file reach its path.
      if (out.position() != sh.layout.file_size)
        throw Error(sh.path, {}, std::nullopt,
                    fmt::format("internal error: wrote {} bytes, layout needs {}", out.position(),
                                sh.layout.file_size));
      if (o.verify) {
        // The read-back reads the page cache either way, so it runs while fsync waits for
        // the disk rather than after it.
        files.push_back(detail::open_written(out));
        auto synced = std::async(std::launch::async, [&out] { out.finish(); });
        try {
          detail::verify_file(out, files.back().get(), sh, plan.version, payloads[s]);
        } catch (...) {
          synced.wait();
          throw;
        }
        synced.get();
      } else {
        out.finish();
        if (o.before_commit) files.push_back(detail::open_written(out));
      }
      // After the fsync, so that FIEMAP sees where the blocks are.
      result.bytes_shared +=
          detail::check_unread_ranges(out, o.verify ? files.back().get() : nullptr, sh, payloads[s])
              .shared;
      base_bytes += sh.layout.file_size;
    }
    streamer.finish();
    from_inputs = streamer.from_inputs();
    if (o.verify || o.before_commit) {
      std::optional<Model> written;
      try {
        written = Model::from_files(std::move(files));
      } catch (const Error& e) {
        throw Error(shards[0].path, e.object(), e.offset(),
                    fmt::format("verification failed: the written set does not open as a model: {}",
                                e.message()));
      }
      result.verified = o.verify;
      if (o.before_commit) o.before_commit(*written);
    }
    detail::commit_set(outs, o.force);
    detail::sync_parent_directory(path);
  } catch (...) {
    for (auto& out : outs) out->remove();
    throw;
  }
  for (const auto& sh : shards) result.paths.push_back(sh.path);
  result.bytes = total;
  result.bytes_copied = from_inputs - result.bytes_shared;
  result.bytes_written = total - from_inputs;
  return result;
}

}  // namespace

PlannedWrite check_plan(const Plan& plan, const std::string& path, const WriteOptions& options) {
  const std::string where = path.empty() ? "out.gguf" : path;
  PlannedWrite planned;
  try {
    for (const auto& sh : prepare(plan, where, options, !path.empty()).first) {
      planned.paths.push_back(sh.path);
      planned.bytes += sh.layout.file_size;
    }
  } catch (const Error& e) {
    // Without a path there is no file to name ("out.gguf" only makes shard names).
    if (e.path().empty() && !path.empty()) throw e.with_context(path);
    throw;
  }
  return planned;
}

WriteResult write_plan(const Plan& plan, const std::string& path, const WriteOptions& options) {
  try {
    return write_impl(plan, path, options);
  } catch (const Error& e) {
    if (e.path().empty()) throw e.with_context(path);
    throw;
  } catch (const std::system_error& e) {
    // std::thread's failure to start a worker (ulimit -u, or -v leaving no room for a stack).
    if (e.code() == std::errc::resource_unavailable_try_again)
      throw Error(path, {}, std::nullopt,
                  fmt::format("writing failed: {}: the system refused a worker thread (process "
                              "or memory limits); fewer --threads may fit",
                              e.what()));
    throw Error(path, {}, std::nullopt, fmt::format("writing failed: {}", e.what()));
  } catch (const std::exception& e) {
    throw Error(path, {}, std::nullopt, fmt::format("writing failed: {}", e.what()));
  }
}

void check_output(const std::string& path, const WriteOptions& options) {
  detail::check_output_path(path, detail::input_identities(Plan{}, options), options.force);
}

void write_file(const std::string& path, std::span<const uint8_t> bytes,
                const WriteOptions& options) {
  try {
    check_output(path, options);
    OutputFile out(path);
    out.write(bytes);
    out.finish();
    out.commit(options.force);
    detail::sync_parent_directory(path);  // the rename too survives a crash
  } catch (const Error& e) {
    if (e.path().empty()) throw e.with_context(path);
    throw;
  }
}

}  // namespace gguf
