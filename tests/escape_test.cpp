// Untrusted strings from files: terminal escaping, JSON-safe UTF-8 and the UTF-8 validator.
#include "gguf/base/escape.h"

#include <gtest/gtest.h>

#include <string>

#include "gguf/format/file.h"

namespace gguf {
namespace {

using namespace std::string_literals;

TEST(escape, printable_ascii_and_utf8_pass_through) {
  EXPECT_EQ(escape_for_terminal("blk.0.attn_q.weight"), "blk.0.attn_q.weight");
  EXPECT_EQ(escape_for_terminal("h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80"),
            "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(escape_for_terminal(""), "");
  // U+00A0 is the first code point after the C1 block; U+10FFFF the last one.
  EXPECT_EQ(escape_for_terminal("\xc2\xa0"), "\xc2\xa0");
  EXPECT_EQ(escape_for_terminal("\xf4\x8f\xbf\xbf"), "\xf4\x8f\xbf\xbf");
}

TEST(escape, control_characters_are_escaped) {
  EXPECT_EQ(escape_for_terminal("a\nb\tc"), "a\\nb\\tc");
  EXPECT_EQ(escape_for_terminal("\r"), "\\x0d");
  EXPECT_EQ(escape_for_terminal("\x07\x08"), "\\x07\\x08");
  EXPECT_EQ(escape_for_terminal("a\0b"s), "a\\x00b");
  EXPECT_EQ(escape_for_terminal("\x7f"), "\\x7f");
  EXPECT_EQ(escape_for_terminal("\x1f"), "\\x1f");
}

TEST(escape, backslash_is_doubled_so_escapes_are_unambiguous) {
  EXPECT_EQ(escape_for_terminal("a\\x1b"), "a\\\\x1b");
  EXPECT_NE(escape_for_terminal("\\x1b"), escape_for_terminal("\x1b"));
}

TEST(escape, terminal_safe_escapes_only_what_a_terminal_acts_on) {
  // A message whose untrusted parts are escaped already comes back as it is: its newlines, tabs
  // and backslashes are the message's own.
  const std::string ok = "m.gguf: tensor 'a\\x1b': bad\n\tsecond line";
  EXPECT_EQ(terminal_safe(ok), ok);
  EXPECT_EQ(terminal_safe("h\xc3\xa9llo"), "h\xc3\xa9llo");
  // What escaping missed is caught: controls, DEL, invalid UTF-8, C1, bidi overrides.
  EXPECT_EQ(terminal_safe("copying from 'e\x1b[31md' failed\r"),
            "copying from 'e\\x1b[31md' failed\\x0d");
  EXPECT_EQ(terminal_safe("\x7f\xff\xc2\x9b\xe2\x80\xae"), "\\x7f\\xff\\u{009b}\\u{202e}");
}

TEST(escape, esc_sequences_lose_their_escape_byte) {
  EXPECT_EQ(escape_for_terminal("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
  // OSC 8 hyperlink and a title-setting sequence.
  EXPECT_EQ(escape_for_terminal("\x1b]8;;http://x\x1b\\"), "\\x1b]8;;http://x\\x1b\\\\");
  EXPECT_EQ(escape_for_terminal("\x1b]0;title\x07"), "\\x1b]0;title\\x07");
}

TEST(escape, c1_controls_are_escaped) {
  // U+009B is the one-character CSI; U+0085 NEL; U+0080 and U+009F bound the block.
  EXPECT_EQ(escape_for_terminal("\xc2\x9b"
                                "31m"),
            "\\u{009b}31m");
  EXPECT_EQ(escape_for_terminal("\xc2\x85"), "\\u{0085}");
  EXPECT_EQ(escape_for_terminal("\xc2\x80\xc2\x9f"), "\\u{0080}\\u{009f}");
  // The raw byte 0x9b is not UTF-8: escaped as a byte.
  EXPECT_EQ(escape_for_terminal("\x9b"
                                "31m"),
            "\\x9b31m");
}

TEST(escape, bidi_overrides_are_escaped) {
  EXPECT_EQ(escape_for_terminal("\xe2\x80\xaa"), "\\u{202a}");  // LRE
  EXPECT_EQ(escape_for_terminal("\xe2\x80\xae"
                                "gpj.exe"),
            "\\u{202e}gpj.exe");                                                     // RLO
  EXPECT_EQ(escape_for_terminal("\xe2\x81\xa6\xe2\x81\xa9"), "\\u{2066}\\u{2069}");  // LRI PDI
  // Neighbours of the override ranges are ordinary characters.
  EXPECT_EQ(escape_for_terminal("\xe2\x80\xa9"), "\xe2\x80\xa9");  // U+2029
  EXPECT_EQ(escape_for_terminal("\xe2\x80\xaf"), "\xe2\x80\xaf");  // U+202F
  EXPECT_EQ(escape_for_terminal("\xe2\x81\xa5"), "\xe2\x81\xa5");  // U+2065
  EXPECT_EQ(escape_for_terminal("\xe2\x81\xaa"), "\xe2\x81\xaa");  // U+206A
}

TEST(escape, invalid_utf8_is_escaped_byte_by_byte) {
  EXPECT_EQ(escape_for_terminal("\x80"), "\\x80");             // lone continuation
  EXPECT_EQ(escape_for_terminal("\xff\xfe"), "\\xff\\xfe");    // never valid
  EXPECT_EQ(escape_for_terminal("a\xe2\x82"), "a\\xe2\\x82");  // truncated at the end
  EXPECT_EQ(escape_for_terminal("\xe2\x82z"), "\\xe2\\x82z");  // interrupted sequence
  // Overlong encodings of '/' and of NUL.
  EXPECT_EQ(escape_for_terminal("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(escape_for_terminal("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");
  EXPECT_EQ(escape_for_terminal("\xf0\x80\x80\xaf"), "\\xf0\\x80\\x80\\xaf");
  EXPECT_EQ(escape_for_terminal("\xc0\x80"), "\\xc0\\x80");
  // UTF-16 surrogates and code points past U+10FFFF.
  EXPECT_EQ(escape_for_terminal("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(escape_for_terminal("\xed\xbf\xbf"), "\\xed\\xbf\\xbf");
  EXPECT_EQ(escape_for_terminal("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
  EXPECT_EQ(escape_for_terminal("\xf8\x88\x80\x80\x80"), "\\xf8\\x88\\x80\\x80\\x80");
  // A valid character right after an invalid byte survives.
  EXPECT_EQ(escape_for_terminal("\xc3\xc3\xa9"), "\\xc3\xc3\xa9");
}

TEST(escape, output_never_contains_control_bytes) {
  // Every single byte and every two-byte pair: no C0 control, DEL or C1 reaches the output.
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; b += (a < 0xc0 ? 255 : 1)) {
      const std::string in{static_cast<char>(a), static_cast<char>(b)};
      const std::string out = escape_for_terminal(in);
      EXPECT_TRUE(is_valid_utf8(out)) << a << " " << b;
      for (size_t i = 0; i < out.size(); ++i) {
        const auto c = static_cast<unsigned char>(out[i]);
        EXPECT_FALSE(c < 0x20 || c == 0x7f) << a << " " << b;
        if (c == 0xc2 && i + 1 < out.size()) {
          EXPECT_FALSE(static_cast<unsigned char>(out[i + 1]) < 0xa0) << a << " " << b;
        }
      }
    }
  }
}

TEST(escape, utf8_or_escaped_keeps_valid_text_unchanged) {
  EXPECT_EQ(utf8_or_escaped("plain"), "plain");
  // Controls are valid UTF-8: the JSON encoder escapes them, not this function.
  EXPECT_EQ(utf8_or_escaped("a\n\x1b[0m"), "a\n\x1b[0m");
  // A backslash is doubled, so the text \xff and the byte 0xff stay apart.
  EXPECT_EQ(utf8_or_escaped("a\\xff"), "a\\\\xff");
  EXPECT_NE(utf8_or_escaped("\\xff"), utf8_or_escaped("\xff"));
  EXPECT_EQ(utf8_or_escaped("\xe2\x80\xae\xc2\x9b"), "\xe2\x80\xae\xc2\x9b");
  EXPECT_EQ(utf8_or_escaped("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");
}

TEST(escape, utf8_or_escaped_escapes_each_invalid_byte) {
  EXPECT_EQ(utf8_or_escaped("a\xff"
                            "b"),
            "a\\xffb");
  EXPECT_EQ(utf8_or_escaped("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(utf8_or_escaped("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(utf8_or_escaped("\xe2\x82"), "\\xe2\\x82");
  EXPECT_EQ(utf8_or_escaped("\x80\xc3\xa9"), "\\x80\xc3\xa9");
  EXPECT_TRUE(is_valid_utf8(utf8_or_escaped("\xf5\x80\x80\x80\xfe")));
}

TEST(escape, is_valid_utf8) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("ascii \x01\x7f"));
  EXPECT_TRUE(is_valid_utf8("\0"s));
  EXPECT_TRUE(is_valid_utf8("\xc2\x80"));          // U+0080, smallest 2-byte
  EXPECT_TRUE(is_valid_utf8("\xdf\xbf"));          // U+07FF
  EXPECT_TRUE(is_valid_utf8("\xe0\xa0\x80"));      // U+0800, smallest 3-byte
  EXPECT_TRUE(is_valid_utf8("\xed\x9f\xbf"));      // U+D7FF, just below the surrogates
  EXPECT_TRUE(is_valid_utf8("\xee\x80\x80"));      // U+E000, just above them
  EXPECT_TRUE(is_valid_utf8("\xef\xbf\xbf"));      // U+FFFF
  EXPECT_TRUE(is_valid_utf8("\xf0\x90\x80\x80"));  // U+10000, smallest 4-byte
  EXPECT_TRUE(is_valid_utf8("\xf4\x8f\xbf\xbf"));  // U+10FFFF

  EXPECT_FALSE(is_valid_utf8("\x80"));
  EXPECT_FALSE(is_valid_utf8("\xc1\xbf"));          // overlong U+007F
  EXPECT_FALSE(is_valid_utf8("\xe0\x9f\xbf"));      // overlong U+07FF
  EXPECT_FALSE(is_valid_utf8("\xf0\x8f\xbf\xbf"));  // overlong U+FFFF
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // U+D800
  EXPECT_FALSE(is_valid_utf8("\xed\xbf\xbf"));      // U+DFFF
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // U+110000
  EXPECT_FALSE(is_valid_utf8("\xf7\xbf\xbf\xbf"));
  EXPECT_FALSE(is_valid_utf8("\xc2"));  // truncated
  EXPECT_FALSE(is_valid_utf8("\xf0\x90\x80"));
  EXPECT_FALSE(is_valid_utf8("\xe2\x28\xa1"));  // bad continuation
  EXPECT_FALSE(is_valid_utf8("ok\xfe"));
}

// Names in messages are quoted; a quote or backslash inside cannot end the quotes early or
// make two names look alike.
TEST(escape, names_in_messages_escape_quotes) {
  EXPECT_EQ(tensor_object("blk.0.attn_q.weight"), "tensor 'blk.0.attn_q.weight'");
  EXPECT_EQ(tensor_object("it's"), "tensor 'it\\'s'");
  EXPECT_EQ(key_object("a\\'b"), "key 'a\\\\\\'b'");
  EXPECT_EQ(key_object("x\x1b[31m'"), "key 'x\\x1b[31m\\''");
  EXPECT_EQ(tensor_object(std::string(150, '\'')).substr(0, 12), "tensor '\\'\\'");
  EXPECT_NE(tensor_object(std::string(150, 'a')).find("...' (150 bytes)"), std::string::npos);
}

// The inverse of utf8_or_escaped gives back any byte string; text it did not write (a lone or
// trailing backslash, a short or bad \x) stays as it is.
TEST(escape, from_utf8_or_escaped_inverts_it) {
  for (const std::string& s :
       {std::string(""), std::string("plain"), std::string("a\\b"), std::string("\\x41"),
        std::string("\xff\xfe\\\\"), std::string("tail\\"), std::string("\0mid\x80", 5),
        std::string("\xe2\x80\xae")})
    EXPECT_EQ(from_utf8_or_escaped(utf8_or_escaped(s)), s) << utf8_or_escaped(s);
  EXPECT_EQ(from_utf8_or_escaped("\\x4"), "\\x4");
  EXPECT_EQ(from_utf8_or_escaped("\\xZZ"), "\\xZZ");
  EXPECT_EQ(from_utf8_or_escaped("\\XfF\\xfF"), "\\XfF\xff");
  EXPECT_EQ(from_utf8_or_escaped("end\\"), "end\\");
  EXPECT_EQ(from_utf8_or_escaped("\\\\\\"), "\\\\");
}

// JSON printed on a terminal: DEL, C1 controls and bidi overrides become \u escapes (the
// dump already escapes the controls below 0x20); other text, valid or not, is left alone.
TEST(escape, json_for_terminal) {
  EXPECT_EQ(escape_json_for_terminal("{\"a\": \"x\x7f\xc2\x9b\xe2\x80\xae\xe2\x81\xa6y\"}"),
            "{\"a\": \"x\\u007f\\u009b\\u202e\\u2066y\"}");
  EXPECT_EQ(escape_json_for_terminal("{\"\xc3\xa9\xe4\xb8\xad\": 1}"),
            "{\"\xc3\xa9\xe4\xb8\xad\": 1}");
  EXPECT_EQ(escape_json_for_terminal("\xff\xc2"), "\xff\xc2");
}

}  // namespace
}  // namespace gguf
