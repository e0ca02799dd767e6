// Tensor, sequence and pipeline parallelism over the nccl backend, one GPU per rank (run
// by strata_test_parallel_nccl's main under `mpirun -np 2` and `-np 4`): each layout
// trains k steps on the GPUs and must give the single-process CPU run's loss per step,
// gradient norm per step and final parameters (tp_harness.h, pipeline_harness.h).
// Tolerance kTol: f32 on the GPU (cuBLAS, CUDA's exp/log, the fused attention) against
// f32 on the CPU (OpenBLAS), as the DDP/ZeRO nccl tests; the Llama of the tp harness is f64.
// At 4 ranks the layouts add dp 2 (DDP over nccl) beside tp or pp.
#include <gtest/gtest.h>

#include "nccl_test_world.h"
#include "pipeline_harness.h"
#include "tp_harness.h"

namespace strata::testing {
namespace {

using parallel::ScheduleKind;

constexpr double kTol = 1e-4;

// The layouts here split 2 ways (tp 2 or pp 2) and give dp the rest.
int dp_beside_two() {
  const int n = g_nccl->size();
  return n % 2 == 0 ? n / 2 : 0;
}

#define STRATA_NEED_EVEN_WORLD()                                                                               \
  do {                                                                                                         \
    if (dp_beside_two() == 0)                                                                                  \
      GTEST_SKIP() << "needs an even number of ranks (one GPU each), got " << g_nccl->size();                  \
  } while (0)

tp::TpCase on_gpu(tp::TpCase c) {
  c.device = g_nccl->device();
  c.tol = kTol;
  return c;
}

TEST(TensorParallelNccl, MlpAtTpN) {
  if (g_nccl->size() < 2) GTEST_SKIP() << "needs 2 or more ranks (one GPU each)";
  tp::check_on(*g_nccl, on_gpu({.model = "mlp", .dp = 1, .tp = g_nccl->size()}));
}

// Column/row-parallel blocks, the vocabulary-parallel embedding and head (tied to it), the
// vocabulary-parallel cross-entropy.
TEST(TensorParallelNccl, GptTp2) {
  STRATA_NEED_EVEN_WORLD();
  tp::check_on(*g_nccl, on_gpu({.model = "gpt", .dp = dp_beside_two(), .tp = 2}));
}

// Sequence parallelism: all-gather / reduce-scatter along T around each block's halves,
// the norms on T/tp rows; with the tied and the untied head.
TEST(TensorParallelNccl, GptTp2SequenceParallel) {
  STRATA_NEED_EVEN_WORLD();
  tp::check_on(*g_nccl, on_gpu({.model = "gpt", .sp = true, .dp = dp_beside_two(), .tp = 2}));
  tp::check_on(*g_nccl, on_gpu({.model = "gpt_untied", .sp = true, .dp = dp_beside_two(), .tp = 2}));
}

// Grouped-query attention (one key/value head per tp rank), SwiGLU, RMSNorm, rotary.
TEST(TensorParallelNccl, LlamaTp2WithAndWithoutSequenceParallel) {
  STRATA_NEED_EVEN_WORLD();
  tp::check_on(*g_nccl, on_gpu({.model = "llama", .dp = dp_beside_two(), .tp = 2}));
  tp::check_on(*g_nccl, on_gpu({.model = "llama", .sp = true, .dp = dp_beside_two(), .tp = 2}));
}

PpCase pp_on_gpu(PpCase c) {
  c.dp = dp_beside_two();
  c.device = g_nccl->device();
  return c;
}

// Activations and gradients as NCCL sends/receives on each channel's communicator; the
// tied embedding's two copies summed over the embedding group.
TEST(PipelineNccl, GptGpipeAnd1F1B) {
  STRATA_NEED_EVEN_WORLD();
  pp_check_on(g_nccl, pp_on_gpu({.kind = ScheduleKind::gpipe, .pp = 2, .m = 3}), kTol);
  pp_check_on(g_nccl, pp_on_gpu({.kind = ScheduleKind::one_f_one_b, .pp = 2, .m = 5, .clip = 0.05}), kTol);
  pp_check_on(g_nccl, pp_on_gpu({.kind = ScheduleKind::one_f_one_b, .pp = 2, .m = 4, .tied = false}), kTol);
}

// Two chunks per rank: the channel from the last rank back to the first carries messages.
TEST(PipelineNccl, GptInterleavedAndZeroBubble) {
  STRATA_NEED_EVEN_WORLD();
  pp_check_on(g_nccl, pp_on_gpu({.kind = ScheduleKind::interleaved, .pp = 2, .m = 2, .v = 2}), kTol);
  pp_check_on(g_nccl, pp_on_gpu({.kind = ScheduleKind::zb_h1, .pp = 2, .m = 3}), kTol);
}

TEST(PipelineNccl, LlamaGpipeAnd1F1B) {
  STRATA_NEED_EVEN_WORLD();
  pp_check_on(g_nccl, pp_on_gpu({.family = "llama", .kind = ScheduleKind::gpipe, .pp = 2, .m = 2, .tied = false, .layers = 4}),
              kTol);
  pp_check_on(g_nccl,
              pp_on_gpu({.family = "llama", .kind = ScheduleKind::one_f_one_b, .pp = 2, .m = 3, .tied = false, .layers = 4}),
              kTol);
}

}  // namespace
}  // namespace strata::testing
