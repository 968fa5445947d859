// Fixtures shared by the splice tests: a synthetic DeepSeek-style base (f16) and donor (f32)
// written once per process, variants of them built by byte copies, and small helpers.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "cli_run.h"
#include "gguf/format/model.h"
#include "gguf/format/select.h"
#include "gguf/ops/splice.h"
#include "gguf/ops/synth.h"
#include "gguf/write/plan.h"
#include "gguf/write/writer.h"

namespace gguf::splice_test {

using Scratch = gguf::testing::TempDir;

// 7 layers (layer 0 dense, 1-6 MoE), 4 experts of 256x256: real shapes, small sizes.
inline MoeSpec fixture_spec() {
  MoeSpec s;
  s.n_layers = 7;
  s.n_dense_layers = 1;
  s.n_experts = 4;
  s.n_embd = 256;
  s.n_ff_exp = 256;
  s.n_ff_dense = 512;
  s.vocab = 300;
  s.threads = 2;
  return s;
}

struct Fixtures {
  Scratch dir;
  std::string base, donor;
  Fixtures() {
    base = dir.file("base.gguf");
    donor = dir.file("donor.gguf");
    Plan b = synth_moe_plan(uniform_types(fixture_spec(), GgmlType::F16));
    b.metadata.set("general.file_type", Value::u32(1));  // MOSTLY_F16
    write_plan(b, base, {});
    MoeSpec ds = uniform_types(fixture_spec(), GgmlType::F32);
    ds.seed = 2;
    Plan d = synth_moe_plan(ds);
    d.metadata.set("general.file_type", Value::u32(0));  // ALL_F32
    write_plan(d, donor, {});
  }
};

inline const Fixtures& fx() {
  static Fixtures f;
  return f;
}

// A plan that copies every tensor of m as it is (split keys dropped): the starting point of
// donor variants, so no variant needs encoding.
inline Plan copy_plan(const Model& m) {
  Plan p;
  p.metadata = m.metadata();
  for (const char* k : {"split.no", "split.count", "split.tensors.count"}) p.metadata.erase(k);
  for (const auto& t : m.tensors()) {
    PlanTensor pt;
    pt.name = t.name();
    pt.type_id = t.info->type_id;
    pt.shape = t.info->shape;
    pt.bytes = *t.info->bytes;
    pt.source = FileRange{t.file->source_ptr(), t.data_start()};
    p.tensors.push_back(std::move(pt));
  }
  return p;
}

inline Selector selector(std::vector<std::string> layers, std::vector<std::string> roles = {},
                         std::vector<std::string> patterns = {}) {
  return with_default_role(parse_selector(layers, roles, patterns));
}

// True when name is a routed expert tensor of a layer in [lo, hi] (by its name alone, not
// through the library's role table).
inline bool routed_in(const std::string& name, int lo, int hi) {
  static const std::regex re(R"(blk\.(\d+)\.ffn_(gate|up|down)_exps\.weight)");
  std::smatch m;
  if (!std::regex_match(name, m, re)) return false;
  const int l = std::stoi(m[1].str());
  return l >= lo && l <= hi;
}

inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline Error::Kind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return Error::Kind::kInput;
}

}  // namespace gguf::splice_test
