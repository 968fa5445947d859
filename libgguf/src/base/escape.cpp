// Escaping of untrusted strings for terminals and JSON.
#include "gguf/base/escape.h"

#include <fmt/format.h>

#include <cstdint>

namespace gguf {
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not valid; cp receives the
// code point.
size_t utf8_seq(std::string_view s, size_t i, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  size_t n;
  uint32_t min;
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// Code points above ASCII's controls that a terminal acts on or that reorder what it shows:
// DEL, the C1 controls (CSI is 0x9B) and the bidi marks, embeddings, overrides and isolates.
bool acts_on_terminal(uint32_t cp) {
  return cp == 0x7F || (cp >= 0x80 && cp < 0xA0) || cp == 0x061C || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string escape_json_for_terminal(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  for (size_t i = 0; i < json.size();) {
    uint32_t cp;
    const size_t n = utf8_seq(json, i, cp);
    if (n > 0 && acts_on_terminal(cp)) {
      out += fmt::format("\\u{:04x}", cp);
    } else {
      out.append(json.substr(i, n ? n : 1));
    }
    i += n ? n : 1;
  }
  return out;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t n = utf8_seq(s, i, cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

namespace {

std::string escape_terminal(std::string_view s, bool whole) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t n = utf8_seq(s, i, cp);
    if (n == 0) {
      out += fmt::format("\\x{:02x}", static_cast<uint8_t>(s[i]));
      ++i;
      continue;
    }
    if (!whole && (cp == '\n' || cp == '\t' || cp == '\\')) {
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\\') {
      out += "\\\\";
    } else if (cp < 0x20 || cp == 0x7F) {
      out += fmt::format("\\x{:02x}", cp);
    } else if (acts_on_terminal(cp)) {
      // C1 controls include CSI (0x9B); bidi overrides can make text display reordered.
      out += fmt::format("\\u{{{:04x}}}", cp);
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace

std::string escape_for_terminal(std::string_view s) { return escape_terminal(s, true); }

std::string terminal_safe(std::string_view message) { return escape_terminal(message, false); }

std::string message_for_json(std::string_view message) {
  return is_valid_utf8(message) ? std::string(message) : utf8_or_escaped(message);
}

std::string utf8_or_escaped(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t n = utf8_seq(s, i, cp);
    if (n == 0) {
      out += fmt::format("\\x{:02x}", static_cast<uint8_t>(s[i]));
      ++i;
    } else if (cp == '\\') {
      out += "\\\\";  // so that a literal "\xff" cannot pass for the byte 0xff
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string from_utf8_or_escaped(std::string_view s) {
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '\\') {
      out += '\\';
      ++i;
    } else if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] == 'x' && hex(s[i + 2]) >= 0 &&
               hex(s[i + 3]) >= 0) {
      out += static_cast<char>(hex(s[i + 2]) * 16 + hex(s[i + 3]));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace gguf
