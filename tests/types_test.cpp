// The type table agrees with ggml's facts (and with ggml itself when it can be loaded).
#include "gguf/format/types.h"

#include <gtest/gtest.h>

#include "ggml_ref.h"

namespace gguf {
namespace {

TEST(types, table_has_35_active_types) { EXPECT_EQ(active_types().size(), 35u); }

TEST(types, parse_is_case_insensitive) {
  EXPECT_EQ(parse_type("Q4_K"), GgmlType::Q4_K);
  EXPECT_EQ(parse_type("iq2_XXS"), GgmlType::IQ2_XXS);
  EXPECT_EQ(parse_type("BF16"), GgmlType::BF16);
  EXPECT_FALSE(parse_type("q4_2"));  // removed
  EXPECT_FALSE(parse_type("q9_9"));
}

TEST(types, unknown_and_removed_ids) {
  EXPECT_EQ(find_type(43), nullptr);
  EXPECT_EQ(type_name(99), "type99");
  ASSERT_NE(find_type(36), nullptr);
  EXPECT_TRUE(find_type(36)->removed);
  EXPECT_EQ(sized_type(36), nullptr);
  EXPECT_EQ(row_bytes(GgmlType::Q4_K, 512), 288u);
  EXPECT_FALSE(row_bytes(GgmlType::Q4_K, 100));
}

TEST(types, matches_ggml_sizes) {
  GGUF_REQUIRE_GGML();
  auto& g = testing::GgmlRef::get();
  for (GgmlType t : active_types()) {
    const auto& tr = traits(t);
    SCOPED_TRACE(tr.name);
    EXPECT_EQ(std::string(g.type_name(tr.id)), tr.name);
    EXPECT_EQ(g.blck_size(tr.id), tr.block_size);
    EXPECT_EQ(g.type_size(tr.id), tr.type_size);
  }
}

}  // namespace
}  // namespace gguf
