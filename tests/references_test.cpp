// GGUF_REQUIRE_REFERENCES (set by CI): a test whose reference implementation (ggml, llama.cpp,
// Hugging Face's parser) is missing fails instead of skipping; without it, it skips with the
// reason. Checked by running this test binary's probe in a child process both ways.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_run.h"
#include "ggml_ref.h"

namespace gguf {
namespace {

using testing::run_program;

// Run only by the test below (disabled tests do not run otherwise).
TEST(references, DISABLED_probe) { GGUF_MISSING_REFERENCE("probe library not available: " << 42); }

TEST(references, a_missing_reference_skips_unless_required) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::vector<std::string> probe = {self, "--gtest_filter=references.DISABLED_probe",
                                          "--gtest_also_run_disabled_tests"};
  std::vector<std::string> args = {"-u", "GGUF_REQUIRE_REFERENCES"};
  args.insert(args.end(), probe.begin(), probe.end());
  auto r = run_program("env", args);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Skipped\nprobe library not available: 42\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[  SKIPPED ] 1 test"), std::string::npos) << r.out;

  for (const char* value : {"1", "yes"}) {
    args = {std::string("GGUF_REQUIRE_REFERENCES=") + value};
    args.insert(args.end(), probe.begin(), probe.end());
    r = run_program("env", args);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("probe library not available: 42 (GGUF_REQUIRE_REFERENCES is set: this "
                         "test may not skip)"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("[  FAILED  ] 1 test"), std::string::npos) << r.out;
  }
  // "0" (or empty) asks for nothing.
  args = {"GGUF_REQUIRE_REFERENCES=0"};
  args.insert(args.end(), probe.begin(), probe.end());
  EXPECT_EQ(run_program("env", args).code, 0);
}

}  // namespace
}  // namespace gguf
