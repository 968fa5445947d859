// Internal: what write_plan and check_plan refuse before writing anything (output_checks.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/write/writer.h"

namespace gguf::detail {

// A file by device and inode, and the name it was given by.
struct Identity {
  uint64_t dev, ino;
  std::string name;
};

// The inputs of a write: the files o lists, and the files the plan's sources read.
std::vector<Identity> input_identities(const Plan& plan, const WriteOptions& o);

// Refuses an output path that is an input, a directory, a device, FIFO or socket, or leads into
// /proc; one in a directory that cannot take it or with too long a name; and an existing file
// without force, or one a sticky directory keeps from being replaced.
void check_output_path(const std::string& out, const std::vector<Identity>& inputs, bool force);

}  // namespace gguf::detail
