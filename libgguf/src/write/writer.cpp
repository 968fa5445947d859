// write_plan: validation, shard assignment, refusal of unsafe output paths, streaming of the
// payloads into temp files (hashing each with xxh3), read-back verification, then rename
// (shards.cpp, output_checks.cpp and verify.cpp hold the steps around the streaming).
// A process killed mid-write leaves no partial output: the file is unnamed (O_TMPFILE) until
// written and synced; where O_TMPFILE is missing, its ".<name>.tmp.XXXXXX" file stays.
#include "gguf/write/writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <optional>
#include <system_error>
#include <unordered_set>

#include "base/xxh3.h"
#include "gguf/base/escape.h"
#include "gguf/format/file.h"
#include "gguf/format/model.h"
#include "io/output_file.h"
#include "write/output_checks.h"
#include "write/serialize.h"
#include "write/shards.h"
#include "write/verify.h"

namespace gguf {
namespace {

using detail::Identity;
using detail::OutputFile;
using detail::Shard;
using detail::Xxh3;

constexpr uint64_t kIoChunk = uint64_t{4} << 20;  // write() step of memory and produced payloads
constexpr uint64_t kCopyExtent = uint64_t{32} << 20;      // per copy_file_range + hash step
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
  }

  void header(std::span<const uint8_t> bytes) {
    out_->set_object({});
    out_->write(bytes);
    progress(false);
  }

  // Writes t's payload at byte `at` of the output, followed by its padding; returns the
  // payload's xxh3.
  uint64_t payload(const PlanTensor& t, uint64_t at, uint64_t padding) {
    out_->set_object(tensor_object(t.name));
    // A writer bug, but one that would put every later payload in the wrong place.
    if (out_->position() != at)
      throw error(t, fmt::format("internal error: payload starts at byte {}, layout says {}",
                                 out_->position(), at));
    hash_.reset();
    std::visit([&](const auto& src) { write(t, src); }, t.source);
    out_->write_zeros(padding);
    progress(false);
    return hash_.digest();
  }

  void finish() { progress(true); }

 private:
  const WriteOptions& options_;
  uint64_t total_, base_ = 0, last_report_ = 0;
  OutputFile* out_ = nullptr;
  Xxh3 hash_;
  std::vector<uint8_t> buffer_;
  std::vector<uint8_t> hash_buffer_;        // the source as hashed, read beside the kernel copy
  std::unordered_set<int> no_kernel_copy_;  // source fds copy_file_range refused

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

  void emit(std::span<const uint8_t> bytes) {
    hash_.update(bytes);
    out_->write(bytes);
    progress(false);
  }

  void write(const PlanTensor& t, const FileRange& r) {
    if (!r.source) throw error(t, "file range has no source");
    const ByteSource& src = *r.source;
    if (r.offset > src.size() || t.bytes > src.size() - r.offset)
      throw error(t, fmt::format("source range [{}, {}) lies outside '{}' ({} bytes)", r.offset,
                                 r.offset + t.bytes, escape_for_terminal(src.name()), src.size()));
    const int fd = src.fd();
    for (uint64_t done = 0; done < t.bytes;) {
      const uint64_t n = std::min(kCopyExtent, t.bytes - done), at = r.offset + done;
      // The source is hashed as it is read (pread, or memory), independently of the kernel
      // copy, so verification compares two different paths to the same bytes. A large extent
      // is hashed on a second thread while the kernel copies it (the future joins even when
      // the copy throws); one extent at a time keeps both readers on the same pages.
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
  }

  void write(const PlanTensor& t, const MemoryBytes& m) {
    if (!m.data) throw error(t, "memory payload has no data");
    if (m.data->size() != t.bytes)
      throw error(
          t, fmt::format("memory payload holds {} bytes, expected {}", m.data->size(), t.bytes));
    const std::span<const uint8_t> all(*m.data);
    for (uint64_t done = 0; done < t.bytes; done += kIoChunk)
      emit(all.subspan(static_cast<size_t>(done),
                       static_cast<size_t>(std::min(kIoChunk, t.bytes - done))));
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
  try {
    Streamer streamer(o, total);
    std::vector<std::vector<uint64_t>> hashes(shards.size());
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
        hashes[s].push_back(
            streamer.payload(t, sh.layout.data_offset + sh.layout.offsets[i], next - end));
        result.tensors.push_back(
            {t.name, s, sh.layout.data_offset + sh.layout.offsets[i], t.bytes, hashes[s].back()});
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
          detail::verify_file(out, files.back().get(), sh, plan.version, hashes[s]);
        } catch (...) {
          synced.wait();
          throw;
        }
        synced.get();
      } else {
        out.finish();
        if (o.before_commit) files.push_back(detail::open_written(out));
      }
      base_bytes += sh.layout.file_size;
    }
    streamer.finish();
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
