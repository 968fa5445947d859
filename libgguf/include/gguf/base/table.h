// Aligned text tables for human output (first column left-aligned, the rest right-aligned
// unless marked), so every tool's tables look alike.
#pragma once

#include <string>
#include <vector>

namespace gguf {

class Table {
 public:
  explicit Table(std::vector<std::string> header, std::vector<bool> left_aligned = {});
  void add(std::vector<std::string> row);
  std::string render(std::string_view indent = "") const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> header_;
  std::vector<bool> left_;
  std::vector<std::vector<std::string>> rows_;
};

// "1,234,567"
std::string with_commas(uint64_t v);
// "128.3M", "1.02B" parameter counts
std::string short_count(uint64_t v);

}  // namespace gguf
