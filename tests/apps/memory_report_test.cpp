// The progress-style decision (bar vs lines, mpirun, STRATA_PROGRESS) and the memory
// tables of `strata train` / `strata plan`, checked against hand-computed numbers.
#include "apps/memory_report.h"

#include <gtest/gtest.h>

#include <sstream>

#include "apps/trainer.h"

namespace strata::apps {
namespace {

TEST(ProgressStyle, BarOnlyOnATerminalOutsideMpi) {
  EXPECT_EQ(choose_progress_style(true, false, nullptr), ProgressStyle::bar);
  EXPECT_EQ(choose_progress_style(true, true, nullptr), ProgressStyle::lines);  // mpirun gives rank 0 a pty
  EXPECT_EQ(choose_progress_style(false, false, nullptr), ProgressStyle::lines);
  EXPECT_EQ(choose_progress_style(false, true, ""), ProgressStyle::lines);
  EXPECT_EQ(choose_progress_style(true, false, ""), ProgressStyle::bar);  // empty = automatic
}

TEST(ProgressStyle, EnvironmentForcesEitherStyle) {
  for (bool tty : {false, true})
    for (bool mpi : {false, true}) {
      EXPECT_EQ(choose_progress_style(tty, mpi, "bar"), ProgressStyle::bar);
      EXPECT_EQ(choose_progress_style(tty, mpi, "lines"), ProgressStyle::lines);
    }
  try {
    choose_progress_style(true, false, "fancy");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "STRATA_PROGRESS: expected bar or lines, got 'fancy'");
  }
}

TEST(MemoryReport, BytesAndPsiMultiples) {
  EXPECT_EQ(format_bytes_psi(4 << 20, 1 << 20), "4.00 MiB (4.00Ψ)");
  EXPECT_EQ(format_bytes_psi(3 << 19, 1 << 20), "1.50 MiB (1.50Ψ)");
  EXPECT_EQ(format_bytes_psi(1 << 20, 0), "1.00 MiB");
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The columns of one row, split on runs of two or more spaces.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == ' ' && (i + 1 < line.size() && line[i + 1] == ' ')) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      while (i + 1 < line.size() && line[i + 1] == ' ') ++i;
      continue;
    }
    cur += line[i];
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

TEST(MemoryReport, MeasuredBesidePredicted) {
  const int64_t psi = 1 << 18;  // 1 MiB of f32
  MemoryTracker t;
  t.add(MemCategory::params, 4 * psi);
  t.add(MemCategory::grads, 4 * psi);
  t.add(MemCategory::grads, -4 * psi);  // freed by zero_grad: now 0, peak 4Ψ
  t.add(MemCategory::optimizer, 8 * psi);
  t.add(MemCategory::activations, 2 * psi);
  const parallel::MemoryPlan plan{.params = 4 * psi, .grads = 4 * psi, .optimizer = 8 * psi, .comm = 0};
  const auto l = lines_of(format_memory_report(plan, t, psi, "heading"));
  ASSERT_EQ(l.size(), 9u);
  EXPECT_EQ(l[0], "heading");
  EXPECT_EQ(cells(l[2]), (std::vector<std::string>{"params", "1.00 MiB (4.00Ψ)", "1.00 MiB (4.00Ψ)",
                                                   "1.00 MiB (4.00Ψ)"}));
  EXPECT_EQ(cells(l[3]), (std::vector<std::string>{"grads", "0.00 MiB (0.00Ψ)", "1.00 MiB (4.00Ψ)",
                                                   "1.00 MiB (4.00Ψ)"}));
  EXPECT_EQ(cells(l[4]), (std::vector<std::string>{"optimizer", "2.00 MiB (8.00Ψ)", "2.00 MiB (8.00Ψ)",
                                                   "2.00 MiB (8.00Ψ)"}));
  EXPECT_EQ(cells(l[5]), (std::vector<std::string>{"comm", "0.00 MiB (0.00Ψ)", "0.00 MiB (0.00Ψ)",
                                                   "0.00 MiB (0.00Ψ)"}));
  EXPECT_EQ(cells(l[6]), (std::vector<std::string>{"activations", "0.50 MiB (2.00Ψ)", "0.50 MiB (2.00Ψ)", "-"}));
  // Total now 14Ψ; its peak is also 14Ψ (the 4Ψ of grads were freed before the
  // optimizer state came), not the 18Ψ sum of the category peaks.
  const auto total = cells(l[8]);
  ASSERT_GE(total.size(), 4u);
  EXPECT_EQ(total[0], "total");
  EXPECT_EQ(total[1], "3.50 MiB (14.00Ψ)");
  EXPECT_EQ(total[2], "3.50 MiB (14.00Ψ)");
  EXPECT_EQ(total[3], "4.00 MiB (16.00Ψ) (params + grads + optimizer + comm)");
}

// Ψ = 1000 f32 + Adam at 4 ranks, buckets 4Ψ: stage totals 20Ψ, 10Ψ, 7Ψ, 4Ψ exactly.
TEST(MemoryReport, PlanTableHasEveryStage) {
  const parallel::MemoryPlanInput in{.param_elements = 1000,
                                     .bytes_per_element = 4,
                                     .optimizer_states = 2,
                                     .world_size = 4,
                                     .zero_stage = 0,
                                     .ddp_bucket_bytes = 4000,
                                     .flat_units = {}};
  const auto l = lines_of(format_plan_table(in, 2));
  ASSERT_EQ(l.size(), 5u);
  const std::vector<std::vector<std::string>> want = {
      {"0", "DDP", "0.00 MiB (4.00Ψ)", "0.00 MiB (4.00Ψ)", "0.01 MiB (8.00Ψ)", "0.00 MiB (4.00Ψ)",
       "0.02 MiB (20.00Ψ)", "20000"},
      {"1", "ZeRO-1", "0.00 MiB (4.00Ψ)", "0.00 MiB (4.00Ψ)", "0.00 MiB (2.00Ψ)", "0.00 MiB (0.00Ψ)",
       "0.01 MiB (10.00Ψ)", "10000"},
      {"2", "ZeRO-2", "0.00 MiB (4.00Ψ)", "0.00 MiB (1.00Ψ)", "0.00 MiB (2.00Ψ)", "0.00 MiB (0.00Ψ)",
       "0.01 MiB (7.00Ψ)", "7000", "<- configured"},
      {"3", "ZeRO-3", "0.00 MiB (1.00Ψ)", "0.00 MiB (1.00Ψ)", "0.00 MiB (2.00Ψ)", "0.00 MiB (0.00Ψ)",
       "0.00 MiB (4.00Ψ)", "4000"}};
  for (size_t s = 0; s < 4; ++s) EXPECT_EQ(cells(l[s + 1]), want[s]) << l[s + 1];
}

}  // namespace
}  // namespace strata::apps
