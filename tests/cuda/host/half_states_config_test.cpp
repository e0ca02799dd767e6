// run.precision bf16_params / f16_params with run.device cuda: accepted by the config in a
// CUDA build (the CUDA backend has the 16-bit kernels and fused mixed optimizer steps), and
// what stays unsupported with 16-bit states is still refused naming run.precision,
// whatever the device. Validation needs no GPU.
#include <gtest/gtest.h>

#include "apps/config.h"
#include "tests/apps/test_files.h"

namespace strata::apps {
namespace {

std::string config_error(const std::string& yaml, std::vector<std::string> sets) {
  try {
    TrainConfig::load(yaml, std::move(sets));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

#ifdef STRATA_WITH_CUDA
TEST(CudaHalfStatesConfig, SixteenBitStatesAreAcceptedOnCuda) {
  for (const char* p : {"run.precision=bf16_params", "run.precision=f16_params"}) {
    for (const std::string& yaml : {kTinyGpt, kTinyLlama, kTinyMlp}) {
      EXPECT_EQ(config_error(yaml, {"run.device=cuda", p}), "") << yaml << " " << p;
      EXPECT_EQ(config_error(yaml, {"run.device=cuda:0", p, "parallel.zero_stage=2"}), "") << yaml << " " << p;
    }
  }
}

TEST(CudaHalfStatesConfig, WhatStaysUnsupportedIsRefusedOnCudaToo) {
  const std::string pp = config_error(kTinyGpt, {"run.device=cuda", "run.precision=f16_params", "parallel.pp=2"});
  EXPECT_EQ(pp.rfind("run.precision: f16_params (dynamic loss scaling) works on one process", 0), 0u) << pp;
  const std::string rep = config_error(kTinyMlp, {"run.device=cuda", "run.precision=bf16_params", "parallel.replicas=2"});
  EXPECT_EQ(rep.rfind("run.precision: bf16_params works with DDP", 0), 0u) << rep;
}
#endif

}  // namespace
}  // namespace strata::apps
