// Metadata edits (gguf-splice --set, --set-file, --delete) as library functions: parsing the
// option values, typed values with range checks, and the refusals that keep a file loadable.
#include "gguf/ops/metadata_edit.h"

#include <gtest/gtest.h>

#include <fstream>
#include <limits>

#include "cli_run.h"
#include "gguf/base/error.h"

namespace gguf {
namespace {

std::string error_of(const auto& f) {
  try {
    f();
  } catch (const Error& e) {
    return std::string(e.kind() == Error::Kind::kUsage ? "usage: " : "input: ") + e.what();
  }
  return "(no error)";
}

// A llama-shaped metadata set.
Metadata base_metadata() {
  Metadata m;
  m.set("general.architecture", Value::string("llama"));
  m.set("general.name", Value::string("tiny"));
  m.set("llama.block_count", Value::u32(2));
  m.set("llama.context_length", Value::u32(256));
  m.set("llama.rope.freq_base", Value::f32(10000));
  m.set("tokenizer.ggml.model", Value::string("llama"));
  m.set("tokenizer.ggml.tokens", Value::string_array({"a", "b"}));
  m.set("some.ints", Value::array_of<int32_t>(ValueType::kI32, std::vector<int32_t>{1, 2}));
  m.set("some.flag", Value::boolean(false));
  return m;
}

MetadataEdits edits(std::vector<std::string> sets, std::vector<std::string> deletes = {},
                    bool force = false) {
  return parse_edits(sets, {}, deletes, force);
}

Metadata applied(const MetadataEdits& e) {
  Metadata m = base_metadata();
  apply_metadata_edits(m, e, "llama", "base.gguf");
  return m;
}

std::string refusal(const MetadataEdits& e) {
  return error_of([&] { applied(e); });
}

TEST(metadata_edit, parses_the_three_set_forms) {
  KeyEdit e = parse_set("general.name=a=b");
  EXPECT_EQ(e.key, "general.name");
  EXPECT_FALSE(e.type);
  EXPECT_EQ(e.text, "a=b");  // the first '=' ends the key
  e = parse_set("my.count:u16=7");
  EXPECT_EQ(e.key, "my.count");
  EXPECT_EQ(e.type, ValueType::kU16);
  e = parse_set("my.list:[str]=a,b");
  EXPECT_EQ(e.type, ValueType::kArray);
  EXPECT_EQ(e.element, ValueType::kString);
  EXPECT_EQ(parse_set("k:string=x").type, ValueType::kString);
  EXPECT_EQ(parse_set("k=").text, "");
  e = parse_set("tokenizer.chat_template=t.jinja", true);
  EXPECT_EQ(e.kind, KeyEdit::Kind::kSetFile);
  EXPECT_EQ(e.text, "t.jinja");
  EXPECT_EQ(parse_delete("a.b").kind, KeyEdit::Kind::kDelete);
}

TEST(metadata_edit, refuses_bad_set_values) {
  EXPECT_EQ(error_of([] { parse_set("general.name"); }),
            "usage: invalid --set value 'general.name': expected KEY=VALUE, KEY:TYPE=VALUE or "
            "KEY:[TYPE]=V1,V2");
  EXPECT_EQ(error_of([] { parse_set("k", true); }),
            "usage: invalid --set-file value 'k': expected KEY=PATH, KEY:str=PATH or "
            "KEY:[TYPE]=PATH");
  EXPECT_EQ(error_of([] { parse_set("my.x:u9=1"); }),
            "usage: key 'my.x': unknown type 'u9' (GGUF's types: u8, i8, u16, i16, u32, i32, u64, "
            "i64, f32, f64, bool, str; [TYPE] for an array)");
  EXPECT_EQ(error_of([] { parse_set("my.x:[array]=1"); }),
            "usage: key 'my.x': unknown type '[array]' (GGUF's types: u8, i8, u16, i16, u32, i32, "
            "u64, i64, f32, f64, bool, str; [TYPE] for an array)");
  EXPECT_EQ(error_of([] { parse_set("=1"); }), "usage: empty key");
  EXPECT_EQ(error_of([] { parse_set(":u8=1"); }), "usage: empty key");
  EXPECT_EQ(error_of([] { parse_delete(""); }), "usage: empty key");
  EXPECT_EQ(error_of([] { parse_set(std::string("a\0b=1", 5)); }),
            "usage: key 'a\\x00b': holds a NUL byte (at byte 1)");
  EXPECT_EQ(error_of([] { parse_delete(std::string(65536, 'k')); }),
            "usage: key of 65536 bytes ('kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...'): a key holds at "
            "most 65535 bytes");
  EXPECT_NO_THROW(parse_delete(std::string(65535, 'k')));
  EXPECT_EQ(error_of([] { parse_set("k:u32=t", true); }),
            "usage: key 'k': --set-file reads a str or an array, not a u32 (use --set)");
}

TEST(metadata_edit, integers_are_range_checked) {
  EXPECT_EQ(parse_scalar("k", ValueType::kU8, "255").as_uint(), 255u);
  EXPECT_EQ(parse_scalar("k", ValueType::kI8, "-128").as_int(), -128);
  EXPECT_EQ(parse_scalar("k", ValueType::kI16, "+12").as_int(), 12);
  EXPECT_EQ(parse_scalar("k", ValueType::kU32, "-0").as_uint(), 0u);
  EXPECT_EQ(parse_scalar("k", ValueType::kU64, "18446744073709551615").as_uint(),
            std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(parse_scalar("k", ValueType::kI64, "-9223372036854775808").as_int(),
            std::numeric_limits<int64_t>::min());
  // Bits as the reader holds them: a negative i8 is one byte, not sign-extended.
  EXPECT_EQ(parse_scalar("k", ValueType::kI8, "-1"), Value::i8(-1));
  const auto err = [](ValueType t, const char* text) {
    return error_of([&] { parse_scalar("my.k", t, text); });
  };
  EXPECT_EQ(err(ValueType::kU8, "256"),
            "usage: key 'my.k': value '256' is out of range for u8 (0 to 255)");
  EXPECT_EQ(err(ValueType::kU8, "-1"),
            "usage: key 'my.k': value '-1' is out of range for u8 (0 to 255)");
  EXPECT_EQ(err(ValueType::kI16, "40000"),
            "usage: key 'my.k': value '40000' is out of range for i16 (-32768 to 32767)");
  EXPECT_EQ(err(ValueType::kU64, "18446744073709551616"),
            "usage: key 'my.k': value '18446744073709551616' is out of range for u64 (0 to "
            "18446744073709551615)");
  EXPECT_EQ(err(ValueType::kU32, "1.5"),
            "usage: key 'my.k': value '1.5' is not a u32 (a whole number from 0 to 4294967295)");
  EXPECT_EQ(err(ValueType::kI32, ""),
            "usage: key 'my.k': value '' is not an i32 (a whole number from -2147483648 to "
            "2147483647)");
  EXPECT_EQ(err(ValueType::kU32, " 1"),
            "usage: key 'my.k': value ' 1' is not a u32 (a whole number from 0 to 4294967295)");
}

TEST(metadata_edit, floats_bools_and_strings) {
  EXPECT_EQ(parse_scalar("k", ValueType::kF32, "0.1"), Value::f32(0.1f));
  EXPECT_EQ(parse_scalar("k", ValueType::kF64, "0.1"), Value::f64(0.1));
  EXPECT_EQ(parse_scalar("k", ValueType::kF64, "-1e-320").as_double(), -1e-320);
  EXPECT_EQ(parse_scalar("k", ValueType::kF32, "1e-50").as_double(), 0.0);  // underflow rounds
  EXPECT_EQ(parse_scalar("k", ValueType::kF32, "inf").as_double(),
            std::numeric_limits<double>::infinity());
  EXPECT_EQ(error_of([] { parse_scalar("k", ValueType::kF32, "1e39"); }),
            "usage: key 'k': value '1e39' is out of range for f32 (magnitude at most "
            "3.4028235e+38)");
  EXPECT_EQ(error_of([] { parse_scalar("k", ValueType::kF64, "1e309"); }),
            "usage: key 'k': value '1e309' is out of range for f64 (magnitude at most "
            "1.7976931348623157e+308)");
  EXPECT_EQ(error_of([] { parse_scalar("k", ValueType::kF32, "1,5"); }),
            "usage: key 'k': value '1,5' is not an f32");
  // Hexadecimal floats, as strtod reads them.
  EXPECT_EQ(parse_scalar("k", ValueType::kF64, "0x1p3"), Value::f64(8.0));
  EXPECT_EQ(parse_scalar("k", ValueType::kF32, "-0X1.8P1"), Value::f32(-3.0f));
  EXPECT_EQ(parse_scalar("k", ValueType::kF64, "+0x.8"), Value::f64(0.5));
  EXPECT_EQ(error_of([] { parse_scalar("k", ValueType::kF64, "0x-1p3"); }),
            "usage: key 'k': value '0x-1p3' is not an f64");
  EXPECT_EQ(error_of([] { parse_scalar("k", ValueType::kF64, "0x"); }),
            "usage: key 'k': value '0x' is not an f64");
  EXPECT_EQ(error_of([] { parse_scalar("k", ValueType::kF32, "0x1p200"); }),
            "usage: key 'k': value '0x1p200' is out of range for f32 (magnitude at most "
            "3.4028235e+38)");
  EXPECT_EQ(parse_scalar("k", ValueType::kBool, "true"), Value::boolean(true));
  EXPECT_EQ(parse_scalar("k", ValueType::kBool, "0"), Value::boolean(false));
  EXPECT_EQ(error_of([] { parse_scalar("k", ValueType::kBool, "yes"); }),
            "usage: key 'k': value 'yes' is not a bool (true, false, 1 or 0)");
  EXPECT_EQ(parse_scalar("k", ValueType::kString, std::string("a\0\n", 3)),
            Value::string(std::string("a\0\n", 3)));
}

TEST(metadata_edit, arrays_from_a_list_or_lines) {
  EXPECT_EQ(parse_array("k", ValueType::kI32, "1, -2,3"),
            Value::array_of<int32_t>(ValueType::kI32, std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(parse_array("k", ValueType::kU8, ""), Value::scalar_array(ValueType::kU8, {}));
  EXPECT_EQ(parse_array("k", ValueType::kString, "a\\,b,c\\\\,"),
            Value::string_array({"a,b", "c\\", ""}));
  EXPECT_EQ(parse_array("k", ValueType::kString, "x,y\n\nz\n", true),
            Value::string_array({"x,y", "", "z"}));
  EXPECT_EQ(parse_array("k", ValueType::kBool, "true\n0", true),
            Value::array_of<uint8_t>(ValueType::kBool, std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(error_of([] { parse_array("k", ValueType::kU8, "1,300"); }),
            "usage: key 'k': element 1: value '300' is out of range for u8 (0 to 255)");
}

TEST(metadata_edit, existing_keys_keep_their_type_and_place) {
  const Metadata m = applied(edits({"general.name=New", "llama.context_length=4096",
                                    "some.ints=5,6,7", "some.flag=true", "my.new:f64=2.5"}));
  const Metadata b = base_metadata();
  ASSERT_EQ(m.size(), b.size() + 1);
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(m.entries()[i].key, b.entries()[i].key);
  EXPECT_EQ(*m.find("general.name"), Value::string("New"));
  EXPECT_EQ(*m.find("llama.context_length"), Value::u32(4096));
  EXPECT_EQ(*m.find("some.ints"),
            Value::array_of<int32_t>(ValueType::kI32, std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(*m.find("some.flag"), Value::boolean(true));
  EXPECT_EQ(m.entries().back().key, "my.new");
  EXPECT_EQ(m.entries().back().value, Value::f64(2.5));
  // A type that does not fit the key's value is refused in that type's terms.
  EXPECT_EQ(refusal(edits({"llama.block_count=-1"})),
            "usage: key 'llama.block_count': value '-1' is out of range for u32 (0 to "
            "4294967295)");
}

TEST(metadata_edit, set_file_takes_bytes_as_they_are) {
  testing::TempDir dir;
  const std::string tmpl = dir.file("t.jinja"), lines = dir.file("tokens.txt");
  const std::string bytes("{% for m in messages %}\r\n\x01\xff\0end", 30);
  std::ofstream(tmpl, std::ios::binary) << bytes;
  std::ofstream(lines, std::ios::binary) << "x\ny\n";
  const std::string numbers = dir.file("n.txt");
  std::ofstream(numbers, std::ios::binary) << "7\n8";
  Metadata m = base_metadata();
  apply_metadata_edits(m,
                       parse_edits({},
                                   {"tokenizer.chat_template=" + tmpl, "general.name=" + tmpl,
                                    "tokenizer.ggml.tokens=" + lines, "my.l:[u8]=" + numbers},
                                   {}, false),
                       "llama", "base.gguf");
  EXPECT_EQ(*m.find("tokenizer.chat_template"), Value::string(bytes));
  EXPECT_EQ(*m.find("general.name"), Value::string(bytes));
  EXPECT_EQ(*m.find("tokenizer.ggml.tokens"), Value::string_array({"x", "y"}));
  EXPECT_EQ(*m.find("my.l"), Value::array_of<uint8_t>(ValueType::kU8, std::vector<uint8_t>{7, 8}));
  const std::string missing = dir.file("none.txt");
  EXPECT_EQ(error_of([&] {
              Metadata x = base_metadata();
              apply_metadata_edits(x, parse_edits({}, {"k=" + missing}, {}, false), "llama", "b");
            }),
            "input: " + missing + ": cannot open: No such file or directory");
  EXPECT_EQ(error_of([&] {
              Metadata x = base_metadata();
              apply_metadata_edits(x, parse_edits({}, {"llama.block_count=" + tmpl}, {}, false),
                                   "llama", "base.gguf");
            }),
            "usage: base.gguf: key 'llama.block_count': is a u32; --set-file reads a str or an "
            "array (use --set)");
}

TEST(metadata_edit, layout_and_provenance_keys_are_not_edits) {
  EXPECT_EQ(refusal(edits({"general.alignment=64"})),
            "usage: key 'general.alignment': a layout key, set with --align");
  EXPECT_EQ(refusal(edits({}, {"split.count"})),
            "usage: key 'split.count': a layout key, written for split outputs "
            "(--split-max-size, --split-max-tensors, --keep-split)");
  EXPECT_EQ(refusal(edits({"split.no:u16=0"}, {}, true)),
            "usage: key 'split.no': a layout key, written for split outputs (--split-max-size, "
            "--split-max-tensors, --keep-split)");
  EXPECT_EQ(refusal(edits({"splice.base=x"})),
            "usage: key 'splice.base': written by gguf-splice as the splice's provenance");
}

TEST(metadata_edit, conflicting_and_pointless_edits) {
  EXPECT_EQ(refusal(edits({"general.name=a"}, {"general.name"})),
            "usage: key 'general.name': both set and deleted (--set and --delete of one key)");
  EXPECT_EQ(refusal(edits({"general.name=a", "general.name:str=b"})),
            "usage: key 'general.name': set twice");
  EXPECT_EQ(refusal(edits({}, {"some.flag", "some.flag"})),
            "usage: key 'some.flag': deleted twice");
  EXPECT_EQ(refusal(edits({}, {"no.such"})),
            "usage: base.gguf: key 'no.such': not in the file; nothing to delete");
  EXPECT_EQ(refusal(edits({"no.such=1"})),
            "usage: base.gguf: key 'no.such': not in the file; a new key needs its type (--set "
            "no.such:TYPE=VALUE)");
}

TEST(metadata_edit, keys_llama_cpp_needs_are_kept_unless_forced) {
  EXPECT_EQ(refusal(edits({}, {"general.architecture"})),
            "usage: key 'general.architecture': llama.cpp chooses the model's code by it; "
            "--force-keys deletes it anyway");
  EXPECT_EQ(refusal(edits({}, {"llama.block_count"})),
            "usage: key 'llama.block_count': llama.cpp's loader refuses a model without it; "
            "--force-keys deletes it anyway");
  EXPECT_EQ(refusal(edits({}, {"tokenizer.ggml.tokens"})),
            "usage: key 'tokenizer.ggml.tokens': it is the vocabulary llama.cpp loads; "
            "--force-keys deletes it anyway");
  EXPECT_EQ(refusal(edits({"llama.block_count:i32=2"})),
            "usage: key 'llama.block_count': llama.cpp reads it as u32, not i32; --force-keys "
            "sets it anyway");
  EXPECT_EQ(refusal(edits({"general.architecture:u8=1"})),
            "usage: key 'general.architecture': llama.cpp reads it as str, not u8; --force-keys "
            "sets it anyway");
  EXPECT_EQ(refusal(edits({"tokenizer.ggml.tokens:[u8]=1"})),
            "usage: key 'tokenizer.ggml.tokens': llama.cpp reads it as [str], not [u8]; "
            "--force-keys sets it anyway");
  // A new key llama.cpp reads must have its type too.
  EXPECT_EQ(refusal(edits({"llama.expert_count:u64=8"})),
            "usage: key 'llama.expert_count': llama.cpp reads it as u32, not u64; --force-keys "
            "sets it anyway");
  EXPECT_EQ(refusal(edits({"llama.feed_forward_length:[f32]=1"})),
            "usage: key 'llama.feed_forward_length': llama.cpp reads it as u32, [u32], [i32] or "
            "[bool] (one per layer), not [f32]; --force-keys sets it anyway");
  // Allowed: the type llama.cpp reads, keys it does not read, and anything with --force-keys.
  EXPECT_EQ(*applied(edits({"llama.expert_count:u32=8"})).find("llama.expert_count"),
            Value::u32(8));
  EXPECT_EQ(*applied(edits({"some.flag:u8=1"})).find("some.flag"), Value::u8(1));
  EXPECT_EQ(refusal(edits({"general.name:u8=1"})),
            "usage: key 'general.name': llama.cpp reads it as str, not u8; --force-keys sets it "
            "anyway");
  EXPECT_EQ(
      *applied(edits({"llama.feed_forward_length:[i32]=1,2"})).find("llama.feed_forward_length"),
      Value::array_of<int32_t>(ValueType::kI32, std::vector<int32_t>{1, 2}));
  const Metadata forced =
      applied(edits({"llama.block_count:i32=2"}, {"general.architecture"}, true));
  EXPECT_EQ(*forced.find("llama.block_count"), Value::i32(2));
  EXPECT_FALSE(forced.find("general.architecture"));
}

TEST(metadata_edit, describe_edits_names_each_one) {
  EXPECT_EQ(describe_edits(parse_edits({"a=1"}, {"b=p"}, {"c"}, false)),
            (std::vector<std::string>{"set a", "set b", "delete c"}));
}

}  // namespace
}  // namespace gguf
