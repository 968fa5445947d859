// Writes the safetensors fuzzer's seed corpus into a directory: packed-affine files of every
// width and a few groups and shapes, with and without plain tensors.
#include <fmt/format.h>

#include <string>

#include "affine_fixture.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: {} DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int n = 0;
  for (unsigned bits = 1; bits <= 8; ++bits) {
    gguf::testing::AffineFile af(bits);
    af.add_packed("blk.0.ffn_up_exps.weight", bits, bits % 2 ? 32 : 64, {2, 3, 64},
                  gguf::testing::AffineValues::kSpecial);
    if (bits % 3 == 0) af.add_plain("blk.0.attn_norm.weight", "F32", {64});
    if (bits % 4 == 0) af.add_plain("token_embd.weight", "BF16", {2, 8});
    af.write(fmt::format("{}/seed-{}.safetensors", dir, n++));
  }
  gguf::testing::AffineFile plain(99);
  plain.add_plain("a", "F16", {3, 5});
  plain.add_plain("b", "I64", {2});
  plain.write(fmt::format("{}/seed-{}.safetensors", dir, n++));
  return 0;
}
