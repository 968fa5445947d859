// Aligned text tables; widths count UTF-8 code points so escaped names line up.
#include "gguf/base/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace gguf {
namespace {

size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

Table::Table(std::vector<std::string> header, std::vector<bool> left_aligned)
    : header_(std::move(header)), left_(std::move(left_aligned)) {
  left_.resize(header_.size(), false);
  if (!left_.empty() && std::none_of(left_.begin(), left_.end(), [](bool b) { return b; }))
    left_[0] = true;
}

void Table::add(std::vector<std::string> row) {
  row.resize(header_.size());
  rows_.push_back(std::move(row));
}

std::string Table::render(std::string_view indent) const {
  std::vector<size_t> w(header_.size());
  for (size_t c = 0; c < header_.size(); ++c) {
    w[c] = display_width(header_[c]);
    for (const auto& r : rows_) w[c] = std::max(w[c], display_width(r[c]));
  }
  std::string out;
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string l(indent);
    for (size_t c = 0; c < cells.size(); ++c) {
      const size_t pad = w[c] - display_width(cells[c]);
      if (c) l += "  ";
      if (left_[c]) {
        l += cells[c];
        if (c + 1 < cells.size()) l.append(pad, ' ');
      } else {
        l.append(pad, ' ');
        l += cells[c];
      }
    }
    out += l + "\n";
  };
  line(header_);
  for (const auto& r : rows_) line(r);
  return out;
}

std::string with_commas(uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string s;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

std::string short_count(uint64_t v) {
  const double d = static_cast<double>(v);
  if (v >= 1000000000ull) return fmt::format("{:.2f}B", d / 1e9);
  if (v >= 1000000ull) return fmt::format("{:.2f}M", d / 1e6);
  if (v >= 1000ull) return fmt::format("{:.2f}K", d / 1e3);
  return std::to_string(v);
}

}  // namespace gguf
