// Pipeline schedules as pure data: every rank's list run against the others by the
// simulator (no deadlock, dependencies, each (mb, stage) once), the peak in-flight
// micro-batches of GPipe and 1F1B, and the simulated bubble against the formula.
#include <gtest/gtest.h>

#include <algorithm>

#include <strata/core/error.h>
#include <strata/parallel/pipeline/schedule.h>

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
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved, ScheduleKind::zb_h1})
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
    } else if (s.kind == ScheduleKind::one_f_one_b || s.kind == ScheduleKind::zb_h1) {
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
    // 2 (v m + p - 1) slots, exactly the formula. ZB-H1 (unit F, B and W): 3m slots of
    // work in 3m + p - 1 once m >= p; with fewer micro-batches than stages the W's have
    // no cool-down to fill, and the step is still never longer than 1F1B's with its
    // backward B + W (3 (m + p - 1) slots).
    if (splits_backward(s.kind) && s.microbatches < s.pp) {
      EXPECT_LE(sim.makespan, 3 * (s.microbatches + s.pp - 1)) << name(s);
      continue;
    }
    if (splits_backward(s.kind))
      EXPECT_EQ(sim.makespan, 3 * s.microbatches + s.pp - 1) << name(s);
    else
      EXPECT_EQ(sim.makespan, 2 * (s.virtual_stages * s.microbatches + s.pp - 1)) << name(s);
    EXPECT_NEAR(sim.bubble(), bubble_formula(s), 1e-12) << name(s);
  }
}

// Stages of unequal cost (e.g. the last one also runs the head and the loss): the
// simulator with rank costs against the closed forms, and imbalance_bubble (what `strata
// bench pp` prints for measured busy times) against the simulation.
TEST(PipelineSchedule, UnequalStageCostsMatchTheClosedForms) {
  const std::vector<std::vector<int64_t>> costs = {{1, 2}, {2, 1}, {3, 1, 1}, {1, 1, 4}, {2, 3, 2, 5}, {1, 1, 1, 1}};
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b})
    for (const auto& c : costs)
      for (int m : {1, 2, 4, 7, 16}) {
        const ScheduleShape s{k, int(c.size()), m, 1};
        const ScheduleSim sim = simulate(s, all_lists(s), c);
        ASSERT_EQ(sim.error, "") << name(s);
        double sum = 0, top = 0;
        for (int64_t b : sim.busy) {
          sum += double(b);
          top = std::max(top, double(b));
        }
        const double busiest = 1.0 - top / double(sim.makespan);
        const bool last_heaviest = c.back() == *std::max_element(c.begin(), c.end());
        if (k == ScheduleKind::gpipe || last_heaviest || m == 1) {
          EXPECT_NEAR(busiest, (sum - top) / (sum + (m - 1) * top), 1e-12) << name(s) << " costs " << c.front();
        } else if (m >= s.pp) {  // 1F1B, heavier first stage: back to back from the start
          EXPECT_NEAR(busiest, 0.0, 1e-12) << name(s) << " costs " << c.front();
        }
        std::vector<double> busy(c.begin(), c.end());
        for (double& b : busy) b *= 0.37;  // any unit
        EXPECT_NEAR(imbalance_bubble(s, busy), busiest, 2e-3) << name(s);
        if (sum == top * double(c.size())) {
          EXPECT_NEAR(imbalance_bubble(s, busy), bubble_formula(s), 1e-12) << name(s);
        }
      }
  const ScheduleShape inter{ScheduleKind::interleaved, 2, 4, 2};
  EXPECT_NEAR(imbalance_bubble(inter, {5.0, 5.0}), bubble_formula(inter), 1e-12);
  // A lighter peer hands its work over sooner: the busiest rank idles less than the formula.
  EXPECT_LT(imbalance_bubble(inter, {5.0, 7.0}), bubble_formula(inter));
  EXPECT_NE(simulate(inter, all_lists(inter), {1, 0}).error, "");
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
    if (a.is_compute()) order += a.str() + " ";
  EXPECT_EQ(order, "F0@0 F1@0 F2@0 F3@0 B0@0 F4@0 B1@0 F5@0 B2@0 B3@0 B4@0 B5@0 ");
}

TEST(PipelineSchedule, ReceivesArePostedOneComputeAheadAndSendsRightAfter) {
  // 1F1B steady state on rank 0 of pp 2: the gradient for B(i) is posted before F(i+1)
  // runs, waited just before B(i); F(i+1)'s activation send is posted right after it.
  const ScheduleShape s{ScheduleKind::one_f_one_b, 2, 4, 1};
  std::string l;
  for (const Action& a : build_schedule(s, 0)) l += a.str() + " ";
  EXPECT_NE(l.find("post[recv grad(1,1)<-1] F2@0 post[send act(2,0)->1] wait[recv grad(1,1)<-1] B1@0"),
            std::string::npos)
      << l;
  // The last rank posts the next activation's receive before its current backward.
  std::string l1;
  for (const Action& a : build_schedule(s, 1)) l1 += a.str() + " ";
  EXPECT_NE(l1.find("post[recv act(1,0)<-0] B0@1 post[send grad(0,1)->0] wait[recv act(1,0)<-0] F1@1"),
            std::string::npos)
      << l1;
  // Every list ends waiting for its sends.
  EXPECT_EQ(build_schedule(s, 0).back().kind, Action::Kind::wait);
}

TEST(PipelineSchedule, ChannelsCarryOneKindOneWay) {
  const ScheduleShape s{ScheduleKind::interleaved, 2, 4, 2};
  // act(mb, 1) goes from rank 1 to rank 0 (stage 2: the wrap-around of interleaving),
  // grad(mb, 2) from rank 0 to rank 1.
  EXPECT_EQ(channel_of(s, {CommOp::Dir::send, CommOp::Msg::act, 0, 1, 0}), (Channel{CommOp::Msg::act, 1, 0}));
  EXPECT_EQ(channel_of(s, {CommOp::Dir::recv, CommOp::Msg::grad, 0, 2, 0}), (Channel{CommOp::Msg::grad, 0, 1}));
  EXPECT_EQ(channel_of(s, {CommOp::Dir::recv, CommOp::Msg::act, 3, 0, 0}), (Channel{CommOp::Msg::act, 0, 1}));
}

TEST(PipelineSchedule, SimulatorCatchesBrokenLists) {
  const ScheduleShape s{ScheduleKind::one_f_one_b, 2, 3, 1};
  auto l = all_lists(s);
  {
    // Rank 0 waits for the first gradient before sending anything: rank 1 waits for the
    // first activation. Both wait for good.
    auto bad = l;
    const CommOp g0{CommOp::Dir::recv, CommOp::Msg::grad, 0, 1, 1};
    std::vector<Action> r0{Action{.kind = Action::Kind::post, .mb = -1, .stage = -1, .ops = {g0}},
                           Action{.kind = Action::Kind::wait, .mb = -1, .stage = -1, .ops = {g0}}};
    for (const Action& a : bad[0]) {
      const bool is_g0 = !a.is_compute() && a.ops.size() == 1 && a.ops[0] == g0;
      if (!is_g0) r0.push_back(a);
    }
    bad[0] = r0;
    const std::string e = simulate(s, bad).error;
    EXPECT_NE(e.find("deadlock"), std::string::npos) << e;
  }
  {
    // Two receives of one channel posted in the other order than their sends: the real
    // channel's comm thread would wait on the first for good.
    auto bad = l;
    std::vector<size_t> recv_posts;
    for (size_t i = 0; i < bad[1].size(); ++i)
      if (bad[1][i].kind == Action::Kind::post && bad[1][i].ops[0].dir == CommOp::Dir::recv) recv_posts.push_back(i);
    ASSERT_GE(recv_posts.size(), 2u);
    std::swap(bad[1][recv_posts[0]].ops, bad[1][recv_posts[1]].ops);
    const std::string e = simulate(s, bad).error;
    EXPECT_NE(e.find("out of order"), std::string::npos) << e;
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
  {
    auto bad = l;  // the final wait for the sends dropped
    bad[0].pop_back();
    const std::string e = simulate(s, bad).error;
    EXPECT_NE(e.find("never waits"), std::string::npos) << e;
  }
  {
    auto bad = l;  // a wait for a receive before posting it
    for (size_t i = 0; i < bad[1].size(); ++i)
      if (bad[1][i].kind == Action::Kind::wait) {
        bad[1].insert(bad[1].begin(), bad[1][i]);
        break;
      }
    const std::string e = simulate(s, bad).error;
    EXPECT_NE(e.find("before posting"), std::string::npos) << e;
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
