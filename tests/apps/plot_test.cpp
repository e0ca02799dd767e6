// strata plot: metrics.jsonl of several runs -> one well-formed SVG with one smoothed loss
// line, learning-rate line and eval markers per run, axes with ticks, and a legend.
#include <gtest/gtest.h>

#include <cmath>
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

// Large axes keep distinct tick labels: 48000 samples per step gives ticks 5e+05 apart,
// 1.5e+06 among them (not rounded to "2e+06" beside the 2e+06 tick).
TEST_F(PlotTest, LargeTickLabelsStayDistinct) {
  write_run(path("big"), 1.0, 48000);
  const std::string svg = plot_runs_svg({read_run_curves(path("big"))});
  const size_t second = svg.find("data-x=\"samples\"");
  ASSERT_NE(second, std::string::npos);
  const std::string panel = svg.substr(second);
  EXPECT_NE(panel.find(">1.5e+06</text>"), std::string::npos);
  EXPECT_EQ(count(panel, ">2e+06</text>"), 1u);
  EXPECT_EQ(count(panel, ">1e+06</text>"), 1u);
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

// A mixture-of-experts run: 10 train records, each with a "moe" object for layers 1 and 3
// of 4 experts. Layer 1 is balanced (max / mean = 1); layer 3 sends half its tokens to
// expert 0 and none to expert 3 (max / mean = 16 / 8 = 2).
void write_moe_run(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::ofstream f(dir + "/metrics.jsonl");
  for (int s = 1; s <= 10; ++s)
    f << R"({"type":"train","step":)" << s << R"(,"loss":)" << 2.0 + 1.0 / s << R"(,"lr":0.001,"moe":{"layers":[1,3],)"
      << R"("tokens":[[8,8,8,8],[16,8,8,0]],"dropped":[0,)" << s << R"(],"aux_loss":)" << 0.01 + 0.001 / s
      << R"(,"z_loss":0}})" << "\n";
}

// The "points" of the first polyline after `from` whose opening tag contains `attr`.
std::string points_of(const std::string& svg, const std::string& attr, size_t from = 0) {
  const size_t at = svg.find(attr, from);
  if (at == std::string::npos) return "";
  const size_t p = svg.find("points=\"", at) + 8;
  return svg.substr(p, svg.find('"', p) - p);
}

TEST_F(PlotTest, ExpertLoadRatio) {
  EXPECT_DOUBLE_EQ(expert_load_ratio(std::vector<double>{120, 80, 0, 56}), 120.0 / 64.0);
  EXPECT_DOUBLE_EQ(expert_load_ratio(std::vector<double>{8, 8, 8, 8}), 1.0);
  EXPECT_DOUBLE_EQ(expert_load_ratio(std::vector<double>{0, 0, 30}), 3.0);  // every token to one expert: E
  EXPECT_TRUE(std::isnan(expert_load_ratio(std::vector<double>{0, 0})));     // nothing routed
  EXPECT_TRUE(std::isnan(expert_load_ratio(std::vector<double>{})));
}

TEST_F(PlotTest, MoeRunGetsExpertLoadAuxLossAndHeatmapPanels) {
  write_moe_run(path("moe"));
  const RunCurves r = read_run_curves(path("moe"));
  ASSERT_EQ(r.moe.step.size(), 10u);
  EXPECT_EQ(r.moe.layers, (std::vector<int>{1, 3}));
  ASSERT_EQ(r.moe.tokens.back().size(), 2u);
  EXPECT_EQ(r.moe.tokens.back()[1], (std::vector<double>{16, 8, 8, 0}));
  EXPECT_EQ(r.moe.dropped.back(), (std::vector<double>{0, 10}));
  EXPECT_DOUBLE_EQ(r.moe.aux_loss.front(), 0.011);

  const std::string svg = plot_runs_svg({r});
  EXPECT_TRUE(balanced(svg));
  EXPECT_EQ(count(svg, "data-panel=\"expert-load\""), 1u);
  EXPECT_EQ(count(svg, "data-panel=\"aux-loss\""), 1u);
  EXPECT_EQ(count(svg, "data-panel=\"expert-share\""), 1u);
  EXPECT_EQ(count(svg, "<g class=\"panel\""), 4u);  // loss, expert load, aux loss, heatmap
  EXPECT_EQ(count(svg, "class=\"expert-load\""), 2u);  // one line per layer
  EXPECT_EQ(count(svg, "class=\"aux-loss\""), 1u);
  EXPECT_EQ(count(svg, "class=\"z-loss\""), 0u);  // all zero: not drawn
  EXPECT_EQ(count(svg, "class=\"moe-cell\""), 2u * 4u);  // layers x experts
  EXPECT_NE(svg.find(">layer 1</text>"), std::string::npos);  // legend
  EXPECT_NE(svg.find(">layer 3</text>"), std::string::npos);
  // The heatmap shows the last step's shares: layer 3 sends 16 of 32 tokens to expert 0.
  EXPECT_NE(svg.find("token share per expert at step 10"), std::string::npos);
  EXPECT_NE(svg.find("<title>layer 3, expert 0: 50.0% (16 tokens)</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>layer 3, expert 3: 0.0% (0 tokens)</title>"), std::string::npos);

  // Layer 1's ratio is 1: its line lies on the dashed reference. Layer 3's is 2: the axis
  // spans [1 - 0.05, 2] padded by 5% ([0.8975, 2.0525]) over px [1020, 580] (the second
  // panel of 540 px), so 2 sits at 1020 - 440 * (2 - 0.8975) / 1.155 = 600.
  const std::string one = points_of(svg, "data-layer=\"1\" stroke"), two = points_of(svg, "data-layer=\"3\" stroke");
  EXPECT_EQ(count(one, ","), 10u) << one;
  EXPECT_EQ(count(two, ",600.0 "), 10u) << two;
  const size_t ref = svg.find("class=\"balanced\"");
  ASSERT_NE(ref, std::string::npos);
  const size_t y1 = svg.find("y1=\"", ref) + 4;
  const std::string ref_y = svg.substr(y1, svg.find('"', y1) - y1);
  EXPECT_EQ(count(one, "," + ref_y + " "), 10u) << one << " vs y " << ref_y;

  // With a run without MoE data: its loss is drawn, the MoE panels hold only the MoE run.
  write_run(path("dense"), 1.0);
  const std::string both = plot_runs_svg({read_run_curves(path("dense")), r});
  EXPECT_TRUE(balanced(both));
  EXPECT_EQ(count(both, "class=\"loss\""), 2u);
  EXPECT_EQ(count(both, "class=\"expert-load\""), 2u);
  EXPECT_EQ(count(both, "class=\"moe-cell\""), 8u);
  EXPECT_NE(both.find(path("moe") + ": layer 3</text>"), std::string::npos);  // legend names the run
}

TEST_F(PlotTest, RunWithoutMoeHasNoMoePanels) {
  write_run(path("dense"), 1.0);
  const RunCurves r = read_run_curves(path("dense"));
  EXPECT_TRUE(r.moe.empty());
  const std::string svg = plot_runs_svg({r});
  EXPECT_EQ(svg.find("expert-load"), std::string::npos);
  EXPECT_EQ(svg.find("moe-cell"), std::string::npos);
  EXPECT_EQ(count(svg, "<g class=\"panel\""), 1u);
  EXPECT_NE(svg.find("height=\"540\""), std::string::npos);
}

// Malformed "moe" objects on line 2 (line 1 is a good record): DataError naming the file and line.
TEST_F(PlotTest, MalformedMoeIsDataErrorNamingFileAndLine) {
  const std::string good =
      R"({"type":"train","step":1,"loss":2,"moe":{"layers":[1,3],"tokens":[[8,8,8,8],[16,8,8,0]],"dropped":[0,1],"aux_loss":0.01,"z_loss":0}})";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"rows differ", R"({"layers":[1,3],"tokens":[[8,8,8,8],[16,8,8]],"dropped":[0,1],"aux_loss":0.01,"z_loss":0})"},
      {"too few rows", R"({"layers":[1,3],"tokens":[[8,8,8,8]],"dropped":[0,1],"aux_loss":0.01,"z_loss":0})"},
      {"too many rows", R"({"layers":[1,3],"tokens":[[1],[2],[3]],"dropped":[0,1],"aux_loss":0.01,"z_loss":0})"},
      {"dropped length", R"({"layers":[1,3],"tokens":[[8,8,8,8],[16,8,8,0]],"dropped":[0],"aux_loss":0.01,"z_loss":0})"},
      {"layers change", R"({"layers":[1,5],"tokens":[[8,8,8,8],[16,8,8,0]],"dropped":[0,1],"aux_loss":0.01,"z_loss":0})"},
      {"tokens type", R"({"layers":[1,3],"tokens":"many","dropped":[0,1],"aux_loss":0.01,"z_loss":0})"},
      {"count type", R"({"layers":[1,3],"tokens":[[8,8,"8",8],[16,8,8,0]],"dropped":[0,1],"aux_loss":0.01,"z_loss":0})"},
      {"negative count", R"({"layers":[1,3],"tokens":[[8,8,8,8],[16,8,-8,0]],"dropped":[0,1],"aux_loss":0.01,"z_loss":0})"},
      {"layer type", R"({"layers":[1.5,3],"tokens":[[8,8,8,8],[16,8,8,0]],"dropped":[0,1],"aux_loss":0.01,"z_loss":0})"},
      {"aux type", R"({"layers":[1,3],"tokens":[[8,8,8,8],[16,8,8,0]],"dropped":[0,1],"aux_loss":"0.01","z_loss":0})"},
      {"missing key", R"({"layers":[1,3],"tokens":[[8,8,8,8],[16,8,8,0]],"dropped":[0,1],"aux_loss":0.01})"},
      {"not an object", R"([1,3])"},
  };
  for (const auto& [what, moe] : bad) {
    const std::string dir = path("bad_moe");
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/metrics.jsonl") << good << "\n"
                                          << R"({"type":"train","step":2,"loss":2,"moe":)" << moe << "}\n";
    try {
      read_run_curves(dir);
      ADD_FAILURE() << what << ": expected DataError";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(dir + "/metrics.jsonl' line 2: \"moe\""), std::string::npos)
          << what << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace strata::apps
