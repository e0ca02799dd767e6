// bench_ddp on tiny models: every field is filled and sane, and the per-rank memory
// counted from the tensors is exactly 4Ψ + 4Ψ + 8Ψ + 4Ψ (16Ψ with bucket views).
#include <gtest/gtest.h>

#include "parallel/ddp_bench.h"

namespace strata::parallel {
namespace {

TEST(DDPBench, TinyModelsReportSaneNumbers) {
  DDPBenchOptions o;
  o.gpt = {.vocab = 32, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 16};
  o.gpt_batch = 2;
  o.cnn = {.in_channels = 1, .channels = {2}, .classes = 3, .batch_norm = true, .dropout = 0.0, .image_size = 8,
           .hidden = 8};
  o.cnn_batch = 4;
  o.bucket_caps_mb = {0.001, 25};
  o.steps = 2;
  o.warmup = 1;
  const DDPBenchReport r = bench_ddp_local(2, o);
  EXPECT_EQ(r.ranks, 2);
  EXPECT_EQ(r.backend, "local");
  EXPECT_GT(r.compute_step_s, 0);
  EXPECT_GT(r.ddp_step_s, 0);
  EXPECT_GT(r.comm_only_s, 0);
  EXPECT_GE(r.exposed_comm_s, 0);
  EXPECT_GE(r.hidden_fraction, 0);
  EXPECT_LE(r.hidden_fraction, 1);
  ASSERT_EQ(r.caps.size(), 2u);
  EXPECT_GT(r.caps[0].buckets, r.caps[1].buckets);
  EXPECT_GT(r.cnn_samples_s_1, 0);
  EXPECT_GT(r.cnn_samples_s_n, 0);
  EXPECT_GT(r.cnn_samples_s_n_nocomm, 0);
  EXPECT_NEAR(r.scaling_efficiency, r.cnn_samples_s_n / (2 * r.cnn_samples_s_1), 1e-12);

  const int64_t psi = r.psi;
  EXPECT_GT(psi, 0);
  EXPECT_EQ(r.tally.params, 4 * psi);
  EXPECT_EQ(r.tally.grads, 4 * psi);
  EXPECT_EQ(r.tally.buckets, 4 * psi);
  EXPECT_EQ(r.tally.optimizer, 8 * psi);
  EXPECT_EQ(r.tally.total(), 20 * psi);
  EXPECT_EQ(r.tally_view.grads, 0);
  EXPECT_EQ(r.tally_view.total(), 16 * psi);
  // The MemoryTracker sees the same categories (buffers may add to params: GPT's mask is
  // not a parameter, so params match exactly).
  EXPECT_EQ(r.tracked.params, 4 * psi);
  EXPECT_EQ(r.tracked.grads, 4 * psi);
  EXPECT_EQ(r.tracked.buckets, 4 * psi);
  EXPECT_EQ(r.tracked.optimizer, 8 * psi);
  EXPECT_EQ(r.tracked_view.grads, 0);
  EXPECT_EQ(r.tracked_view.buckets, 4 * psi);
  const std::string text = r.to_string();
  EXPECT_NE(text.find("hidden behind backward"), std::string::npos) << text;
}

}  // namespace
}  // namespace strata::parallel
