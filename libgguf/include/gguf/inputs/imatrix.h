// Importance matrices: llama.cpp's legacy binary .dat and the GGUF imatrix format, with
// per-expert slices for 3-D *_exps tensors, and the column-energy fallback.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "gguf/io/source.h"

namespace gguf {

struct ImatrixEntry {
  int64_t n_mat = 1;          // experts (1 for dense tensors)
  int64_t ne0 = 0;            // columns per matrix
  std::vector<float> values;  // n_mat * ne0 mean squared activations, expert-major
  // A GGUF entry's counts, one per matrix: how often calibration routed tokens to each expert
  // (0: never, and its values are then 1.0). Empty for a legacy entry, which keeps one call
  // count for all its experts.
  std::vector<float> counts;
  // The byte that gives the entry its size (a legacy entry's nval, the shape in a GGUF entry's
  // in_sum2 tensor info): where a misfit with the weight it is for is reported.
  std::optional<uint64_t> at;
};

class Imatrix {
 public:
  // Reads a legacy .dat or a GGUF imatrix (detected by magic); throws gguf::Error naming the
  // file, the entry and the offset for anything malformed.
  static Imatrix load(const std::string& path);
  // The same from any byte source (its name() is the path messages give).
  static Imatrix parse(std::shared_ptr<const ByteSource> src);

  const std::string& path() const { return path_; }
  // Read from a legacy .dat (no per-expert counts) rather than a GGUF imatrix.
  bool legacy() const { return legacy_; }
  const std::vector<std::string>& datasets() const { return datasets_; }
  int64_t chunk_count() const { return chunk_count_; }
  size_t size() const { return entries_.size(); }
  const ImatrixEntry* find(const std::string& tensor) const;
  const std::unordered_map<std::string, ImatrixEntry>& entries() const { return entries_; }

  // The n_per_row weights for matrix `mat` (expert index; 0 for 2-D tensors) of a tensor with
  // n_per_row columns and n_mat matrices, or an empty span when the file has no entry for it.
  // An entry whose length fits neither n_per_row nor n_mat * n_per_row is an error naming both.
  std::span<const float> weights(const std::string& tensor, int64_t n_per_row, int64_t n_mat,
                                 int64_t mat) const;

  // How often each matrix of a tensor was used during calibration (a GGUF imatrix's counts:
  // tokens routed to each expert), or an empty span when the file does not say (legacy .dat).
  std::span<const float> counts(const std::string& tensor) const;

  // For tests and tools that build matrices in memory.
  void add(std::string tensor, ImatrixEntry e) { entries_[std::move(tensor)] = std::move(e); }
  void add_counts(std::string tensor, std::vector<float> c) {
    counts_[std::move(tensor)] = std::move(c);
  }

 private:
  std::string path_;
  std::vector<std::string> datasets_;
  int64_t chunk_count_ = 0;
  bool legacy_ = false;
  std::unordered_map<std::string, ImatrixEntry> entries_;
  std::unordered_map<std::string, std::vector<float>> counts_;
  static Imatrix parse_legacy(const ByteSource& src);
  static Imatrix parse_gguf(std::shared_ptr<const ByteSource> src);
};

// The fallback when no matrix is given: importance[c] = sum over rows of w[r][c]^2, summed in
// float in row order.
std::vector<float> column_energy(std::span<const float> rows, int64_t nrows, int64_t n_per_row);
// The same sum continued over more rows (so a matrix read in pieces sums as one): adds each
// row's squares to `energy` (n_per_row values), in row order.
void add_column_energy(std::span<const float> rows, int64_t nrows, int64_t n_per_row,
                       std::span<float> energy);

}  // namespace gguf
