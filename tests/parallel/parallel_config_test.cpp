// The `parallel:` config section: defaults, every key read, errors naming the key path.
#include <gtest/gtest.h>

#include "parallel/parallel_config.h"

namespace strata::parallel {
namespace {

ParallelConfig load(const std::string& yaml) {
  ConfigNode root = ConfigNode::load_string(yaml);
  ParallelConfig c = ParallelConfig::from_node(root.child("parallel"));
  root.check_unknown_keys();
  return c;
}

std::string error_of(const std::string& yaml) {
  try {
    load(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ParallelConfig, DefaultsMatchPyTorch) {
  ParallelConfig c = load("parallel: {}\n");
  EXPECT_EQ(c.mode, "none");
  EXPECT_EQ(c.ddp.bucket_cap_mb, 25.0);
  EXPECT_FALSE(c.ddp.find_unused_parameters);
  EXPECT_TRUE(c.ddp.broadcast_buffers);
  EXPECT_FALSE(c.ddp.gradient_as_bucket_view);
  EXPECT_EQ(c.zero_stage, 0);
  EXPECT_TRUE(c.fsdp_prefetch);
}

TEST(ParallelConfig, ReadsEveryKey) {
  ParallelConfig c = load(
      "parallel: {mode: ddp, replicas: 3, bucket_cap_mb: 5, first_bucket_mb: 0.5, last_bucket_mb: 0.25,\n"
      "           find_unused_parameters: true, broadcast_buffers: false, gradient_as_bucket_view: true,\n"
      "           zero_stage: 2, fsdp_prefetch: false}\n");
  EXPECT_EQ(c.mode, "ddp");
  EXPECT_EQ(c.replicas, 3);
  EXPECT_EQ(c.dp_options().replicas, 3);
  EXPECT_EQ(c.ddp.bucket_cap_mb, 5.0);
  EXPECT_EQ(c.ddp.first_bucket_mb, 0.5);
  EXPECT_EQ(c.ddp.last_bucket_mb, 0.25);
  EXPECT_TRUE(c.ddp.find_unused_parameters);
  EXPECT_FALSE(c.ddp.broadcast_buffers);
  EXPECT_TRUE(c.ddp.gradient_as_bucket_view);
  EXPECT_EQ(c.zero_stage, 2);
  EXPECT_FALSE(c.fsdp_prefetch);
}

TEST(ParallelConfig, ZeroStageNeedsDdpAndARange) {
  for (int stage = 0; stage <= 3; ++stage)
    EXPECT_EQ(load("parallel: {mode: ddp, zero_stage: " + std::to_string(stage) + "}\n").zero_stage, stage);
  EXPECT_EQ(load("parallel: {mode: dp, zero_stage: 0}\n").zero_stage, 0);
  EXPECT_EQ(error_of("parallel: {mode: ddp, zero_stage: 4}\n"),
            "parallel.zero_stage: expected a value in [0, 3], got 4 (line 1)");
  EXPECT_NE(error_of("parallel: {mode: ddp, zero_stage: -1}\n").find("parallel.zero_stage"), std::string::npos);
  EXPECT_EQ(error_of("parallel:\n  mode: none\n  zero_stage: 1\n"),
            "parallel.zero_stage: is 1 but ZeRO stages need parallel.mode ddp, got 'none' (use zero_stage 0, or "
            "mode ddp) (line 3)");
  EXPECT_NE(error_of("parallel: {mode: dp, zero_stage: 3}\n").find("parallel.zero_stage"), std::string::npos);
  EXPECT_NE(error_of("parallel: {fsdp_prefetch: maybe}\n").find("parallel.fsdp_prefetch"), std::string::npos);
  // validate() on a struct built in code names the key too.
  ParallelConfig c;
  c.zero_stage = 2;
  try {
    c.validate();
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.zero_stage"), std::string::npos) << e.what();
  }
}

TEST(ParallelConfig, ErrorsNameTheKey) {
  EXPECT_NE(error_of("parallel: {mode: zero}\n").find("parallel.mode"), std::string::npos);
  EXPECT_NE(error_of("parallel: {bucket_cap_mb: 0}\n").find("parallel.bucket_cap_mb"), std::string::npos);
  EXPECT_NE(error_of("parallel: {replicas: 0}\n").find("parallel.replicas"), std::string::npos);
  EXPECT_NE(error_of("parallel: {bucket_cap: 5}\n").find("parallel.bucket_cap"), std::string::npos);
  EXPECT_NE(error_of("parallel: {last_bucket_mb: -2}\n").find("parallel.last_bucket_mb"), std::string::npos);
  DDPOptions bad{.first_bucket_mb = -1};
  EXPECT_THROW(bad.validate(), ConfigError);
}

}  // namespace
}  // namespace strata::parallel
