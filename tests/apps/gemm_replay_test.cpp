// The GEMM-only ceiling of `strata bench train`: one step's GEMMs are recorded exactly (the
// MLP's count and FLOPs follow from its layers) and the replay runs exactly those calls.
#include <gtest/gtest.h>

#include <mutex>

#include "apps/gemm_replay.h"
#include "tests/apps/test_files.h"
#include "tests/temp_dir_fixture.h"
#include <strata/tensor/cpu/gemm.h>

namespace strata::apps {
namespace {

class GemmReplayTest : public strata::testing::TempDirTest {};

std::mutex g_mu;
std::vector<GemmCall> g_seen;

void seen(DType dt, int64_t m, int64_t n, int64_t k, cpu::MatRef a, cpu::MatRef b, double beta) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (dt == DType::f32) g_seen.push_back({m, n, k, a.ld, b.ld, a.trans, b.trans, beta != 0.0});
}

TEST_F(GemmReplayTest, RecordsTheMlpStepsGemms) {
  // tiny_mlp: 16 -> 32 -> 4, batch 16. Forward: x W1^T (16x32x16), h W2^T (16x4x32);
  // backward: dW2 = dy^T h (4x32x16), dh = dy W2 (16x32x4), dW1 = dh^T x (32x16x16); the
  // input needs no gradient, so no dx.
  Trainer t(TrainConfig::load(kTinyMlp, {"run.dir=" + path("r")}), {.verbose = false, .write_files = false});
  t.step();
  const std::vector<GemmCall> calls = record_step_gemms(t);
  ASSERT_EQ(calls.size(), 5u);
  double flops = 0;
  for (const GemmCall& c : calls) flops += c.flops();
  EXPECT_DOUBLE_EQ(flops, 2.0 * 16 * (3 * 32 * 4 + 2 * 16 * 32));
  EXPECT_EQ(calls[0].m, 16);  // the first call is the first layer's forward
  EXPECT_EQ(calls[0].n, 32);
  EXPECT_EQ(calls[0].k, 16);
  // recording again gives the same sequence (the observer was removed in between)
  EXPECT_EQ(record_step_gemms(t), calls);
}

TEST_F(GemmReplayTest, ReplayRunsExactlyTheRecordedCalls) {
  Trainer t(TrainConfig::load(kTinyGpt, {"run.dir=" + path("g"), "data.path=" + kCorpus}),
            {.verbose = false, .write_files = false});
  t.step();
  const std::vector<GemmCall> calls = record_step_gemms(t);
  ASSERT_FALSE(calls.empty());
  g_seen.clear();
  cpu::set_gemm_observer(&seen);
  const GemmReplayTiming r = replay_gemms(calls, 2);
  cpu::set_gemm_observer(nullptr);
  // one untimed pass and two timed ones, each the recorded sequence in order
  ASSERT_EQ(g_seen.size(), 3 * calls.size());
  for (size_t i = 0; i < g_seen.size(); ++i) ASSERT_EQ(g_seen[i], calls[i % calls.size()]) << "call " << i;
  double flops = 0;
  for (const GemmCall& c : calls) flops += c.flops();
  EXPECT_DOUBLE_EQ(r.flops, flops);
  EXPECT_GT(r.wall_s, 0.0);
  EXPECT_THROW(replay_gemms(calls, 0), Error);
}

}  // namespace
}  // namespace strata::apps
