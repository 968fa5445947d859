// write_plan: validation, shard assignment, refusal of unsafe output paths, streaming of the
// payloads into temp files (hashing each with xxh3), read-back verification, then rename.
// A process killed mid-write leaves no partial output: the file is unnamed (O_TMPFILE) until
// written and synced; where O_TMPFILE is missing, its ".<name>.tmp.XXXXXX" file stays.
#include "gguf/write/writer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <tbb/parallel_for.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <filesystem>
#include <future>
#include <new>
#include <optional>
#include <system_error>
#include <unordered_set>

#include "gguf/base/escape.h"
#include "gguf/format/file.h"
#include "gguf/format/model.h"
#include "write/writer_internal.h"

namespace gguf {
namespace {

using detail::Layout;
using detail::OutputFile;

constexpr uint64_t kCopyExtent = uint64_t{32} << 20;      // per copy_file_range + hash step
constexpr uint64_t kReadPiece = uint64_t{4} << 20;        // pread step of hashing and reading
constexpr uint64_t kParallelHashMin = uint64_t{1} << 20;  // smaller extents hash inline
constexpr uint64_t kProgressStep = uint64_t{16} << 20;    // report at least this far apart
constexpr uint64_t kMaxShards = 65535;                    // split.count is a u16

class Xxh3 {
 public:
  Xxh3() : state_(XXH3_createState()) {
    if (!state_) throw std::bad_alloc();
  }
  ~Xxh3() { XXH3_freeState(state_); }
  Xxh3(const Xxh3&) = delete;
  Xxh3& operator=(const Xxh3&) = delete;
  void reset() { XXH3_64bits_reset(state_); }
  void update(std::span<const uint8_t> b) { XXH3_64bits_update(state_, b.data(), b.size()); }
  uint64_t digest() const { return XXH3_64bits_digest(state_); }

 private:
  XXH3_state_t* state_;
};

struct Shard {
  std::string path;
  Metadata metadata;
  std::vector<const PlanTensor*> tensors;
  std::vector<size_t> plan_index;  // into Plan::tensors
  Layout layout;
};

Metadata split_keys(uint64_t no, uint64_t count, uint64_t total) {
  Metadata m;
  m.set(detail::kSplitNo, Value::u16(static_cast<uint16_t>(no)));
  m.set(detail::kSplitCount, Value::u16(static_cast<uint16_t>(count)));
  m.set(detail::kSplitTensors, Value::i32(static_cast<int32_t>(total)));
  return m;
}

void append_all(Metadata& to, const Metadata& from) {
  for (const auto& kv : from.entries()) to.set(kv.key, kv.value);
}

// Greedy assignment in plan order: a tensor starts a new shard when adding it would exceed a
// limit, so every shard holds at least one tensor and only a single oversized tensor makes a
// shard larger than split_max_size.
std::vector<std::vector<size_t>> group_tensors(const Plan& plan, const Metadata& base,
                                               const WriteOptions& o) {
  const uint64_t a = detail::plan_alignment(base);
  const uint64_t keys = detail::metadata_bytes(split_keys(0, 1, 0));
  Metadata align_only;
  if (const KeyValue* kv = find_key_as_ggml(base, "general.alignment"))
    align_only.set(kv->key, kv->value);
  const uint64_t first_fixed = 24 + detail::metadata_bytes(base) + keys;
  const uint64_t other_fixed = 24 + keys + detail::metadata_bytes(align_only);
  std::vector<std::vector<size_t>> groups(1);
  uint64_t fixed = first_fixed, infos = 0, data = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const PlanTensor& t = plan.tensors[i];
    const uint64_t info = detail::tensor_info_bytes(t);
    const uint64_t padded = detail::pad_to(t.bytes, a);
    if (!groups.back().empty()) {
      const bool too_many = o.split_max_tensors && groups.back().size() >= o.split_max_tensors;
      const bool too_big =
          o.split_max_size &&
          detail::pad_to(fixed + infos + info, a) + data + padded > o.split_max_size;
      if (too_many || too_big) {
        groups.emplace_back();
        fixed = other_fixed;
        infos = data = 0;
      }
    }
    groups.back().push_back(i);
    infos += info;
    data += padded;
  }
  return groups;
}

std::vector<Shard> assign_shards(const Plan& plan, const Metadata& base, const std::string& path,
                                 const WriteOptions& o) {
  std::vector<Shard> shards;
  const bool given = !o.split_tensor_counts.empty();
  if (given && (o.split_max_size || o.split_max_tensors))
    throw Error("write_plan: split_tensor_counts excludes split_max_size and split_max_tensors",
                Error::Kind::kUsage);
  if (!given && !o.split_max_size && !o.split_max_tensors) {
    shards.push_back({path, base, {}, {}, {}});
    for (size_t i = 0; i < plan.tensors.size(); ++i) shards[0].plan_index.push_back(i);
  } else {
    std::vector<std::vector<size_t>> groups;
    if (given) {
      uint64_t total = 0;
      for (uint64_t c : o.split_tensor_counts) total += std::min<uint64_t>(c, UINT32_MAX);
      if (total != plan.tensors.size())
        throw Error(fmt::format("write_plan: split_tensor_counts cover {} tensors, the plan has {}",
                                total, plan.tensors.size()));
      size_t next = 0;
      for (uint64_t c : o.split_tensor_counts) {
        groups.emplace_back();
        for (uint64_t k = 0; k < c; ++k) groups.back().push_back(next++);
      }
    } else {
      groups = group_tensors(plan, base, o);
    }
    const uint64_t n = groups.size();
    if (n > kMaxShards)
      throw Error(path, {}, std::nullopt,
                  fmt::format("split output needs {} shards; split.count is a u16 (at most {})", n,
                              kMaxShards),
                  Error::Kind::kUsage);
    if (plan.tensors.size() > static_cast<uint64_t>(INT32_MAX))
      throw Error(path, {}, std::nullopt,
                  fmt::format("split output of {} tensors; split.tensors.count is an i32",
                              plan.tensors.size()));
    const std::string prefix =
        path.ends_with(".gguf") ? path.substr(0, path.size() - 5) : std::string(path);
    for (uint64_t s = 0; s < n; ++s) {
      Shard sh;
      sh.path = split_path(prefix, static_cast<int>(s + 1), static_cast<int>(n));
      if (s == 0) {
        sh.metadata = base;
        append_all(sh.metadata, split_keys(s, n, plan.tensors.size()));
      } else {
        sh.metadata = split_keys(s, n, plan.tensors.size());
        if (const KeyValue* kv = find_key_as_ggml(base, "general.alignment"))
          sh.metadata.set(kv->key, kv->value);
      }
      sh.plan_index = groups[s];
      shards.push_back(std::move(sh));
    }
  }
  for (auto& sh : shards) {
    for (size_t i : sh.plan_index) sh.tensors.push_back(&plan.tensors[i]);
    sh.layout = detail::layout_of(sh.metadata, sh.tensors);
  }
  return shards;
}

struct Identity {
  uint64_t dev, ino;
  std::string name;
};

std::vector<Identity> input_identities(const Plan& plan, const WriteOptions& o) {
  std::vector<Identity> ids;
  for (const auto& in : o.inputs) {
    struct stat st {};
    if (::stat(in.c_str(), &st) == 0)
      ids.push_back({static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), in});
  }
  // Sources the plan reads are inputs too, whether or not the caller listed them.
  for (const auto& t : plan.tensors)
    if (const auto* r = std::get_if<FileRange>(&t.source); r && r->source)
      if (const auto id = r->source->identity())
        ids.push_back({id->first, id->second, r->source->name()});
  return ids;
}

// Whether the output path, or a symbolic link on the way to it, leads into /proc: /dev/stdout
// and /dev/fd/N are open descriptors, not files. The output would replace the link (a rename
// over it), and what it points at would never get it.
bool leads_into_proc(const std::string& out) {
  namespace fs = std::filesystem;
  fs::path p = out;
  for (int hop = 0; hop < 40; ++hop) {
    std::error_code ec;
    const fs::path dir = fs::weakly_canonical(fs::absolute(p, ec).parent_path(), ec);
    if (!ec && (dir == "/proc" || dir.string().starts_with("/proc/"))) return true;
    struct stat l {};
    if (::lstat(p.c_str(), &l) != 0 || !S_ISLNK(l.st_mode)) return false;
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) return false;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  return false;
}

void check_output_path(const std::string& out, const std::vector<Identity>& inputs, bool force) {
  if (leads_into_proc(out))
    throw Error(out, {}, std::nullopt,
                "output path leads into /proc (an open file descriptor such as /dev/stdout, not "
                "a file); refusing to replace it (give a file path)",
                Error::Kind::kUsage);
  struct stat st {};
  if (::stat(out.c_str(), &st) == 0) {
    for (const auto& in : inputs)
      if (in.dev == static_cast<uint64_t>(st.st_dev) && in.ino == static_cast<uint64_t>(st.st_ino))
        throw Error(out, {}, std::nullopt,
                    fmt::format("output is the same file as input '{}'; refusing to overwrite an "
                                "input (choose another output path)",
                                escape_for_terminal(in.name)),
                    Error::Kind::kUsage);
    if (S_ISDIR(st.st_mode))
      throw Error(out, {}, std::nullopt, "output path is a directory", Error::Kind::kUsage);
    // Not even --force replaces a device, FIFO or socket (e.g. -o /dev/null) with a file.
    if (!S_ISREG(st.st_mode))
      throw Error(out, {}, std::nullopt,
                  "output path exists and is not a regular file (a device, FIFO or socket); "
                  "refusing to replace it",
                  Error::Kind::kUsage);
  }
  // The output is written to a temp file beside it and renamed into place, so its directory
  // must exist and take new entries; checked here so that a dry run refuses what the write
  // would.
  const std::string dir = detail::parent_dir(out);
  struct stat dst {};
  int err = 0;
  if (::stat(dir.c_str(), &dst) != 0)
    err = errno;
  else if (!S_ISDIR(dst.st_mode))
    err = ENOTDIR;
  else if (::access(dir.c_str(), W_OK | X_OK) != 0)
    err = errno;
  if (err)
    throw Error(out, {}, std::nullopt,
                fmt::format("cannot create the output in directory '{}': {}",
                            escape_for_terminal(dir), detail::errno_text(err)));
  // The rename at the very end would fail on a name the file system cannot hold.
  const std::string name = std::filesystem::path(out).filename().string();
  long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max <= 0) name_max = NAME_MAX;
  if (name.size() > static_cast<size_t>(name_max))
    throw Error(out, {}, std::nullopt,
                fmt::format("output file name is {} bytes long; the file system of '{}' allows at "
                            "most {}",
                            name.size(), escape_for_terminal(dir), name_max));
  struct stat lst {};
  if (::lstat(out.c_str(), &lst) != 0) return;
  if (!force)
    throw Error(out, {}, std::nullopt, "output file exists; use --force to replace it",
                Error::Kind::kUsage);
  // In a sticky directory (such as /tmp) only the file's or the directory's owner may replace
  // the file: the final rename would fail after all the work (root may, by CAP_FOWNER).
  const uid_t me = ::geteuid();
  if ((dst.st_mode & S_ISVTX) && me != 0 && me != lst.st_uid && me != dst.st_uid)
    throw Error(out, {}, std::nullopt,
                fmt::format("cannot replace the output: directory '{}' is sticky (as /tmp is) and "
                            "the file belongs to another user",
                            escape_for_terminal(dir)));
}

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
    for (uint64_t done = 0; done < t.bytes; done += detail::kIoChunk)
      emit(all.subspan(static_cast<size_t>(done),
                       static_cast<size_t>(std::min(detail::kIoChunk, t.bytes - done))));
  }

  void write(const PlanTensor& t, const Producer& p) {
    if (!p.fill) throw error(t, "producer has no fill function");
    uint64_t chunk = detail::kIoChunk;
    if (p.chunk_bytes >= detail::kIoChunk)
      chunk = p.chunk_bytes;
    else if (p.chunk_bytes > 0)
      chunk = detail::kIoChunk / p.chunk_bytes * p.chunk_bytes;
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

// Re-opens a written file through the validated reader (its own descriptor and mapping, so
// it stays readable while the writer's descriptor is synced and closed).
std::shared_ptr<const GgufFile> open_written(const OutputFile& out) {
  std::shared_ptr<const ByteSource> source;
  try {
    source = open_file_source(out.temp_path());
  } catch (const Error& e) {
    // Out of descriptors or address space (ulimit -n, ulimit -v): nothing is known to be wrong
    // with the file, but it could not be checked, so it is not kept.
    throw Error(out.path(), {}, std::nullopt,
                fmt::format("cannot read the written file back to verify it: {}", e.message()));
  }
  try {
    return GgufFile::parse(source);
  } catch (const Error& e) {
    throw Error(
        out.path(), e.object(), e.offset(),
        fmt::format("verification failed: the written file does not parse: {}", e.message()));
  }
}

// Compares a re-opened written file with the plan.
void verify_file(const OutputFile& out, const GgufFile* f, const Shard& sh, uint32_t version,
                 std::span<const uint64_t> hashes) {
  auto fail = [&](std::string object, std::string msg) {
    throw Error(out.path(), std::move(object), std::nullopt,
                fmt::format("verification failed: {}", msg));
  };
  if (f->version() != version) fail({}, fmt::format("version {}, wrote {}", f->version(), version));
  if (f->alignment() != sh.layout.alignment)
    fail({}, fmt::format("alignment {}, wrote {}", f->alignment(), sh.layout.alignment));
  if (f->data_offset() != sh.layout.data_offset)
    fail({}, fmt::format("data section at byte {}, wrote it at {}", f->data_offset(),
                         sh.layout.data_offset));
  if (f->file_size() != sh.layout.file_size)
    fail({}, fmt::format("file is {} bytes, wrote {}", f->file_size(), sh.layout.file_size));
  const auto& kvs = f->metadata().entries();
  if (kvs.size() != sh.metadata.size())
    fail({}, fmt::format("{} keys, wrote {}", kvs.size(), sh.metadata.size()));
  for (size_t i = 0; i < kvs.size(); ++i) {
    const KeyValue& want = sh.metadata.entries()[i];
    if (kvs[i].key != want.key || !(kvs[i].value == want.value))
      fail(key_object(want.key), fmt::format("key #{} reads back as {} = {}", i,
                                             key_object(kvs[i].key), format_value(kvs[i].value)));
  }
  const auto& ts = f->tensors();
  if (ts.size() != sh.tensors.size())
    fail({}, fmt::format("{} tensors, wrote {}", ts.size(), sh.tensors.size()));
  for (size_t i = 0; i < ts.size(); ++i) {
    const PlanTensor& want = *sh.tensors[i];
    const TensorInfo& got = ts[i];
    const std::string object = tensor_object(want.name);
    if (got.name != want.name)
      fail(object, fmt::format("tensor #{} reads back as {}", i, tensor_object(got.name)));
    if (got.type_id != want.type_id || got.shape != want.shape)
      fail(object, fmt::format("reads back as {} [{}], wrote {} [{}]", type_name(got.type_id),
                               fmt::join(got.shape, ", "), type_name(want.type_id),
                               fmt::join(want.shape, ", ")));
    if (got.offset != sh.layout.offsets[i] || got.bytes != want.bytes)
      fail(object, fmt::format("offset/size read back as {}/{}, wrote {}/{}", got.offset,
                               got.bytes.value_or(0), sh.layout.offsets[i], want.bytes));
  }
  // The payloads are read back on all cores, largest first, in pieces read through the
  // reader's source of the written file (pread of the page cache) so memory stays bounded.
  // The first failing tensor in file order is reported.
  std::vector<size_t> order(ts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return sh.tensors[x]->bytes > sh.tensors[y]->bytes; });
  std::vector<std::string> problems(ts.size());
  const ByteSource& src = f->source();
  tbb::parallel_for(size_t{0}, order.size(), [&](size_t k) {
    const size_t i = order[k];
    const uint64_t size = sh.tensors[i]->bytes, start = f->data_start(ts[i]);
    Xxh3 hash;
    hash.reset();
    thread_local std::vector<uint8_t> buf;
    try {
      for (uint64_t done = 0; done < size; done += kReadPiece)
        hash.update(src.stream(start + done, std::min(kReadPiece, size - done), buf));
    } catch (const Error& e) {  // named after the output, not its temp file
      problems[i] = fmt::format("cannot read the payload back at byte {}: {}",
                                e.offset().value_or(start), e.message());
      return;
    }
    if (hash.digest() != hashes[i]) {
      problems[i] = fmt::format("payload reads back with xxh3 {:016x}, wrote {:016x}",
                                hash.digest(), hashes[i]);
      // A payload copied from an input file: the likeliest cause is that file changing under
      // the copy (its bytes are hashed and copied in separate passes).
      if (const auto* r = std::get_if<FileRange>(&sh.tensors[i]->source); r && r->source)
        problems[i] += fmt::format(
            "; it was copied from '{}' at byte {}: did that file change during the write?",
            escape_for_terminal(r->source->name()), r->offset);
    }
  });
  for (size_t i = 0; i < ts.size(); ++i)
    if (!problems[i].empty()) fail(tensor_object(sh.tensors[i]->name), problems[i]);
}

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
  auto shards = assign_shards(plan, base, path, o);
  auto inputs = input_identities(plan, o);
  if (check_paths)
    for (const auto& sh : shards) check_output_path(sh.path, inputs, o.force);
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
        files.push_back(open_written(out));
        auto synced = std::async(std::launch::async, [&out] { out.finish(); });
        try {
          verify_file(out, files.back().get(), sh, plan.version, hashes[s]);
        } catch (...) {
          synced.wait();
          throw;
        }
        synced.get();
      } else {
        out.finish();
        if (o.before_commit) files.push_back(open_written(out));
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
    if (e.path().empty()) throw e.with_context(where);
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
  check_output_path(path, input_identities(Plan{}, options), options.force);
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

namespace detail {

void commit_set(std::vector<std::unique_ptr<OutputFile>>& outs, bool force,
                const std::function<void(size_t)>& committed) {
  SignalsDeferred deferred;
  try {
    // A set replacing another is never left mixed, even by SIGKILL: the old files are all set
    // aside first (the first shard last), then the new ones put in place (the first shard
    // first). A process killed between two renames leaves one set with a shard missing, which
    // the reader names, and the old files under hidden names beside it.
    const bool set_aside = force && outs.size() > 1;
    if (set_aside)
      for (size_t i = outs.size(); i-- > 0;) outs[i]->set_aside_replaced_file();
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i]->commit(force, outs.size() > 1 && !set_aside);
      if (committed) committed(i);
    }
  } catch (...) {
    for (auto& out : outs) out->remove();
    throw;
  }
  for (auto& out : outs) out->drop_replaced_file();
}

}  // namespace detail
}  // namespace gguf
