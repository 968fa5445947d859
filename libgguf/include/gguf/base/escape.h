// Strings from a file are untrusted: these make them safe for terminals and JSON.
#pragma once

#include <string>
#include <string_view>

namespace gguf {

// Printable ASCII and valid UTF-8 (except C1 controls and bidi overrides) pass through;
// everything else becomes \n, \t, \\, \xNN or \u{NNNN}, so no control sequence from a file
// reaches a terminal.
std::string escape_for_terminal(std::string_view s);

// A message for a terminal whose untrusted parts should already be escaped: a safety net that
// escapes what escape_for_terminal would (invalid UTF-8, controls, DEL, C1, bidi) except the
// newline, the tab and the backslash, which the message's own text may hold. Text without such
// bytes comes back unchanged.
std::string terminal_safe(std::string_view message);

// Valid UTF-8 passes through unchanged except the backslash, which is doubled; each byte of
// an invalid sequence becomes the four characters "\xNN". So the JSON document stays valid,
// no byte is lost silently, and different byte strings never look the same (the raw byte
// 0xff is "\xff", the four characters \xff are "\\xff").
std::string utf8_or_escaped(std::string_view s);

// A message for a JSON document: messages already name untrusted bytes escaped for a terminal,
// so they pass as they are (the same text as on stderr); only invalid UTF-8, which a message
// built without escaping might hold, goes through utf8_or_escaped.
std::string message_for_json(std::string_view message);

// The inverse of utf8_or_escaped: "\\" becomes one backslash and "\xNN" the byte NN; any other
// backslash (text not written by utf8_or_escaped) is kept as it is.
std::string from_utf8_or_escaped(std::string_view s);

// A JSON text (as nlohmann::json::dump writes it: control characters below 0x20 already
// escaped) with the other code points a terminal acts on escaped as \uXXXX too: DEL, C1
// controls, bidi overrides. Still the same JSON document; safe to print on a terminal.
std::string escape_json_for_terminal(std::string_view json);

// True when s is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace gguf
