// splice(): every refusal, each with its exact message, and the --take selector syntax.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "splice_test_util.h"

namespace gguf {
namespace {

using splice_test::copy_plan;
using splice_test::fx;
using splice_test::kind_of;
using splice_test::message_of;
using splice_test::Scratch;
using splice_test::selector;

const std::string kRouted = "role routed-gate|routed-up|routed-down";

SpliceResult splice_one(const Model& base, const Model& donor, Selector s, SpliceOptions o = {}) {
  const Donor d{&donor, std::move(s)};
  return splice(base, std::span<const Donor>(&d, 1), o);
}

// A donor variant: the fixture donor copied with edit applied to its plan.
std::string variant(const Scratch& dir, const std::string& name,
                    const std::function<void(Plan&)>& edit) {
  const Model donor = Model::open(fx().donor);
  Plan p = copy_plan(donor);
  edit(p);
  const std::string path = dir.file(name);
  write_plan(p, path, {});
  return path;
}

TEST(splice_errors, selected_tensor_missing_in_donor) {
  Scratch dir;
  const std::string path = variant(dir, "d.gguf", [](Plan& p) {
    std::erase_if(p.tensors, [](const auto& t) { return t.name == "blk.4.ffn_up_exps.weight"; });
  });
  const Model base = Model::open(fx().base), donor = Model::open(path);
  EXPECT_EQ(message_of([&] { splice_one(base, donor, selector({"3-5"})); }),
            fmt::format("{}: tensor 'blk.4.ffn_up_exps.weight': selected in the base (layers 3-5, "
                        "{}) but missing from the donor",
                        path, kRouted));
}

TEST(splice_errors, shape_mismatch) {
  Scratch dir;
  const std::string path = variant(dir, "d.gguf", [](Plan& p) {
    for (auto& t : p.tensors)
      if (t.name == "blk.3.ffn_down_exps.weight") t.shape = {128, 512, 4};  // same byte count
  });
  const Model base = Model::open(fx().base), donor = Model::open(path);
  // The shape starts at n_dims, after the name's length and bytes.
  const TensorInfo& info = *donor.find("blk.3.ffn_down_exps.weight")->info;
  const uint64_t at = info.info_offset + 8 + info.name.size();
  EXPECT_EQ(message_of([&] { splice_one(base, donor, selector({"3"})); }),
            fmt::format("{}: tensor 'blk.3.ffn_down_exps.weight': at byte {}: shape [128, 512, 4] "
                        "differs from the base's [256, 256, 4] in '{}'",
                        path, at, fx().base));
}

// A donor that stores the same shape with trailing 1s (as gguf-py does) is no mismatch; the
// output keeps the base's tensor table.
TEST(splice_errors, trailing_dimensions_of_one_are_no_shape_mismatch) {
  Scratch dir;
  const std::string path = variant(dir, "d.gguf", [](Plan& p) {
    for (auto& t : p.tensors)
      if (t.name == "blk.3.ffn_down_exps.weight") t.shape.push_back(1);
  });
  const Model base = Model::open(fx().base), donor = Model::open(path);
  const SpliceResult r = splice_one(base, donor, selector({"3"}));
  EXPECT_EQ(r.spliced, 3u);
  const auto t = std::find_if(r.plan.tensors.begin(), r.plan.tensors.end(),
                              [](const auto& x) { return x.name == "blk.3.ffn_down_exps.weight"; });
  ASSERT_NE(t, r.plan.tensors.end());
  EXPECT_EQ(t->shape, base.find(t->name)->info->shape);
}

// Rewrites the type id of tensor name in a written file (the writer refuses such types).
void patch_type(const std::string& path, const std::string& name, uint32_t type_id) {
  const auto f = GgufFile::open(path);
  const TensorInfo* t = f->find_tensor(name);
  ASSERT_NE(t, nullptr);
  const uint64_t at = t->info_offset + 8 + t->name.size() + 4 + 8 * t->shape.size();
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(static_cast<std::streamoff>(at));
  io.write(reinterpret_cast<const char*>(&type_id), 4);
}

TEST(splice_errors, donor_type_unknown_or_removed) {
  Scratch dir;
  const std::string path = variant(dir, "d.gguf", [](Plan&) {});
  const std::string name = "blk.3.ffn_gate_exps.weight";
  const Model base = Model::open(fx().base);
  for (const auto& [id, why] : {std::pair<uint32_t, std::string>{99, "unknown id"},
                                std::pair<uint32_t, std::string>{4, "removed from ggml"}}) {
    patch_type(path, name, id);
    const Model donor = Model::open(path);
    EXPECT_EQ(
        message_of([&] { splice_one(base, donor, selector({"3"})); }),
        fmt::format("{}: tensor '{}': at byte {}: type {} ({}) has no known size; its "
                    "payload cannot be spliced",
                    path, name, donor.find(name)->info->info_offset + 8 + name.size() + 4 + 8 * 3,
                    id, why));
  }
}

TEST(splice_errors, donor_data_out_of_bounds_is_refused_by_the_reader) {
  Scratch dir;
  const std::string path = variant(dir, "d.gguf", [](Plan&) {});
  const Model intact = Model::open(path);
  const TensorRef& last = intact.tensors().back();
  const uint64_t start = last.data_start(), bytes = *last.info->bytes;
  std::filesystem::resize_file(path, start + bytes - 1);
  EXPECT_EQ(message_of([&] { Model::open(path); }),
            fmt::format("{}: tensor 'output.weight': at byte {}: data runs past end of file "
                        "(needs {} bytes, {} left)",
                        path, start, bytes, bytes - 1));
}

TEST(splice_errors, requested_layer_absent_in_base) {
  const Model base = Model::open(fx().base), donor = Model::open(fx().donor);
  EXPECT_EQ(message_of([&] { splice_one(base, donor, selector({"5-9"})); }),
            fmt::format("layers 7-9 do not exist in '{}' (layers 0-6)", fx().base));
  // Layer 0 exists but is dense: no routed experts there is an error too, not a no-op, even
  // though layers 1-2 have them (gguf-inspect, gguf-diff and gguf-requant let it pass).
  EXPECT_EQ(message_of([&] { splice_one(base, donor, selector({"0-2"})); }),
            fmt::format("layer 0 in '{}' has no tensor selected by {}", fx().base, kRouted));
}

TEST(splice_errors, tensor_claimed_by_two_donors) {
  const Model base = Model::open(fx().base), donor = Model::open(fx().donor);
  const Donor donors[] = {{&donor, selector({"3-4"})}, {&donor, selector({"4-5"}, {"routed-up"})}};
  const auto f = [&] { splice(base, donors, {}); };
  EXPECT_EQ(message_of(f),
            fmt::format("tensor 'blk.4.ffn_up_exps.weight': claimed by two donors: #1 '{0}' "
                        "(layers 3-4, {1}) and #2 '{0}' (layers 4-5, role routed-up); a tensor "
                        "can come from one donor only",
                        fx().donor, kRouted));
  EXPECT_EQ(kind_of(f), Error::Kind::kUsage);
}

TEST(splice_errors, gate_and_up_of_a_layer_with_different_types) {
  const Model base = Model::open(fx().base), donor = Model::open(fx().donor);
  const std::string why = fmt::format(
      "gate and up experts would differ in type: tensor 'blk.3.ffn_gate_exps.weight' is f32 "
      "(from '{}'), tensor 'blk.3.ffn_up_exps.weight' is f16 (from '{}'); ds4 needs one type for "
      "both",
      fx().donor, fx().base);
  const auto f = [&] { splice_one(base, donor, selector({"3"}, {"routed-gate"})); };
  EXPECT_EQ(message_of(f),
            fmt::format("layer 3: {} (take both, or use --allow-mixed-gate-up)", why));
  EXPECT_EQ(kind_of(f), Error::Kind::kUsage);
  SpliceOptions o;
  o.allow_mixed_gate_up = true;
  const SpliceResult r = splice_one(base, donor, selector({"3"}, {"routed-gate"}), o);
  EXPECT_EQ(r.spliced, 1u);
  EXPECT_EQ(r.warnings, std::vector<std::string>{"layer 3: " + why});
  // Taking down alone leaves gate and up alike: no complaint.
  EXPECT_TRUE(splice_one(base, donor, selector({"3"}, {"routed-down"})).warnings.empty());
  // A base that mixes them already: splicing down into that layer is not refused (the splice
  // does not cause the mix), but the report says the output keeps it.
  Scratch dir;
  write_plan(r.plan, dir.file("mixed.gguf"), {});
  const Model mixed = Model::open(dir.file("mixed.gguf"));
  const auto still = [](const char* gate, const char* up) {
    return std::vector<std::string>{fmt::format(
        "layer 3: gate and up experts differ in type in the base already, and still do in the "
        "output (tensor 'blk.3.ffn_gate_exps.weight' is {}, tensor 'blk.3.ffn_up_exps.weight' is "
        "{}); ds4 needs one type for both",
        gate, up)};
  };
  EXPECT_EQ(splice_one(mixed, donor, selector({"3"}, {"routed-down"})).warnings,
            still("f32", "f16"));
  // So is taking gate again (the mix is the base's), and taking up mends it.
  EXPECT_EQ(splice_one(mixed, donor, selector({"3"}, {"routed-gate"})).warnings,
            still("f32", "f16"));
  EXPECT_TRUE(splice_one(mixed, donor, selector({"3"}, {"routed-up"})).warnings.empty());
  EXPECT_TRUE(splice_one(mixed, donor, selector({"4"}, {"routed-down"})).warnings.empty());
}

// Routed biases (gpt-oss's ffn_gate_exps.bias, f32 beside quantized weights) have the gate's
// and up's roles but not their types: the check compares weights with weights.
TEST(splice_errors, gate_and_up_check_leaves_routed_biases_out) {
  Scratch dir;
  const auto with_biases = [](Plan& p) {
    for (const char* kind : {"gate", "up"}) {
      auto data = std::make_shared<std::vector<uint8_t>>(8 * 4 * 4, 0);
      p.tensors.push_back({fmt::format("blk.3.ffn_{}_exps.bias", kind),
                           0,
                           {8, 4},
                           data->size(),
                           MemoryBytes{data}});
    }
  };
  const auto biased = [&](const std::string& from, const std::string& name) {
    Plan p = copy_plan(Model::open(from));
    with_biases(p);
    write_plan(p, dir.file(name), {});
    return Model::open(dir.file(name));
  };
  // Gate and up weights alike in each file: f16 in the base, f32 in the donor.
  const Model base = biased(fx().base, "base.gguf"), donor = biased(fx().donor, "donor.gguf");
  ASSERT_TRUE(base.find("blk.3.ffn_gate_exps.bias"));
  // The gate weight alone: refused as without biases (it was a warning that the base mixed them).
  const auto f = [&] { splice_one(base, donor, selector({"3"}, {"routed-gate"}, {".*weight"})); };
  EXPECT_EQ(kind_of(f), Error::Kind::kUsage);
  EXPECT_NE(message_of(f).find("gate and up experts would differ in type"), std::string::npos)
      << message_of(f);
  // The gate bias alone: nothing to say (it used to claim the base mixed gate and up).
  EXPECT_TRUE(
      splice_one(base, donor, selector({"3"}, {"routed-gate"}, {".*bias"})).warnings.empty());
}

TEST(splice_errors, architecture_differs) {
  Scratch dir;
  const std::string path = variant(dir, "d.gguf", [](Plan& p) {
    p.metadata.set("general.architecture", Value::string("llama"));
  });
  const Model base = Model::open(fx().base), donor = Model::open(path);
  const std::string why =
      fmt::format("architecture 'llama' differs from the base's 'deepseek2' ('{}')", fx().base);
  const auto f = [&] { splice_one(base, donor, selector({"3"})); };
  EXPECT_EQ(message_of(f), fmt::format("{}: key 'general.architecture': {}; use --force-arch to "
                                       "splice anyway",
                                       path, why));
  EXPECT_EQ(kind_of(f), Error::Kind::kUsage);
  SpliceOptions o;
  o.force_arch = true;
  const SpliceResult r = splice_one(base, donor, selector({"3"}), o);
  EXPECT_EQ(r.spliced, 3u);
  EXPECT_EQ(r.warnings, std::vector<std::string>{fmt::format("'{}': {}", path, why)});
}

// An architecture key of the wrong type is named as such, not as missing.
TEST(splice_errors, architecture_of_the_wrong_type) {
  Scratch dir;
  const std::string path = variant(
      dir, "d.gguf", [](Plan& p) { p.metadata.set("general.architecture", Value::u32(7)); });
  const Model base = Model::open(fx().base), donor = Model::open(path);
  EXPECT_EQ(message_of([&] { splice_one(base, donor, selector({"3"})); }),
            fmt::format("{}: key 'general.architecture': architecture (a u32, not a string) "
                        "differs from the base's 'deepseek2' ('{}'); use --force-arch to splice "
                        "anyway",
                        path, fx().base));
}

TEST(splice_errors, output_equal_to_an_input_is_refused) {
  const Model base = Model::open(fx().base), donor = Model::open(fx().donor);
  const SpliceResult r = splice_one(base, donor, selector({"3"}));
  WriteOptions wo;
  wo.force = true;
  wo.inputs = r.inputs;
  for (const std::string& in : {fx().base, fx().donor}) {
    const auto size = std::filesystem::file_size(in);
    const auto f = [&] { write_plan(r.plan, in, wo); };
    EXPECT_EQ(message_of(f), fmt::format("{0}: output is the same file as input '{0}'; refusing to "
                                         "overwrite an input (choose another output path)",
                                         in));
    EXPECT_EQ(kind_of(f), Error::Kind::kUsage);
    EXPECT_EQ(std::filesystem::file_size(in), size);
  }
}

TEST(splice_errors, existing_output_needs_force) {
  const Model base = Model::open(fx().base), donor = Model::open(fx().donor);
  const SpliceResult r = splice_one(base, donor, selector({"3"}));
  Scratch dir;
  const std::string out = dir.file("out.gguf");
  std::ofstream(out) << "keep me";
  EXPECT_EQ(message_of([&] { write_plan(r.plan, out, {}); }),
            fmt::format("{}: output file exists; use --force to replace it", out));
  EXPECT_EQ(std::filesystem::file_size(out), 7u);
  WriteOptions wo;
  wo.force = true;
  EXPECT_TRUE(write_plan(r.plan, out, wo).verified);
}

// Small models held in memory, for metadata rules that need quantized types.
std::string write_small(const Scratch& dir, const std::string& name, GgmlType type,
                        std::optional<uint32_t> quant_version) {
  Plan p;
  p.metadata.set("general.architecture", Value::string("deepseek2"));
  if (quant_version) p.metadata.set("general.quantization_version", Value::u32(*quant_version));
  for (const char* kind : {"gate", "up", "down"}) {
    PlanTensor t;
    t.name = fmt::format("blk.0.ffn_{}_exps.weight", kind);
    t.type_id = static_cast<uint32_t>(type);
    t.shape = {64, 4, 2};
    t.bytes = expected_bytes(t);
    t.source = MemoryBytes{std::make_shared<const std::vector<uint8_t>>(t.bytes, uint8_t{7})};
    p.tensors.push_back(std::move(t));
  }
  write_plan(p, dir.file(name), {});
  return dir.file(name);
}

TEST(splice_errors, quantization_version_must_agree) {
  Scratch dir;
  const std::string b = write_small(dir, "b.gguf", GgmlType::Q8_0, 2);
  const std::string d = write_small(dir, "d.gguf", GgmlType::Q4_0, 1);
  const Model base = Model::open(b), donor = Model::open(d);
  // The message points at the donor's value: after the key's length, name and value type.
  uint64_t at = 0;
  for (const KeyValue& kv : donor.metadata().entries())
    if (kv.key == "general.quantization_version") at = kv.offset + 8 + kv.key.size() + 4;
  ASSERT_GT(at, 0u);
  EXPECT_EQ(message_of([&] { splice_one(base, donor, selector({})); }),
            fmt::format("{}: key 'general.quantization_version': at byte {}: quantization version "
                        "1 differs from 2 in '{}'; quantized payloads of different versions are "
                        "not interchangeable",
                        d, at, b));
  // A float base gains the key from the donor whose quantized payloads it takes.
  const std::string fb = write_small(dir, "fb.gguf", GgmlType::F32, std::nullopt);
  const Model float_base = Model::open(fb);
  const SpliceResult r = splice_one(float_base, donor, selector({}));
  EXPECT_EQ(r.plan.metadata.get_uint("general.quantization_version"), 1u);
  EXPECT_TRUE(r.warnings.empty());
  // Two donors of different versions into that base: the version the second disagrees with
  // is the first donor's, not the base's.
  const std::string d2 = write_small(dir, "d2.gguf", GgmlType::Q4_0, 2);
  const Model donor2 = Model::open(d2);
  const std::vector<Donor> two = {{&donor, selector({}, {"routed-gate", "routed-up"})},
                                  {&donor2, selector({}, {"routed-down"})}};
  EXPECT_EQ(message_of([&] { splice(float_base, two, {}); }),
            fmt::format("{}: key 'general.quantization_version': at byte {}: quantization version "
                        "2 differs from 1 in '{}' (the base has none); quantized payloads of "
                        "different versions are not interchangeable",
                        d2, at, d));
  // A donor of quantized payloads without the key is taken at the output's version, and the
  // report says so.
  const std::string nd = write_small(dir, "nd.gguf", GgmlType::Q4_0, std::nullopt);
  const Model unversioned = Model::open(nd);
  const SpliceResult u = splice_one(base, unversioned, selector({}));
  EXPECT_EQ(u.plan.metadata.get_uint("general.quantization_version"), 2u);
  EXPECT_EQ(u.warnings, std::vector<std::string>{fmt::format(
                            "donor '{}' has no general.quantization_version; its quantized "
                            "payloads are taken to be of the output's version, 2",
                            nd)});
  // A key of another type is not absent: the warning names its type.
  Plan sp = Plan{};
  {
    const Model m = Model::open(nd);
    sp.metadata = m.metadata();
    sp.metadata.set("general.quantization_version", Value::string("two"));
    for (const TensorRef& t : m.tensors())
      sp.tensors.push_back({t.name(), t.info->type_id, t.info->shape, *t.info->bytes,
                            MemoryBytes{std::make_shared<const std::vector<uint8_t>>(
                                t.data().begin(), t.data().end())}});
  }
  write_plan(sp, dir.file("sd.gguf"), {});
  const Model str_version = Model::open(dir.file("sd.gguf"));
  EXPECT_EQ(splice_one(base, str_version, selector({})).warnings,
            std::vector<std::string>{fmt::format(
                "donor '{}' has general.quantization_version of type string, not a whole number; "
                "its quantized payloads are taken to be of the output's version, 2",
                dir.file("sd.gguf"))});
}

TEST(splice_errors, no_donor_and_no_edit_is_a_usage_error) {
  const Model base = Model::open(fx().base);
  const auto f = [&] { splice(base, {}, {}); };
  EXPECT_EQ(message_of(f),
            "nothing to do: give a donor (--donor or --take), a key edit (--set, --set-file, "
            "--delete) or --align");
  EXPECT_EQ(kind_of(f), Error::Kind::kUsage);
}

TEST(splice_take, parses_donor_and_selector) {
  TakeSpec t = parse_take("d.gguf:layers=37-42,role=routed");
  EXPECT_EQ(t.path, "d.gguf");
  EXPECT_EQ(t.selector.describe(), "layers 37-42, " + kRouted);
  t = parse_take("dir/d.gguf:layers=1,3,5-7,role=routed-gate,routed-up");
  EXPECT_EQ(t.path, "dir/d.gguf");
  EXPECT_EQ(t.selector.describe(), "layers 1,3,5-7, role routed-gate|routed-up");
  t = parse_take("a:b.gguf:match=blk\\.1\\..*,match=x{1,3}");
  EXPECT_EQ(t.path, "a:b.gguf");
  EXPECT_EQ(t.selector.patterns, (std::vector<std::string>{"blk\\.1\\..*", "x{1,3}"}));
  t = parse_take("d.gguf");
  EXPECT_EQ(t.path, "d.gguf");
  EXPECT_TRUE(t.selector.empty());
  EXPECT_EQ(with_default_role(t.selector).describe(), kRouted);
  EXPECT_TRUE(parse_take("d.gguf:").selector.empty());
  // A pattern alone is not narrowed to the routed experts.
  EXPECT_EQ(with_default_role(parse_take("d:match=output\\.weight").selector).describe(),
            "match 'output\\.weight'");
}

TEST(splice_take, refuses_bad_specs) {
  const std::string hint = "expected DONOR.gguf:layers=37-42,role=routed,match=REGEX";
  const auto msg = [](const char* spec) { return message_of([&] { parse_take(spec); }); };
  EXPECT_EQ(msg("d.gguf:layer=3"),
            "invalid --take value 'd.gguf:layer=3': unknown selector key 'layer' (" + hint + ")");
  EXPECT_EQ(msg(":layers=3"),
            "invalid --take value ':layers=3': missing donor path (" + hint + ")");
  EXPECT_EQ(msg("d.gguf:layers="),
            "invalid --take value 'd.gguf:layers=': empty value for layers= (" + hint + ")");
  EXPECT_EQ(msg("d.gguf:role=routed,foo=1"),
            "invalid --take value 'd.gguf:role=routed,foo=1': unknown selector key in 'foo=1' (" +
                hint + ")");
  EXPECT_EQ(msg("d.gguf:layers=3-1"),
            "invalid --layers value '3-1': range 3-1 runs backwards (write 1-3)");
  EXPECT_EQ(kind_of([] { parse_take("d.gguf:role=bogus"); }), Error::Kind::kUsage);
}

}  // namespace
}  // namespace gguf
