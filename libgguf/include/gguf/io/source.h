// Byte sources: a read-only memory map of a file, or bytes in memory, behind one interface,
// so the parser, the tests and the fuzzer read through the same code.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gguf {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // The name used in messages (the path as the user gave it).
  virtual const std::string& name() const = 0;
  virtual uint64_t size() const = 0;
  // The bytes [offset, offset + len); throws gguf::Error when the range is not inside.
  std::span<const uint8_t> bytes(uint64_t offset, uint64_t len) const;
  // An open descriptor for kernel-side copies, or -1 for memory sources.
  virtual int fd() const { return -1; }
  // Drops the pages of [offset, offset + len) from this process's page tables (they stay in
  // the page cache), so streaming over a mapped 100 GB model keeps RSS bounded. A no-op for
  // memory sources; later reads of the range simply fault the pages back in.
  virtual void release(uint64_t /*offset*/, uint64_t /*len*/) const {}
  // The bytes [offset, offset + len) for reading once, front to back: a file's are read into
  // `scratch` (pread), a memory source's are returned in place. Streaming a mapped file
  // instead costs a page fault per few pages and a release afterwards; on the VMs measured
  // that made reading 3-4x slower than pread (bench/README.md). Throws gguf::Error when the
  // range is not inside, or the file cannot be read or was cut short meanwhile.
  std::span<const uint8_t> stream(uint64_t offset, uint64_t len,
                                  std::vector<uint8_t>& scratch) const;
  // (device, inode) of a file, to refuse writing over an input.
  virtual std::optional<std::pair<uint64_t, uint64_t>> identity() const { return std::nullopt; }

 protected:
  virtual const uint8_t* base() const = 0;
  // Reads [offset, offset + len), inside the source, into scratch (grown as needed) and
  // returns true; false when the source is read in place (stream() then returns its bytes).
  virtual bool read_into(uint64_t /*offset*/, uint64_t /*len*/,
                         std::vector<uint8_t>& /*scratch*/) const {
    return false;
  }
};

// Maps a file read-only (files larger than 4 GiB work on 64-bit hosts).
std::shared_ptr<const ByteSource> open_file_source(const std::string& path);
// Raises this process's soft limit on open files towards its hard limit so that `needed`
// more descriptors fit besides those open now (each open file holds one, for its map; the
// default soft limit of 1024 would refuse a split set of a thousand shards). Best effort: when
// the hard limit is lower, opening fails later with "Too many open files" naming the file.
void reserve_open_files(uint64_t needed);
// Wraps bytes held in memory; name is used in messages.
std::shared_ptr<const ByteSource> memory_source(std::vector<uint8_t> bytes, std::string name);

}  // namespace gguf
