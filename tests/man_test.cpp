// The man pages against the tools: every option --help lists is documented in the tool's page,
// and no roff request is glued to the end of a text line (where it prints as text).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "cli_run.h"

namespace gguf {
namespace {

using testing::run_cli;

std::string man_page(const std::string& tool) {
  std::ifstream f(std::string(GGUF_SOURCE_DIR) + "/man/" + tool + ".1");
  return {std::istreambuf_iterator<char>(f), {}};
}

class ManPage : public ::testing::TestWithParam<std::string> {};

TEST_P(ManPage, documents_every_option_of_help) {
  const std::string tool = GetParam();
  const std::string page = man_page(tool);
  ASSERT_FALSE(page.empty()) << "no man/" << tool << ".1";
  const auto help = run_cli(tool, {"--help"});
  ASSERT_EQ(help.code, 0) << help.err;
  std::set<std::string> options;
  const std::regex option("--([a-z][a-z0-9-]*)");
  for (auto it = std::sregex_iterator(help.out.begin(), help.out.end(), option);
       it != std::sregex_iterator(); ++it)
    options.insert((*it)[1].str());
  EXPECT_GT(options.size(), 5u);
  for (const std::string& o : options) {
    // In roff every '-' of an option is written "\-".
    std::string roff = "\\-\\-";
    for (char c : o) roff += c == '-' ? std::string("\\-") : std::string(1, c);
    EXPECT_NE(page.find(roff), std::string::npos) << "--" << o << " is not in man/" << tool << ".1";
  }
}

TEST_P(ManPage, has_no_request_glued_to_text) {
  const std::string page = man_page(GetParam());
  std::istringstream lines(page);
  const std::regex glued("[^ \\\\]\\.(TP|PP|IP|SH|SS|RS|RE|br|nf|fi|B|BI|BR|I|IR)$");
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n)
    EXPECT_FALSE(std::regex_search(line, glued)) << "line " << n << ": " << line;
}

INSTANTIATE_TEST_SUITE_P(Tools, ManPage,
                         ::testing::Values("gguf-inspect", "gguf-diff", "gguf-splice",
                                           "gguf-requant"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace gguf
