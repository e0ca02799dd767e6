// Tensor parallelism (with and without sequence parallelism) and the pipeline schedules
// with run.device cuda: the config and the layout checks accept them in a CUDA build (they
// run over nccl; tests/parallel/mpi/nccl/nccl_layouts_test.cpp trains them on GPUs), and
// the limits they share with the CPU are still refused naming their keys. No GPU needed.
#include <gtest/gtest.h>

#include "apps/config.h"
#include "apps/layout.h"
#include "tests/apps/test_files.h"

namespace strata::apps {
namespace {

// The ConfigError text of loading `yaml` with `sets` and resolving its layout over
// `world` ranks; empty when both pass.
std::string layout_error(const std::string& yaml, std::vector<std::string> sets, int world) {
  try {
    const TrainConfig c = TrainConfig::load(yaml, std::move(sets));
    const parallel::ParallelDims d = resolve_dims(c, world);
    EXPECT_EQ(d.world(), world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

#ifdef STRATA_WITH_CUDA
TEST(CudaLayoutsConfig, TensorSequenceAndPipelineParallelAreAcceptedOnCuda) {
  for (const std::string& yaml : {kTinyGpt, kTinyLlama}) {
    for (const char* dev : {"run.device=cuda", "run.device=cuda:0"}) {
      EXPECT_EQ(layout_error(yaml, {dev, "parallel.tp=2"}, 2), "") << yaml << " " << dev;
      EXPECT_EQ(layout_error(yaml, {dev, "parallel.tp=2", "parallel.sequence_parallel=true"}, 2), "") << yaml;
      EXPECT_EQ(layout_error(yaml, {dev, "parallel.tp=2", "parallel.sequence_parallel=true"}, 4), "") << yaml;
      for (const char* s : {"gpipe", "1f1b", "zb-h1"})
        EXPECT_EQ(layout_error(yaml, {dev, "parallel.pp=2", std::string("parallel.pp_schedule=") + s,
                                      "parallel.microbatches=4"}, 2), "")
            << yaml << " " << s;
      EXPECT_EQ(layout_error(yaml, {dev, "parallel.pp=2", "parallel.tp=2", "parallel.microbatches=2"}, 4), "") << yaml;
      EXPECT_EQ(layout_error(yaml, {dev, "parallel.pp=2", "parallel.tp=2", "parallel.sequence_parallel=true",
                                    "parallel.microbatches=2", "parallel.zero_stage=1"}, 8), "")
          << yaml;
      EXPECT_EQ(layout_error(yaml, {dev, "parallel.pp=2", "run.precision=bf16", "parallel.microbatches=2"}, 2), "")
          << yaml;
    }
  }
  // Interleaved 1F1B: two chunks per rank need 4 blocks.
  EXPECT_EQ(layout_error(kTinyGpt, {"run.device=cuda", "model.n_layer=4", "parallel.pp=2", "parallel.pp_schedule=interleaved",
                                    "parallel.pp_virtual=2", "parallel.microbatches=4"}, 2), "");
}

TEST(CudaLayoutsConfig, TheLayoutLimitsOfEveryDeviceStillNameTheirKeys) {
  const auto starts = [](const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; };
  // The tiny GPT has 2 heads, the tiny Llama 2 key/value heads.
  const std::string heads = layout_error(kTinyGpt, {"run.device=cuda", "parallel.tp=4"}, 4);
  EXPECT_TRUE(starts(heads, "parallel.tp: is 4 but model.n_head = 2")) << heads;
  const std::string f16 = layout_error(kTinyGpt, {"run.device=cuda", "parallel.pp=2", "run.precision=f16"}, 2);
  EXPECT_TRUE(starts(f16, "run.precision: is f16 but the pipeline does not scale its micro-batch losses")) << f16;
  const std::string mb = layout_error(kTinyGpt, {"run.device=cuda", "parallel.pp=2", "parallel.microbatches=3"}, 2);
  EXPECT_TRUE(starts(mb, "parallel.microbatches: is 3")) << mb;
}
#endif

}  // namespace
}  // namespace strata::apps
