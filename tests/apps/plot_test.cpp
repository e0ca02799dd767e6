// strata plot: metrics.jsonl of several runs -> one well-formed SVG with one smoothed loss
// line, learning-rate line and eval markers per run, axes with ticks, and a legend.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "apps/plot.h"
#include <strata/core/error.h>
#include "tests/temp_dir_fixture.h"

namespace strata::apps {
namespace {

class PlotTest : public strata::testing::TempDirTest {};

// 50 train records (with the samples seen when `per_step` > 0) and 2 eval records.
void write_run(const std::string& dir, double scale, int per_step = 0) {
  std::filesystem::create_directories(dir);
  std::ofstream f(dir + "/metrics.jsonl");
  for (int s = 1; s <= 50; ++s) {
    f << R"({"type":"train","step":)" << s << R"(,"loss":)" << scale * (2.0 + 1.0 / s) << R"(,"lr":)"
      << 0.001 * (1.0 - s / 60.0);
    if (per_step > 0) f << R"(,"samples":)" << s * per_step;
    f << "}\n";
  }
  for (int s : {25, 50}) f << R"({"type":"eval","step":)" << s << R"(,"loss":)" << scale * 2.1 << "}\n";
}

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

// Every element opened is closed in order (a minimal XML well-formedness check).
bool balanced(const std::string& svg) {
  std::vector<std::string> open;
  const std::regex tag(R"(<(/?)([a-zA-Z]+)[^>]*?(/?)>)");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tag); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[2];
    if ((*it)[1] == "/") {
      if (open.empty() || open.back() != name) return false;
      open.pop_back();
    } else if ((*it)[3] != "/") {
      open.push_back(name);
    }
  }
  return open.empty();
}

TEST_F(PlotTest, TwoRunsOverlayWithAxesAndLegend) {
  write_run(path("ddp"), 1.0);
  write_run(path("zero3"), 1.1);
  const std::string svg = plot_runs_svg({read_run_curves(path("ddp")), read_run_curves(path("zero3"))});
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_TRUE(balanced(svg));
  EXPECT_EQ(count(svg, "class=\"loss\""), 2u);
  EXPECT_EQ(count(svg, "class=\"loss-raw\""), 2u);
  EXPECT_EQ(count(svg, "class=\"lr\""), 2u);
  EXPECT_EQ(count(svg, "class=\"eval\""), 4u);
  EXPECT_NE(svg.find(">" + path("ddp") + "</text>"), std::string::npos);  // legend
  EXPECT_NE(svg.find(">" + path("zero3") + "</text>"), std::string::npos);
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_NE(svg.find(">50</text>"), std::string::npos);  // the last step is a tick
  EXPECT_NE(svg.find("learning rate (dashed)"), std::string::npos);
  // 50 points per smoothed line.
  const size_t at = svg.find("class=\"loss\"");
  const std::string line = svg.substr(at, svg.find("/>", at) - at);
  EXPECT_EQ(count(line, ","), 50u);
}

// Runs that record samples get a second panel: loss against samples, eval points at
// their step's samples (runs with different batch sizes line up by data seen).
TEST_F(PlotTest, SecondPanelAgainstSamples) {
  write_run(path("b32"), 1.0, 32);
  write_run(path("b64"), 1.1, 64);
  const std::string svg = plot_runs_svg({read_run_curves(path("b32")), read_run_curves(path("b64"))}, 900, 500);
  EXPECT_TRUE(balanced(svg));
  EXPECT_NE(svg.find("height=\"1000\""), std::string::npos);
  EXPECT_EQ(count(svg, "<g class=\"panel\""), 2u);
  EXPECT_EQ(count(svg, "class=\"loss\""), 4u);
  EXPECT_EQ(count(svg, "class=\"lr\""), 2u);  // the learning rate is drawn against steps only
  EXPECT_EQ(count(svg, "class=\"eval\""), 8u);
  EXPECT_NE(svg.find(">samples</text>"), std::string::npos);
  EXPECT_NE(svg.find(">3000</text>"), std::string::npos);  // b64 ends at 3200 samples: a 500-apart tick
  const size_t second = svg.find("data-x=\"samples\"");
  ASSERT_NE(second, std::string::npos);
  const size_t b64 = svg.find("data-run=\"" + path("b64") + "\"", second);
  const size_t line = svg.find("class=\"loss\"", b64);
  const std::string pts = svg.substr(line, svg.find("/>", line) - line);
  EXPECT_NE(pts.find(" 830.0,"), std::string::npos) << pts;  // right = 900 - 70
  // A run without the samples field: steps only.
  write_run(path("old"), 1.0);
  const std::string one = plot_runs_svg({read_run_curves(path("b32")), read_run_curves(path("old"))});
  EXPECT_EQ(count(one, "<g class=\"panel\""), 1u);
}

TEST_F(PlotTest, HelpersAndErrors) {
  // Bias-corrected: (0.5*1) / 0.5, (0.25*1 + 0.5*3) / 0.75, (0.125*1 + 0.25*3 + 0.5*3) / 0.875.
  const std::vector<double> e = ema({1, 3, 3}, 0.5);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_DOUBLE_EQ(e[0], 1.0);
  EXPECT_DOUBLE_EQ(e[1], 7.0 / 3.0);
  EXPECT_DOUBLE_EQ(e[2], 19.0 / 7.0);
  // A constant stays constant; a few points of a falling loss are not held near the first
  // one (a seeded EMA 0.1 would still read 3.44 after 4, 3, 2, 1; this one reads 2.37).
  for (double x : ema({2.5, 2.5, 2.5}, 0.1)) EXPECT_NEAR(x, 2.5, 1e-12);
  const std::vector<double> fall = ema({4, 3, 2, 1}, 0.1);
  EXPECT_LT(fall.back(), 2.5);
  EXPECT_GT(fall.back(), 1.0);
  EXPECT_EQ(nice_ticks(0, 50, 5), (std::vector<double>{0, 10, 20, 30, 40, 50}));
  const std::vector<double> want = {2.2, 2.4, 2.6, 2.8, 3.0, 3.2}, got = nice_ticks(2.05, 3.3, 6);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12);
  EXPECT_THROW(read_run_curves(path("none")), DataError);
  std::filesystem::create_directories(path("bad"));
  std::ofstream(path("bad") + "/metrics.jsonl") << "{\"type\":\"train\",\"step\":1}\n";
  try {
    read_run_curves(path("bad"));
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl' line 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::apps
