// Strings from a file are untrusted: these make them safe for terminals and JSON.
#pragma once

#include <string>
#include <string_view>

namespace gguf {

// Printable ASCII and valid UTF-8 (except C1 controls and bidi overrides) pass through;
// everything else becomes \n, \t, \\, \xNN or \u{NNNN}, so no control sequence from a file
// reaches a terminal.
std::string escape_for_terminal(std::string_view s);

// Valid UTF-8 passes through unchanged except the backslash, which is doubled; each byte of
// an invalid sequence becomes the four characters "\xNN". So the JSON document stays valid,
// no byte is lost silently, and different byte strings never look the same (the raw byte
// 0xff is "\xff", the four characters \xff are "\\xff").
std::string utf8_or_escaped(std::string_view s);

// The inverse of utf8_or_escaped: "\\" becomes one backslash and "\xNN" the byte NN; any other
// backslash (text not written by utf8_or_escaped) is kept as it is.
std::string from_utf8_or_escaped(std::string_view s);

// True when s is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace gguf
