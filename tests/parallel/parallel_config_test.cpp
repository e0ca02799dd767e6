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

TEST(ParallelConfig, DevicesPlaceTheReplicas) {
  const Device cuda0{DeviceType::CUDA, 0}, cuda1{DeviceType::CUDA, 1};
  ParallelConfig c = load("parallel: {mode: dp, devices: [cuda:0, cuda:1]}\n");
  ASSERT_EQ(c.devices.size(), 2u);
  EXPECT_EQ(c.devices[0], cuda0);
  EXPECT_EQ(c.devices[1], cuda1);
  EXPECT_EQ(c.replicas, 2);  // derived from the list
  const DataParallelOptions o = c.dp_options();
  EXPECT_EQ(o.replicas, 2);
  EXPECT_EQ(o.devices, c.devices);
  // block style, "cuda" = cuda:0, an agreeing replica count, repeated cpu entries
  c = load("parallel:\n  mode: dp\n  replicas: 3\n  devices:\n    - cpu\n    - cpu\n    - cpu\n");
  EXPECT_EQ(c.devices, (std::vector<Device>{kCPU, kCPU, kCPU}));
  EXPECT_EQ(c.dp_options().replicas, 3);
  EXPECT_EQ(load("parallel: {mode: dp, devices: [cuda, cuda:3]}\n").devices,
            (std::vector<Device>{cuda0, {DeviceType::CUDA, 3}}));
  EXPECT_TRUE(load("parallel: {mode: dp, replicas: 4}\n").dp_options().devices.empty());
  // what `--set parallel.devices=[cuda:1,cuda:0]` produces
  ConfigNode root = ConfigNode::load_string("parallel: {mode: dp}\n", {"parallel.devices=[cuda:1, cuda:0]"});
  EXPECT_EQ(ParallelConfig::from_node(root.child("parallel")).devices, (std::vector<Device>{cuda1, cuda0}));
}

TEST(ParallelConfig, DeviceErrorsNameTheEntry) {
  EXPECT_EQ(error_of("parallel: {mode: dp, devices: [cuda:0, gpu1]}\n"),
            "parallel.devices[1]: 'gpu1' is not a device: expected cpu, cuda or cuda:N (line 1)");
  EXPECT_NE(error_of("parallel: {mode: dp, devices: [cuda:-1]}\n").find("parallel.devices[0]"), std::string::npos);
  EXPECT_NE(error_of("parallel: {mode: dp, devices: [cuda:x]}\n").find("parallel.devices[0]"), std::string::npos);
  EXPECT_EQ(error_of("parallel: {mode: dp, devices: [cuda:0, cuda:1, cuda:0]}\n"),
            "parallel.devices[2]: cuda:0 is listed twice (also parallel.devices[0]); each CUDA device holds one "
            "replica (line 1)");
  EXPECT_NE(error_of("parallel: {mode: dp, devices: [cpu, cuda:0]}\n").find("parallel.devices[1]: is cuda:0"),
            std::string::npos);
  EXPECT_EQ(error_of("parallel: {mode: dp, replicas: 3, devices: [cuda:0, cuda:1]}\n"),
            "parallel.devices: lists 2 device(s) but parallel.replicas is 3 (one replica per device; drop "
            "parallel.replicas to derive it) (line 1)");
  EXPECT_NE(error_of("parallel: {mode: ddp, devices: [cuda:0, cuda:1]}\n")
                .find("parallel.devices: places DataParallel replicas and needs parallel.mode dp, got 'ddp'"),
            std::string::npos);
  EXPECT_NE(error_of("parallel: {devices: [cuda:0]}\n").find("got 'none'"), std::string::npos);
  EXPECT_NE(error_of("parallel: {mode: dp, devices: cuda:0}\n").find("parallel.devices"), std::string::npos);
  // validate() on a struct built in code applies the same rules
  ParallelConfig c;
  c.mode = "dp";
  c.devices = {{DeviceType::CUDA, 0}, {DeviceType::CUDA, 1}};
  c.replicas = 2;
  EXPECT_NO_THROW(c.validate());
  c.replicas = 3;
  EXPECT_THROW(c.validate(), ConfigError);
  c.replicas = 2;
  c.devices[1] = c.devices[0];
  try {
    c.validate();
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.devices[1]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::parallel
