// Context parallelism through parallelize(): the GPT trained k AdamW steps (with gradient
// clipping) at cp 2, cp 4, dp 2 x cp 2, cp 2 x tp 2 and cp 2 with ZeRO-2/3, on local
// ranks, equals one process: losses, gradient norms, parameters and rank 0's evaluation
// of the whole model afterwards (the cp hooks suspended); in f64 to 1e-9, in f32 losses
// and norms to 1e-5.
#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/comm/local.h>
#include <strata/nn/gpt.h>
#include "cp_harness.h"

namespace strata::testing::cp {
namespace {

void check(const CpCase& c) {
  comm::run_local(c.dp * c.cp * c.tp, [&](comm::ProcessGroup& w) { check_on(w, c); });
}

TEST(ContextParallel, GptCp2EqualsOneProcess) { check({.cp = 2}); }
// The Llama's rotary embedding takes each zigzag chunk's global positions (the positions
// hook): a wrong position changes q and k and every loss after step 0.
TEST(ContextParallel, LlamaCp2ZigzagEqualsOneProcess) {
  check({.cp = 2, .model = "llama"});
  check({.cp = 4, .model = "llama_mqa"});
  check({.dp = 2, .cp = 2, .stage = 3, .model = "llama_ckpt"});
  check({.cp = 2, .tp = 2, .model = "llama", .f64 = false});
}
TEST(ContextParallel, GptCp2PlainSplit) { check({.cp = 2, .split = CpSplit::plain}); }
TEST(ContextParallel, GptCp4EqualsOneProcess) { check({.cp = 4}); }
TEST(ContextParallel, GptDp2Cp2EqualsOneProcess) { check({.dp = 2, .cp = 2}); }
// f32: tensor parallelism's summon_full_params builds its whole Linears in f32.
TEST(ContextParallel, GptCp2Tp2EqualsOneProcess) { check({.cp = 2, .tp = 2, .f64 = false}); }
TEST(ContextParallel, GptCp2Zero2EqualsOneProcess) { check({.cp = 2, .stage = 2}); }
TEST(ContextParallel, GptDp2Cp2Zero3EqualsOneProcess) { check({.dp = 2, .cp = 2, .stage = 3}); }
TEST(ContextParallel, GptCp2WithActivationCheckpointing) { check({.cp = 2, .model = "gpt_ckpt"}); }
// The same model in f32 (the CLI's dtype): losses and norms to 1e-5, states to 1e-4.
TEST(ContextParallel, GptF32Cp2AndDp2Cp2) {
  check({.cp = 2, .f64 = false});
  check({.dp = 2, .cp = 2, .f64 = false});
}

// The mesh is pp x dp x cp x tp: a cp group is tp-strided, a dp group cp x tp-strided.
TEST(ContextParallel, MeshOrderPutsCpBetweenDpAndTp) {
  const ParallelDims d = ParallelDims{.dp = 2, .tp = 2, .cp = 2}.resolve(8);
  EXPECT_EQ(d.mesh_shape().str(), "pp=1 x dp=2 x cp=2 x tp=2");
  EXPECT_EQ(d.mesh_shape().group_ranks(0, "cp"), (std::vector<int>{0, 2}));
  EXPECT_EQ(d.mesh_shape().group_ranks(0, "dp"), (std::vector<int>{0, 4}));
  EXPECT_EQ(ParallelDims{.cp = 2}.resolve(6).dp, 3);
  EXPECT_THROW((ParallelDims{.tp = 2, .cp = 2}.resolve(6)), ConfigError);
  ModelLimits m;
  m.block_size = 12;  // not divisible by 2 x 4
  EXPECT_THROW((ParallelDims{.cp = 4}.check_model(m)), ConfigError);
  m.block_size = 16;
  EXPECT_NO_THROW((ParallelDims{.cp = 4}.check_model(m)));
}

// summon_full_params() suspends context parallelism (rank 0 evaluates whole sequences
// alone) and puts it back afterwards: the next training step is ring attention again.
TEST(ContextParallel, FullParamsSuspendsAndRestoresTheHooks) {
  comm::run_local(2, [](comm::ProcessGroup& w) {
    std::shared_ptr<comm::ProcessGroup> world(&w, [](comm::ProcessGroup*) {});
    const ParallelDims dims = ParallelDims{.cp = 2}.resolve(2);
    auto model = tpt::tp_model("gpt", st::kModelSeed);
    auto pm = parallelize(model, comm::DeviceMesh(world, dims.mesh_shape()),
                          {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {}, .tp_plan = {},
                           .make_optimizer = tpt::adamw});
    auto* lm = dynamic_cast<nn::GPT*>(model.get());
    ASSERT_NE(lm, nullptr);
    ASSERT_NE(pm->cp(), nullptr);
    EXPECT_EQ(pm->cp()->attention.size(), 2u);
    auto [x, y] = st::make_batch("gpt", 2, 0);
    {
      const ParallelModel::FullParams full = pm->summon_full_params();
      EXPECT_FALSE(lm->lm_hooks().shard_sequence);
      EXPECT_FALSE(lm->lm_hooks().positions);
      NoGradGuard no_grad;
      EXPECT_EQ(lm->forward(x).size(1), 8);  // whole sequences, no communication
    }
    EXPECT_TRUE(lm->lm_hooks().shard_sequence);
    EXPECT_TRUE(lm->lm_hooks().positions);
    NoGradGuard no_grad;
    EXPECT_EQ(lm->forward(x).size(1), 4);  // this rank's half again (ring attention, collective)
  });
}

// Dropout under cp: the attention's masks by global (b, h, i, j) inside ring attention,
// the token-wise ones (embeddings, residual, MLP) by global (b, t, c) (cp_dropout), so the
// run drops exactly what one process drops (the whole model's evaluation afterwards too,
// in training mode: rank 0's generators agree with the reference's).
TEST(ContextParallel, GptCp2WithDropoutEqualsOneProcess) {
  check({.cp = 2, .dropout = 0.2});
  check({.cp = 2, .split = CpSplit::plain, .model = "gpt_ckpt", .dropout = 0.2});
  check({.cp = 4, .f64 = false, .dropout = 0.2});
}

}  // namespace
}  // namespace strata::testing::cp
