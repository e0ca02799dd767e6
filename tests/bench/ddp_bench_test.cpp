// bench_ddp on tiny models over a ring (counted bytes): the timed steps fit in the wall
// time the bench ran, the exposed and hidden figures follow from the measured step times
// exactly, Ψ is the models' own parameter count, every part of the breakdown fits inside
// what contains it, the bytes are those of the buckets and buffers, buckets launch during
// backward, and the per-rank memory counted from the tensors is exactly 4Ψ + 4Ψ + 8Ψ + 4Ψ
// (16Ψ with bucket views).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "bench/ddp_bench.h"
#include <strata/comm/local.h>

namespace strata::bench {
namespace {

DDPBenchOptions tiny() {
  DDPBenchOptions o;
  o.gpt = {.vocab = 32, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 16};
  o.gpt_batch = 2;
  o.cnn = {.in_channels = 1, .channels = {2}, .classes = 3, .batch_norm = true, .dropout = 0.0, .image_size = 8,
           .hidden = 8};
  o.cnn_batch = 4;
  o.bucket_caps_mb = {0.001};  // ~1 KiB buckets: several per model
  o.steps = 5;
  o.warmup = 1;
  return o;
}

int64_t param_count(const nn::Module& m) {  // counted here, not by the bench
  int64_t n = 0;
  for (const auto& [name, t] : m.named_parameters()) n += t.numel();
  return n;
}

int64_t buffer_bytes(const nn::Module& m) {
  int64_t b = 0;
  for (const auto& [name, t] : m.named_buffers()) b += t.nbytes();
  return b;
}

// Relations between the figures of one row that any bookkeeping bug would break.
void check_row(const ModelOverlap& m, const OverlapRow& w, int64_t want_bytes) {
  const std::string ctx = m.model + " " + std::to_string(w.cap_mb) + (w.bucket_view ? " views" : " copies");
  // The headline is end to end: each DDP step minus the compute-only step run beside it,
  // median over the steps; hidden follows from it, unclamped.
  ASSERT_EQ(w.steps.size(), m.compute_steps.size()) << ctx;
  std::vector<double> diff, steps = w.steps, compute = m.compute_steps;
  for (size_t i = 0; i < steps.size(); ++i) diff.push_back(steps[i] - compute[i]);
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  EXPECT_EQ(w.exposed_s, med(diff)) << ctx;
  EXPECT_EQ(w.step_s, med(steps)) << ctx;
  EXPECT_EQ(m.compute_step_s, med(compute)) << ctx;
  EXPECT_EQ(w.hidden, 1.0 - w.exposed_s / w.allreduce_s) << ctx;
  // A median of the differences cannot lie outside the range of differences between any
  // DDP step and any compute-only step.
  EXPECT_LE(w.exposed_s, *std::max_element(steps.begin(), steps.end()) - *std::min_element(compute.begin(), compute.end()));
  EXPECT_GE(w.exposed_s, *std::min_element(steps.begin(), steps.end()) - *std::max_element(compute.begin(), compute.end()));
  EXPECT_GT(m.compute_step_s, 0) << ctx;
  EXPECT_GT(m.solo_step_s, 0) << ctx;
  EXPECT_GT(w.allreduce_s, 0) << ctx;
  // Parts timed inside the step, per step: each within the step, the wait within finalize.
  for (double part : {w.broadcast_s, w.hook_s, w.finalize_s}) {
    EXPECT_GE(part, 0) << ctx;
    EXPECT_LE(part, w.step_s) << ctx;
  }
  EXPECT_LE(w.wait_s, w.finalize_s) << ctx;
  EXPECT_GE(w.copy_s, 0) << ctx;
  // One thread cannot use more CPU than the wall time it ran in.
  EXPECT_GE(w.comm_cpu_s, 0) << ctx;
  EXPECT_LE(w.comm_cpu_s, w.step_s) << ctx;
  EXPECT_LE(w.allreduce_cpu_s, w.allreduce_s) << ctx;
  EXPECT_LE(w.launched_in_backward, w.buckets - 1) << ctx;  // the last bucket waits for the last gradient
  // Ring on 2 ranks: each rank sends K for every all-reduced bucket; the buffer broadcast
  // (tree) costs rank 0 the buffers' bytes. Everything counted, nothing modelled.
  EXPECT_EQ(w.bytes_sent, want_bytes) << ctx;
  EXPECT_EQ(w.bytes_kind, "counted") << ctx;
}

TEST(DDPBench, FiguresFollowFromTheMeasuredSteps) {
  const DDPBenchOptions o = tiny();
  comm::CommOptions co;
  co.algorithm = comm::Algorithm::ring;
  DDPBenchReport r;
  std::mutex mu;
  const auto t0 = std::chrono::steady_clock::now();
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    DDPBenchReport mine = bench_ddp(g, o);
    std::lock_guard<std::mutex> lk(mu);
    if (g.rank() == 0) r = mine;
  }, co);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The timed steps ran one after another inside this call: together they fit in its wall time.
  double timed_s = 0;
  for (const ModelOverlap* m : {&r.gpt, &r.cnn}) {
    for (double t : m->compute_steps) timed_s += t;
    for (const auto& w : m->rows)
      for (double t : w.steps) timed_s += t;
  }
  EXPECT_GT(timed_s, 0);
  EXPECT_LE(timed_s, wall_s) << "the steps' times add up to more than the bench ran";
  EXPECT_EQ(r.ranks, 2);
  EXPECT_EQ(r.backend, "local");
  EXPECT_EQ(r.algorithm, "ring");

  Generator gen(5);
  const nn::CNN cnn(o.cnn, gen);
  const int64_t cnn_buffers = buffer_bytes(cnn);
  const int64_t psi = param_count(nn::GPT(o.gpt, gen));  // Ψ of the GPT, counted here
  EXPECT_EQ(r.gpt.params, psi);
  EXPECT_EQ(r.cnn.params, param_count(cnn));
  ASSERT_EQ(r.gpt.rows.size(), 3u);  // 25 MiB views, 25 MiB copies, 0.001 MiB views
  ASSERT_EQ(r.cnn.rows.size(), 2u);
  for (const auto& w : r.gpt.rows) check_row(r.gpt, w, 4 * psi);
  for (const auto& w : r.cnn.rows) check_row(r.cnn, w, 4 * param_count(cnn) + cnn_buffers);
  EXPECT_TRUE(r.gpt.rows[0].bucket_view);
  EXPECT_FALSE(r.gpt.rows[1].bucket_view);
  // Small buckets, laid out in backward's order after the first step: all but the ones
  // the last gradients complete go out while backward still runs.
  const OverlapRow& small = r.gpt.rows[2];
  EXPECT_GT(small.buckets, 4);
  EXPECT_GE(small.launched_in_backward, small.buckets / 2);

  EXPECT_EQ(r.psi, psi);
  EXPECT_EQ(r.tally.params, 4 * psi);
  EXPECT_EQ(r.tally.grads, 4 * psi);
  EXPECT_EQ(r.tally.buckets, 4 * psi);
  EXPECT_EQ(r.tally.optimizer, 8 * psi);
  EXPECT_EQ(r.tally.total(), 20 * psi);
  EXPECT_EQ(r.tally_view.grads, 0);
  EXPECT_EQ(r.tally_view.total(), 16 * psi);
  // The MemoryTracker sees the same categories (GPT has no buffers, so params match exactly).
  EXPECT_EQ(r.tracked.params, 4 * psi);
  EXPECT_EQ(r.tracked.grads, 4 * psi);
  EXPECT_EQ(r.tracked.buckets, 4 * psi);
  EXPECT_EQ(r.tracked.optimizer, 8 * psi);
  EXPECT_EQ(r.tracked_view.grads, 0);
  EXPECT_EQ(r.tracked_view.buckets, 4 * psi);
  const std::string text = r.to_string();
  EXPECT_NE(text.find("exposed = DDP step - compute-only step"), std::string::npos) << text;
  for (const auto& w : r.gpt.rows) EXPECT_EQ(w.steps.size(), 5u);
  EXPECT_NE(text.find("(counted)"), std::string::npos) << text;
  EXPECT_EQ(text.find("finalize wait) |"), std::string::npos) << "the old finalize-wait headline is gone";
}

TEST(DDPBench, NativeBytesAreLabelledModelled) {
  DDPBenchOptions o = tiny();
  o.bucket_caps_mb = {};
  o.steps = 1;
  const DDPBenchReport r = bench_ddp_local(2, o);
  EXPECT_EQ(r.algorithm, "auto");
  for (const auto& w : r.gpt.rows) {
    EXPECT_EQ(w.bytes_kind, "modelled");
    EXPECT_EQ(w.bytes_sent, 4 * r.gpt.params);  // the bus model of a 2-rank all-reduce: K
  }
}

}  // namespace
}  // namespace strata::bench
