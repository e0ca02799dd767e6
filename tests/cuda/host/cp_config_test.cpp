// Context parallelism with run.device cuda: the config and the layout checks accept cp
// (alone, with dp, ZeRO, tp and pp, both splits, with dropout) in a CUDA build, where ring
// attention runs on the GPU over nccl (tests/parallel/mpi/nccl/nccl_cp_test.cpp trains it),
// and what cp still cannot run is refused naming its key on the GPU as on the CPU. No GPU
// needed.
#include <gtest/gtest.h>

#include "apps/config.h"
#include "apps/layout.h"
#include "tests/apps/test_files.h"

namespace strata::apps {
namespace {

// The ConfigError text of loading `yaml` with `sets` and resolving its layout over
// `world` ranks; empty when both pass.
std::string cp_layout_error(const std::string& yaml, std::vector<std::string> sets, int world) {
  try {
    const TrainConfig c = TrainConfig::load(yaml, std::move(sets));
    const parallel::ParallelDims d = resolve_dims(c, world);
    EXPECT_EQ(d.world(), world);
    EXPECT_EQ(d.cp, 2);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

#ifdef STRATA_WITH_CUDA
// The tiny GPT has dropout 0.1 (token-wise and attention dropout under cp).
TEST(CudaCpConfig, ContextParallelIsAcceptedOnCuda) {
  for (const std::string& yaml : {kTinyGpt, kTinyLlama})
    for (const char* dev : {"run.device=cuda", "run.device=cuda:0"}) {
      for (const char* split : {"parallel.cp_split=zigzag", "parallel.cp_split=plain"})
        EXPECT_EQ(cp_layout_error(yaml, {dev, "parallel.cp=2", split}, 2), "") << yaml << " " << dev << " " << split;
      EXPECT_EQ(cp_layout_error(yaml, {dev, "parallel.cp=2"}, 4), "") << yaml << ": dp 2 x cp 2";
      EXPECT_EQ(cp_layout_error(yaml, {dev, "parallel.cp=2", "parallel.zero_stage=2"}, 4), "") << yaml;
      EXPECT_EQ(cp_layout_error(yaml, {dev, "parallel.cp=2", "parallel.tp=2"}, 4), "") << yaml;
      EXPECT_EQ(cp_layout_error(yaml, {dev, "parallel.cp=2", "parallel.pp=2", "parallel.microbatches=2"}, 4), "")
          << yaml;
    }
}

TEST(CudaCpConfig, WhatCpCannotRunIsRefusedNamingItsKeyOnCuda) {
  const auto starts = [](const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; };
  const std::string bf16 = cp_layout_error(kTinyGpt, {"run.device=cuda", "parallel.cp=2", "run.precision=bf16"}, 2);
  EXPECT_EQ(bf16, "run.precision: is bf16 but ring attention (parallel.cp > 1) runs in f32 only");
  const std::string sp = cp_layout_error(
      kTinyGpt, {"run.device=cuda", "parallel.cp=2", "parallel.tp=2", "parallel.sequence_parallel=true"}, 4);
  EXPECT_TRUE(starts(sp, "parallel.sequence_parallel: is true but does not compose with parallel.cp > 1")) << sp;
  const std::string block = cp_layout_error(kTinyGpt, {"run.device=cuda", "parallel.cp=2", "model.block_size=30"}, 2);
  EXPECT_TRUE(starts(block, "parallel.cp: is 2 but model.block_size = 30")) << block;
}
#endif

}  // namespace
}  // namespace strata::apps
