// Pipeline schedules as pure data: every rank's list run against the others by the
// simulator (no deadlock, dependencies, each (mb, stage) once), the peak in-flight
// micro-batches of GPipe and 1F1B, and the simulated bubble against the formula.
#include <gtest/gtest.h>

#include <strata/core/error.h>
#include <strata/parallel/pipeline_schedule.h>

using namespace strata;
using namespace strata::parallel;

namespace {

std::vector<std::vector<Action>> all_lists(const ScheduleShape& s) {
  std::vector<std::vector<Action>> l;
  for (int r = 0; r < s.pp; ++r) l.push_back(build_schedule(s, r));
  return l;
}

std::vector<ScheduleShape> shapes() {
  std::vector<ScheduleShape> out;
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved})
    for (int pp : {2, 3, 4, 8})
      for (int m : {1, 2, 3, pp, 2 * pp, 2 * pp + 1, 4 * pp, 16})
        for (int v : {1, 2, 3}) {
          ScheduleShape s{k, pp, m, v};
          if (s.invalid().empty()) out.push_back(s);
        }
  return out;
}

std::string name(const ScheduleShape& s) {
  return std::string(schedule_name(s.kind)) + " pp " + std::to_string(s.pp) + " m " + std::to_string(s.microbatches) +
         " v " + std::to_string(s.virtual_stages);
}

}  // namespace

TEST(PipelineSchedule, EveryScheduleRunsWithoutDeadlockAndRespectsDependencies) {
  int n = 0;
  for (const ScheduleShape& s : shapes()) {
    const ScheduleSim sim = simulate(s, all_lists(s));
    EXPECT_EQ(sim.error, "") << name(s);
    ++n;
  }
  EXPECT_GT(n, 100);
}

TEST(PipelineSchedule, PeakInFlightIsMForGPipeAndAtMostPpFor1F1B) {
  for (const ScheduleShape& s : shapes()) {
    const ScheduleSim sim = simulate(s, all_lists(s));
    ASSERT_EQ(sim.error, "") << name(s);
    if (s.kind == ScheduleKind::gpipe) {
      for (int r = 0; r < s.pp; ++r) EXPECT_EQ(sim.peak_in_flight[size_t(r)], s.microbatches) << name(s);
    } else if (s.kind == ScheduleKind::one_f_one_b) {
      EXPECT_EQ(sim.peak_in_flight[0], std::min(s.pp, s.microbatches)) << name(s);
      for (int r = 0; r < s.pp; ++r) EXPECT_LE(sim.peak_in_flight[size_t(r)], s.pp - r) << name(s);
    } else {
      // Megatron's warm-up bound, in chunk-micro-batches: (p - r - 1) * 2 + (v - 1) * p + 1.
      for (int r = 0; r < s.pp; ++r)
        EXPECT_LE(sim.peak_in_flight[size_t(r)], std::min(s.microbatches * s.virtual_stages,
                                                          (s.pp - r - 1) * 2 + (s.virtual_stages - 1) * s.pp + 1))
            << name(s);
    }
  }
}

TEST(PipelineSchedule, SimulatedBubbleEqualsTheFormula) {
  for (const ScheduleShape& s : shapes()) {
    const ScheduleSim sim = simulate(s, all_lists(s));
    ASSERT_EQ(sim.error, "") << name(s);
    // Unit-cost forwards and backwards: every rank computes 2 v m slots in a step of
    // 2 (v m + p - 1) slots, exactly the formula.
    EXPECT_EQ(sim.makespan, 2 * (s.virtual_stages * s.microbatches + s.pp - 1)) << name(s);
    EXPECT_NEAR(sim.bubble(), bubble_formula(s), 1e-12) << name(s);
  }
}

TEST(PipelineSchedule, InterleavedBeatsPlain1F1B) {
  const ScheduleShape plain{ScheduleKind::one_f_one_b, 4, 8, 1}, inter{ScheduleKind::interleaved, 4, 8, 2};
  EXPECT_DOUBLE_EQ(bubble_formula(plain), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_formula(inter), 3.0 / 19.0);
  EXPECT_LT(simulate(inter, all_lists(inter)).bubble(), simulate(plain, all_lists(plain)).bubble());
}

TEST(PipelineSchedule, OneF1BOrderOnRankZero) {
  const ScheduleShape s{ScheduleKind::one_f_one_b, 4, 6, 1};
  std::string order;
  for (const Action& a : build_schedule(s, 0))
    if (a.kind != Action::Kind::comm) order += a.str() + " ";
  EXPECT_EQ(order, "F0@0 F1@0 F2@0 F3@0 B0@0 F4@0 B1@0 F5@0 B2@0 B3@0 B4@0 B5@0 ");
  // The steady state posts the activation send with the gradient receive in one batch.
  const auto l = build_schedule(s, 0);
  bool paired = false;
  for (const Action& a : l)
    if (a.kind == Action::Kind::comm && a.ops.size() == 2 && a.ops[0].dir != a.ops[1].dir) paired = true;
  EXPECT_TRUE(paired);
}

TEST(PipelineSchedule, SimulatorCatchesBrokenLists) {
  const ScheduleShape s{ScheduleKind::one_f_one_b, 2, 3, 1};
  auto l = all_lists(s);
  // Splitting a paired batch into send-then-receive on both ranks deadlocks (rendezvous).
  {
    auto bad = l;
    for (auto& list : bad) {
      std::vector<Action> out;
      for (const Action& a : list) {
        if (a.kind == Action::Kind::comm && a.ops.size() == 2) {
          Action first = a, second = a;
          first.ops = {a.ops[0].dir == CommOp::Dir::send ? a.ops[0] : a.ops[1]};
          second.ops = {a.ops[0].dir == CommOp::Dir::send ? a.ops[1] : a.ops[0]};
          out.push_back(first);
          out.push_back(second);
        } else {
          out.push_back(a);
        }
      }
      list = out;
    }
    EXPECT_NE(simulate(s, bad).error.find("deadlock"), std::string::npos) << simulate(s, bad).error;
  }
  {
    auto bad = l;  // a backward moved before its forward
    auto& r0 = bad[0];
    for (size_t i = 0; i < r0.size(); ++i)
      if (r0[i].kind == Action::Kind::backward) {
        std::swap(r0[0], r0[i]);
        break;
      }
    EXPECT_NE(simulate(s, bad).error, "");
  }
  {
    auto bad = l;  // a forward dropped
    for (size_t i = 0; i < bad[1].size(); ++i)
      if (bad[1][i].kind == Action::Kind::forward && bad[1][i].mb == 2) {
        bad[1].erase(bad[1].begin() + long(i));
        break;
      }
    EXPECT_NE(simulate(s, bad).error, "");
  }
}

TEST(PipelineSchedule, InvalidShapesNameTheKey) {
  EXPECT_NE(ScheduleShape({ScheduleKind::interleaved, 4, 6, 2}).invalid().find("parallel.microbatches"), std::string::npos);
  EXPECT_NE(ScheduleShape({ScheduleKind::one_f_one_b, 2, 4, 2}).invalid().find("parallel.pp_virtual"), std::string::npos);
  EXPECT_THROW(build_schedule({ScheduleKind::interleaved, 4, 6, 2}, 0), ConfigError);
}

TEST(PipelineSchedule, ChartShowsEveryCell) {
  const ScheduleShape s{ScheduleKind::gpipe, 2, 2, 1};
  const std::string c = schedule_chart(s, simulate(s, all_lists(s)));
  EXPECT_NE(c.find("rank 0 | F0 F1 .. .. B0 B1"), std::string::npos) << c;
  EXPECT_NE(c.find("rank 1 | .. F0 F1 B0 B1 .."), std::string::npos) << c;
  EXPECT_NE(c.find("(p-1)/(m+p-1) = 1/3"), std::string::npos) << c;
}
