// topt report: Markdown to HTML, and whole reports on the synthetic fixture, with charts drawn, with
// the chart script failing, without python3, and into a folder that cannot be made.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/markdown.h"
#include "harness/report.h"
#include "tests/unit/test_data.h"

namespace fs = std::filesystem;

namespace topt {
namespace {

using test_data::kSourceDir;
const std::string& kSynthetic = test_data::kSynthetic1;
const std::string kScript = kSourceDir + "/reports/make_report.py";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A scratch tree per test: reports/h100/quick.json (a copy of the fixture), reported into out/.
class ReportTree : public ::testing::Test {
 protected:
  void SetUp() override {
    auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() / (std::string("topt_") + info->test_suite_name() + "_" + info->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "reports/h100");
    fs::copy_file(kSynthetic, results());
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string results() const { return (root_ / "reports/h100/quick.json").string(); }
  fs::path dir() const { return root_ / "out"; }

  int report(const std::string& script, const fs::path& out_dir = {}) {
    ReportOptions o;
    o.results = {results()};
    o.out_dir = (out_dir.empty() ? dir() : out_dir).string();
    o.script = script;
    out_.str("");
    err_.str("");
    return run_report(o, out_, err_);
  }

  void expect_tables_written() {
    std::string md = slurp(dir() / "quick.md");
    EXPECT_NE(md.find("## quick: NVIDIA H100 80GB HBM3"), std::string::npos);
    EXPECT_NE(md.find("### rmsnorm"), std::string::npos);
    EXPECT_NE(md.find("dram_copy_GBps: 3012.4"), std::string::npos) << md;
    EXPECT_NE(slurp(dir() / "quick.csv").find("rmsnorm,ours,0,,\"model=llama2-7b,tokens=16,hidden=4096,eps=1e-05\",bf16,ok"),
              std::string::npos);
    EXPECT_NE(slurp(dir() / "quick.md").find("[quick.json](../reports/h100/quick.json)"), std::string::npos);
    std::string page = slurp(dir() / "quick.html");
    EXPECT_NE(page.find("<table>"), std::string::npos);
    EXPECT_NE(page.find("<h3>rmsnorm</h3>"), std::string::npos);
    EXPECT_NE(page.find("<a href=\"index.html\">"), std::string::npos);
    EXPECT_NE(slurp(dir() / "index.html").find("<a href=\"quick.html\">quick</a>"), std::string::npos);
  }

  fs::path root_;
  std::ostringstream out_, err_;
};

TEST(ReportHtml, MarkdownSubsetBecomesHtml) {
  std::string md =
      "### rmsnorm <v2>\n\n"
      "| case | impl | time |\n|---|---|--:|\n| tokens=16 | a\\|b | **3.4** |\n\n"
      "- GPU: `H100`\n- see [csv](quick.csv)\n\n"
      "![speedup](charts/s.png)\n\n"
      "<details><summary>more</summary>\n\nplain text\n";
  std::string html = markdown_to_html(md, [](const std::string& p) { return "data:" + p; });
  EXPECT_NE(html.find("<h3>rmsnorm &lt;v2&gt;</h3>"), std::string::npos) << html;
  EXPECT_NE(html.find("<thead><tr><th>case</th><th>impl</th><th style=\"text-align:right\">time</th></tr>\n</thead>"),
            std::string::npos) << html;
  EXPECT_NE(html.find("<td>a|b</td><td style=\"text-align:right\"><strong>3.4</strong></td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<li>GPU: <code>H100</code></li>"), std::string::npos) << html;
  EXPECT_NE(html.find("<a href=\"quick.csv\">csv</a>"), std::string::npos) << html;
  EXPECT_NE(html.find("<img alt=\"speedup\" src=\"data:charts/s.png\">"), std::string::npos) << html;
  EXPECT_NE(html.find("<details><summary>more</summary>\n<p>plain text</p>"), std::string::npos) << html;
}

TEST_F(ReportTree, TablesOnlyWithoutAScript) {
  EXPECT_EQ(report(""), 0) << err_.str();
  expect_tables_written();
  EXPECT_FALSE(fs::exists(dir() / "charts"));
}

TEST_F(ReportTree, ChartsAreDrawnAndLinkedAsFiles) {
  ASSERT_EQ(report(kScript), 0) << err_.str();
  expect_tables_written();
  for (const char* chart : {"quick_rmsnorm_speedup", "quick_rmsnorm_throughput", "quick_rmsnorm_roofline"}) {
    EXPECT_GT(fs::file_size(dir() / "charts" / (std::string(chart) + ".png")), 1000u) << chart;
    EXPECT_GT(fs::file_size(dir() / "charts" / (std::string(chart) + ".svg")), 1000u) << chart;
  }
  EXPECT_NE(slurp(dir() / "quick.md").find("(charts/quick_rmsnorm_speedup.png)"), std::string::npos);
  std::string page = slurp(dir() / "quick.html");
  EXPECT_NE(page.find("src=\"charts/quick_rmsnorm_roofline.png\""), std::string::npos) << page;
  EXPECT_EQ(page.find("data:image"), std::string::npos);
  EXPECT_NE(out_.str().find("(3 charts)"), std::string::npos) << out_.str();
}

TEST_F(ReportTree, MissingMatplotlibWritesTablesAndExits1) {
  // The chart script's exit status for a missing matplotlib.
  fs::path fake = root_ / "no_matplotlib.py";
  std::ofstream(fake) << "import sys\nsys.exit(3)\n";
  EXPECT_EQ(report(fake.string()), 1);
  expect_tables_written();
  EXPECT_NE(err_.str().find("charts skipped: matplotlib is not installed"), std::string::npos) << err_.str();
  EXPECT_NE(err_.str().find("the tables were written"), std::string::npos);
}

TEST_F(ReportTree, MissingPython3WritesTablesAndExits1) {
  std::string path = getenv("PATH");
  setenv("PATH", (root_ / "empty").c_str(), 1);
  int rc = report(kScript);
  setenv("PATH", path.c_str(), 1);
  EXPECT_EQ(rc, 1);
  expect_tables_written();
  EXPECT_NE(err_.str().find("charts skipped: cannot run python3"), std::string::npos) << err_.str();
}

TEST_F(ReportTree, AnOutputFolderUnderAFileIsExit2NamingIt) {
  std::ofstream(root_ / "a_file") << "x";
  EXPECT_EQ(report(kScript, root_ / "a_file/out"), 2);
  EXPECT_NE(err_.str().find("topt report: error: " + (root_ / "a_file/out").string()), std::string::npos) << err_.str();
}

TEST_F(ReportTree, AChartsFolderThatIsAFileIsExit2NamingIt) {
  fs::create_directories(dir());
  std::ofstream(dir() / "charts") << "x";
  EXPECT_EQ(report(kScript), 2);
  EXPECT_NE(err_.str().find("topt report: error: " + (dir() / "charts").string()), std::string::npos) << err_.str();
}

TEST_F(ReportTree, AChartScriptThatCannotWriteIsExit2) {
  // The chart script's exit status for unreadable input or an unwritable chart.
  fs::path fake = root_ / "cannot_write.py";
  std::ofstream(fake) << "import sys\nsys.exit(2)\n";
  EXPECT_EQ(report(fake.string()), 2);
  EXPECT_NE(err_.str().find("could not read " + results()), std::string::npos) << err_.str();
}

TEST_F(ReportTree, ForeignResultsAreExit2) {
  std::ofstream(results()) << R"({"benchmarks": []})";
  EXPECT_EQ(report(""), 2);
  EXPECT_NE(err_.str().find("topt report: error: " + results() + ": not a topt results file"), std::string::npos)
      << err_.str();
}

TEST_F(ReportTree, ResultsFilesWithTheSameNameAreExit2) {
  fs::create_directories(root_ / "other");
  fs::copy_file(kSynthetic, root_ / "other/quick.json");
  ReportOptions o;
  o.results = {results(), (root_ / "other/quick.json").string()};
  EXPECT_EQ(run_report(o, out_, err_), 2);
  EXPECT_NE(err_.str().find("also named quick"), std::string::npos) << err_.str();
}

}  // namespace
}  // namespace topt
