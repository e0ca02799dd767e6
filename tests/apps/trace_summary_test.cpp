// strata trace merge|summary and plot --trace on traces with known numbers: interval
// algebra, the compute / comm / exposed / idle split (compute + exposed + idle = step),
// merging rank files into one track per rank, and the Gantt SVG's rows and colours.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "apps/plot.h"
#include "apps/trace_command.h"
#include <strata/core/error.h>
#include <strata/core/trace.h>
#include "tests/temp_dir_fixture.h"

namespace strata::apps {
namespace {

class TraceSummaryTest : public strata::testing::TempDirTest {};

nlohmann::json slice(int pid, int tid, const char* cat, double ts, double dur, const char* name = "x") {
  return {{"ph", "X"}, {"pid", pid}, {"tid", tid}, {"cat", cat}, {"ts", ts}, {"dur", dur}, {"name", name}};
}

// Rank 0: step [0,100); compute [0,60) with a wait [40,50) inside; comm [30,70).
// compute = [0,40)+[50,60) = 50, comm = 40, exposed = [40,50)+[60,70) = 20, idle = 30.
// Rank 1: two steps [0,50) and [60,100) (the gap is outside the window); compute but for
// a DDP hook [20,30) inside the backward: hooks are exposed communication, not compute.
nlohmann::json known_trace() {
  nlohmann::json ev = nlohmann::json::array();
  ev.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", 1}, {"args", {{"name", "comm dp"}}}});
  ev.push_back(slice(0, 0, "step", 0, 100, "step"));
  ev.push_back(slice(0, 0, "compute", 0, 60, "forward"));
  ev.push_back(slice(0, 0, "compute", 10, 20, "forward h.0"));  // nested: counted once
  ev.push_back(slice(0, 0, "wait", 40, 10, "wait"));
  ev.push_back(slice(0, 1, "comm", 30, 40, "all_reduce"));
  ev.push_back(slice(0, 1, "comm", 150, 10, "all_reduce"));  // outside every step: ignored
  ev.push_back(slice(1, 0, "step", 0, 50, "step"));
  ev.push_back(slice(1, 0, "step", 60, 40, "step"));
  ev.push_back(slice(1, 0, "compute", 0, 100, "forward"));
  ev.push_back(slice(1, 0, "hook", 20, 10, "ddp hook"));
  return {{"traceEvents", ev}};
}

TEST_F(TraceSummaryTest, IntervalAlgebra) {
  const Intervals u = union_of({{5, 7}, {0, 2}, {1, 3}, {7, 8}, {9, 9}});
  EXPECT_EQ(u, (Intervals{{0, 3}, {5, 8}}));
  EXPECT_EQ(minus(u, {{1, 2}, {6, 10}}), (Intervals{{0, 1}, {2, 3}, {5, 6}}));
  EXPECT_EQ(intersect(u, {{2, 6}}), (Intervals{{2, 3}, {5, 6}}));
  EXPECT_DOUBLE_EQ(length(u), 6.0);
}

TEST_F(TraceSummaryTest, KnownSplitOfEachRank) {
  const auto ranks = rank_timelines(known_trace());
  ASSERT_EQ(ranks.size(), 2u);
  const RankSummary r0 = summarize(ranks[0]), r1 = summarize(ranks[1]);
  EXPECT_EQ(r0.steps, 1);
  EXPECT_NEAR(r0.step_s * 1e6, 100, 1e-9);
  EXPECT_NEAR(r0.compute_s * 1e6, 50, 1e-9);
  EXPECT_NEAR(r0.comm_s * 1e6, 40, 1e-9);
  EXPECT_NEAR(r0.exposed_s * 1e6, 20, 1e-9);
  EXPECT_NEAR(r0.idle_s * 1e6, 30, 1e-9);
  EXPECT_NEAR(r0.compute_s + r0.exposed_s + r0.idle_s, r0.step_s, 1e-12);
  EXPECT_EQ(ranks[0].comm_tracks, std::vector<std::string>{"comm dp"});
  EXPECT_EQ(r1.steps, 2);
  EXPECT_NEAR(r1.step_s * 1e6, 90, 1e-9);
  EXPECT_NEAR(r1.compute_s * 1e6, 80, 1e-9);
  EXPECT_EQ(r1.comm_s, 0.0);
  EXPECT_NEAR(r1.hooks_s * 1e6, 10, 1e-9);
  EXPECT_NEAR(r1.exposed_s * 1e6, 10, 1e-9);
  EXPECT_EQ(r1.idle_s, 0.0);
  EXPECT_NEAR(r1.compute_s + r1.exposed_s + r1.idle_s, r1.step_s, 1e-12);
  const std::string table = format_summary({r0, r1});
  EXPECT_NE(table.find("   0      1     0.10     0.05 ( 50.0)"), std::string::npos) << table;
  EXPECT_THROW(rank_timelines(nlohmann::json{{"nope", 1}}), DataError);
  EXPECT_THROW(rank_timelines(nlohmann::json{{"traceEvents", {{{"ph", "X"}, {"pid", 0}}}}}), DataError);
}

// Two ranks' files as the recorder writes them: merged into one trace, a pid per rank,
// times rebased so the first slice starts at 0.
TEST_F(TraceSummaryTest, MergeRankFiles) {
  for (int rank : {0, 1}) {
    trace::start();
    {
      trace::Scope s("step", trace::Cat::step, {{"step", 1}});
      trace::Scope f("forward");
    }
    trace::stop();
    trace::write_json(path("run/trace/rank" + std::to_string(rank) + ".json"), rank);
  }
  const nlohmann::json m = merge_traces(path("run"));
  std::map<int, int> slices_per_pid;
  double t_min = 1e300;
  for (const auto& e : m["traceEvents"])
    if (e["ph"] == "X") ++slices_per_pid[e["pid"].get<int>()], t_min = std::min(t_min, e["ts"].get<double>());
  EXPECT_EQ(slices_per_pid, (std::map<int, int>{{0, 2}, {1, 2}}));
  EXPECT_EQ(t_min, 0.0);
  EXPECT_EQ(rank_timelines(m).size(), 2u);
  // A missing rank file or a broken one is named.
  std::filesystem::remove(path("run/trace/rank0.json"));
  EXPECT_THROW(merge_traces(path("run")), DataError);
  std::ofstream(path("run/trace/rank0.json")) << "{\"traceEvents\": [";
  try {
    merge_traces(path("run"));
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("rank0.json"), std::string::npos) << e.what();
  }
}

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

TEST_F(TraceSummaryTest, GanttRowsColoursAndTicks) {
  const std::string svg = plot_trace_svg(known_trace(), 1000);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  // Well-formed: every element opened is closed, in order.
  std::vector<std::string> open;
  const std::regex tag(R"(<(/?)([a-zA-Z]+)[^>]*?(/?)>)");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tag); it != std::sregex_iterator(); ++it) {
    if ((*it)[1] == "/") {
      ASSERT_FALSE(open.empty());
      ASSERT_EQ(open.back(), (*it)[2]);
      open.pop_back();
    } else if ((*it)[3] != "/") {
      open.push_back((*it)[2]);
    }
  }
  EXPECT_TRUE(open.empty());
  EXPECT_EQ(count(svg, "<g class=\"row\""), 2u);
  EXPECT_NE(svg.find(">rank 0 main</text>"), std::string::npos);
  EXPECT_NE(svg.find(">comm dp</text>"), std::string::npos);
  // Rank 0: compute [0,40) and [50,60), exposed [40,50) and [60,70), idle [70,100),
  // comm [30,70); rank 1: compute in its two steps.
  EXPECT_EQ(count(svg, "<g class=\"compute\""), 2u);
  const size_t c0 = svg.find("<g class=\"compute\""), e0 = svg.find("</g>", c0);
  EXPECT_EQ(count(svg.substr(c0, e0 - c0), "<rect"), 2u);
  const size_t x0 = svg.find("<g class=\"exposed\""), x1 = svg.find("</g>", x0);
  EXPECT_EQ(count(svg.substr(x0, x1 - x0), "<rect"), 2u);
  EXPECT_EQ(count(svg, "class=\"step\""), 3u);
  EXPECT_NE(svg.find("time since the first traced step (ms)"), std::string::npos);
  EXPECT_NE(svg.find(">0.1</text>"), std::string::npos);  // the last tick: 100 us = 0.1 ms
  EXPECT_THROW(plot_trace_svg(nlohmann::json{{"traceEvents", nlohmann::json::array()}}), DataError);
}

}  // namespace
}  // namespace strata::apps
