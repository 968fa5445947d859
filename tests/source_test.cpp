// ByteSource::stream(), the way the tools read payloads once, front to back.
#include "gguf/io/source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gguf/base/error.h"

namespace gguf {
namespace {

// stream(): a file's bytes are read into the scratch buffer, a memory source's returned in
// place; a range outside the source, and a file cut short after it was opened, are errors
// naming the file and the byte.
TEST(byte_source_stream, reads_files_into_the_buffer_and_memory_in_place) {
  char path[] = "/tmp/gguf-stream-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::string content(3 << 20, '\0');
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 7 + i / 4096);
  { std::ofstream(path, std::ios::binary) << content; }
  const auto file = open_file_source(path);
  std::vector<uint8_t> scratch;
  const auto got = file->stream(12345, 2 << 20, scratch);
  EXPECT_EQ(got.data(), scratch.data());
  ASSERT_EQ(got.size(), size_t{2} << 20);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got.data()), got.size()),
            content.substr(12345, 2 << 20));
  EXPECT_TRUE(file->stream(0, 0, scratch).empty());
  try {
    (void)file->stream(content.size() - 10, 11, scratch);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              std::string(path) + ": at byte " + std::to_string(content.size() - 10) +
                  ": range of 11 bytes runs past end of file (10 bytes left)");
  }
  ASSERT_EQ(::truncate(path, 1 << 20), 0);
  try {
    (void)file->stream(1000, 2 << 20, scratch);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), std::string(path) + ": at byte " + std::to_string(1 << 20) +
                                         ": a file being read was truncated: was an input "
                                         "changed while in use?");
  }
  ::unlink(path);

  const auto mem = memory_source(std::vector<uint8_t>(100, 9), "mem");
  std::vector<uint8_t> unused;
  const auto in_place = mem->stream(10, 20, unused);
  EXPECT_EQ(in_place.data(), mem->bytes(10, 20).data());
  EXPECT_EQ(in_place.size(), 20u);
  EXPECT_TRUE(unused.empty()) << "a memory source needs no buffer";
}

}  // namespace
}  // namespace gguf
