// The `parallel:` config section: defaults, every key read, errors naming the key path.
#include <gtest/gtest.h>

#include <strata/parallel/parallel_config.h>

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

TEST(ParallelConfig, HsdpKeysAreReadAndCheckedAtResolve) {
  ParallelConfig c = load("parallel: {zero_stage: 3, dp_shard: 2}\n");
  EXPECT_EQ(c.dims.dp_shard, 2);
  EXPECT_EQ(c.dims.dp_replicate, 0);
  EXPECT_EQ(c.dims.resolve(8).replicate_size(), 4);
  c = load("parallel: {zero_stage: 1, dp_replicate: 2}\n");
  EXPECT_EQ(c.dims.resolve(6).shard_size(), 3);
  EXPECT_EQ(load("parallel: {}\n").dims.dp_shard, 0);
  EXPECT_NE(error_of("parallel: {zero_stage: 1, dp_shard: -2}\n").find("parallel.dp_shard"), std::string::npos);
  EXPECT_NE(error_of("parallel: {zero_stage: 1, dp_replicate: -1}\n").find("parallel.dp_replicate"), std::string::npos);
}

TEST(ParallelConfig, DefaultsMatchPyTorch) {
  ParallelConfig c = load("parallel: {}\n");
  EXPECT_EQ(c.dims.dp, ParallelDims::kAuto);
  EXPECT_EQ(c.dims.tp, 1);
  EXPECT_EQ(c.dims.pp, 1);
  EXPECT_EQ(c.dims.zero_stage, 0);
  EXPECT_FALSE(c.thread_replicas());
  EXPECT_EQ(c.ddp.bucket_cap_mb, 25.0);
  EXPECT_FALSE(c.ddp.find_unused_parameters);
  EXPECT_TRUE(c.ddp.broadcast_buffers);
  EXPECT_FALSE(c.ddp.gradient_as_bucket_view);
  EXPECT_TRUE(c.fsdp_prefetch);
  EXPECT_FALSE(c.sequence_parallel);
}

TEST(ParallelConfig, ReadsEveryKey) {
  ParallelConfig c = load(
      "parallel: {dp: 4, tp: 1, pp: 1, bucket_cap_mb: 5, first_bucket_mb: 0.5, last_bucket_mb: 0.25,\n"
      "           find_unused_parameters: true, broadcast_buffers: false, gradient_as_bucket_view: true,\n"
      "           zero_stage: 2, fsdp_prefetch: false, sequence_parallel: true}\n");
  EXPECT_EQ(c.dims, (ParallelDims{.dp = 4, .tp = 1, .pp = 1, .zero_stage = 2}));
  EXPECT_EQ(c.ddp.bucket_cap_mb, 5.0);
  EXPECT_EQ(c.ddp.first_bucket_mb, 0.5);
  EXPECT_EQ(c.ddp.last_bucket_mb, 0.25);
  EXPECT_TRUE(c.ddp.find_unused_parameters);
  EXPECT_FALSE(c.ddp.broadcast_buffers);
  EXPECT_TRUE(c.ddp.gradient_as_bucket_view);
  EXPECT_FALSE(c.fsdp_prefetch);
  EXPECT_TRUE(c.sequence_parallel);
  EXPECT_EQ(load("parallel: {dp: auto}\n").dims.dp, ParallelDims::kAuto);
  c = load("parallel: {replicas: 3}\n");
  EXPECT_TRUE(c.thread_replicas());
  EXPECT_EQ(c.dp_options().replicas, 3);
}

TEST(ParallelConfig, TheRemovedModeKeyGivesTheNewSpelling) {
  EXPECT_EQ(error_of("parallel:\n  mode: ddp\n"),
            "parallel.mode: was removed ('ddp'): DDP is the default under mpirun: delete the key (parallel.dp: auto "
            "takes every rank; add zero_stage: 1|2|3 for ZeRO) (line 2)");
  EXPECT_NE(error_of("parallel: {mode: dp, replicas: 2}\n").find("parallel.replicas: K"), std::string::npos);
  EXPECT_NE(error_of("parallel: {mode: none}\n").find("delete the key"), std::string::npos);
  EXPECT_NE(error_of("parallel: {mode: tp}\n").find("parallel: {dp: auto, tp: 1, pp: 1, zero_stage: 0}"),
            std::string::npos);
}

TEST(ParallelConfig, ZeroStageRangeAndReplicas) {
  for (int stage = 0; stage <= 3; ++stage)
    EXPECT_EQ(load("parallel: {zero_stage: " + std::to_string(stage) + "}\n").dims.zero_stage, stage);
  EXPECT_EQ(error_of("parallel: {zero_stage: 4}\n"), "parallel.zero_stage: expected a value in [0, 3], got 4 (line 1)");
  EXPECT_NE(error_of("parallel: {zero_stage: -1}\n").find("parallel.zero_stage"), std::string::npos);
  EXPECT_NE(error_of("parallel:\n  replicas: 2\n  zero_stage: 1\n").find("parallel.zero_stage: is 1 but "
                                                                        "parallel.replicas runs thread replicas"),
            std::string::npos);
  EXPECT_NE(error_of("parallel: {fsdp_prefetch: maybe}\n").find("parallel.fsdp_prefetch"), std::string::npos);
  EXPECT_NE(error_of("parallel: {dp: 0}\n").find("parallel.dp"), std::string::npos);
  EXPECT_NE(error_of("parallel: {dp: some}\n").find("parallel.dp"), std::string::npos);
  EXPECT_NE(error_of("parallel: {tp: 0}\n").find("parallel.tp"), std::string::npos);
  // validate() on a struct built in code names the key too.
  ParallelConfig c;
  c.dims.zero_stage = 2;
  c.replicas = 2;
  try {
    c.validate();
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.zero_stage"), std::string::npos) << e.what();
  }
}

TEST(ParallelConfig, ErrorsNameTheKey) {
  EXPECT_NE(error_of("parallel: {bucket_cap_mb: 0}\n").find("parallel.bucket_cap_mb"), std::string::npos);
  EXPECT_NE(error_of("parallel: {replicas: 0}\n").find("parallel.replicas"), std::string::npos);
  EXPECT_NE(error_of("parallel: {bucket_cap: 5}\n").find("parallel.bucket_cap"), std::string::npos);
  EXPECT_NE(error_of("parallel: {last_bucket_mb: -2}\n").find("parallel.last_bucket_mb"), std::string::npos);
  DDPOptions bad{.first_bucket_mb = -1};
  EXPECT_THROW(bad.validate(), ConfigError);
}

TEST(ParallelConfig, DevicesPlaceTheReplicas) {
  const Device cuda0{DeviceType::CUDA, 0}, cuda1{DeviceType::CUDA, 1};
  ParallelConfig c = load("parallel: {devices: [cuda:0, cuda:1]}\n");
  ASSERT_EQ(c.devices.size(), 2u);
  EXPECT_EQ(c.devices[0], cuda0);
  EXPECT_EQ(c.devices[1], cuda1);
  EXPECT_EQ(c.replicas, 2);  // derived from the list
  const DataParallelOptions o = c.dp_options();
  EXPECT_EQ(o.replicas, 2);
  EXPECT_EQ(o.devices, c.devices);
  // block style, "cuda" = cuda:0, an agreeing replica count, repeated cpu entries
  c = load("parallel:\n  replicas: 3\n  devices:\n    - cpu\n    - cpu\n    - cpu\n");
  EXPECT_EQ(c.devices, (std::vector<Device>{kCPU, kCPU, kCPU}));
  EXPECT_EQ(c.dp_options().replicas, 3);
  EXPECT_EQ(load("parallel: {devices: [cuda, cuda:3]}\n").devices,
            (std::vector<Device>{cuda0, {DeviceType::CUDA, 3}}));
  EXPECT_TRUE(load("parallel: {replicas: 4}\n").dp_options().devices.empty());
  // what `--set parallel.devices=[cuda:1,cuda:0]` produces
  ConfigNode root = ConfigNode::load_string("parallel: {replicas: 2}\n", {"parallel.devices=[cuda:1, cuda:0]"});
  EXPECT_EQ(ParallelConfig::from_node(root.child("parallel")).devices, (std::vector<Device>{cuda1, cuda0}));
}

TEST(ParallelConfig, DeviceErrorsNameTheEntry) {
  EXPECT_EQ(error_of("parallel: {devices: [cuda:0, gpu1]}\n"),
            "parallel.devices[1]: 'gpu1' is not a device: expected cpu, cuda or cuda:N (line 1)");
  EXPECT_NE(error_of("parallel: {devices: [cuda:-1]}\n").find("parallel.devices[0]"), std::string::npos);
  EXPECT_NE(error_of("parallel: {devices: [cuda:x]}\n").find("parallel.devices[0]"), std::string::npos);
  EXPECT_EQ(error_of("parallel: {devices: [cuda:0, cuda:1, cuda:0]}\n"),
            "parallel.devices[2]: cuda:0 is listed twice (also parallel.devices[0]); each CUDA device holds one "
            "replica (line 1)");
  EXPECT_NE(error_of("parallel: {devices: [cpu, cuda:0]}\n").find("parallel.devices[1]: is cuda:0"),
            std::string::npos);
  EXPECT_EQ(error_of("parallel: {replicas: 3, devices: [cuda:0, cuda:1]}\n"),
            "parallel.devices: lists 2 device(s) but parallel.replicas is 3 (one replica per device; drop "
            "parallel.replicas to derive it) (line 1)");
  EXPECT_NE(error_of("parallel: {devices: cuda:0}\n").find("parallel.devices"), std::string::npos);
  // validate() on a struct built in code applies the same rules
  ParallelConfig c;
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

// The pipeline keys: parallel.{pp_schedule, microbatches, pp_virtual, pp_layers}.
TEST(PipelineConfig, KeysAndDefaults) {
  ParallelConfig c = load("parallel: {pp: 4}\n");
  EXPECT_EQ(c.pipeline.schedule, ScheduleKind::one_f_one_b);
  EXPECT_EQ(c.pipeline.microbatches, 4);  // one per stage
  EXPECT_EQ(c.pipeline.virtual_stages, 1);
  EXPECT_TRUE(c.pp_layers.empty());
  EXPECT_EQ(c.pipeline.exchanges, PipelineExchanges::automatic);
  EXPECT_EQ(load("parallel: {pp: 2, pp_exchanges: inline}\n").pipeline.exchanges, PipelineExchanges::inline_);
  EXPECT_EQ(load("parallel: {pp: 2, pp_exchanges: thread}\n").pipeline.exchanges, PipelineExchanges::thread);
  c = load("parallel: {pp: 2, pp_schedule: interleaved, microbatches: 6, pp_virtual: 2, pp_layers: [1, 2, 2, 3]}\n");
  EXPECT_EQ(c.pipeline.schedule, ScheduleKind::interleaved);
  EXPECT_EQ(c.pipeline.microbatches, 6);
  EXPECT_EQ(c.pipeline.virtual_stages, 2);
  EXPECT_EQ(c.pp_layers, (std::vector<int64_t>{1, 2, 2, 3}));
  EXPECT_EQ(load("parallel: {pp: 2, pp_schedule: gpipe}\n").pipeline.schedule, ScheduleKind::gpipe);
}

TEST(PipelineConfig, ErrorsNameTheKey) {
  EXPECT_NE(error_of("parallel: {pp: 2, pp_schedule: zb}\n").find("parallel.pp_schedule"), std::string::npos);
  EXPECT_NE(error_of("parallel: {pp: 4, pp_schedule: interleaved, microbatches: 6, pp_virtual: 2}\n")
                .find("parallel.microbatches"),
            std::string::npos);
  EXPECT_NE(error_of("parallel: {pp: 2, pp_virtual: 2}\n").find("parallel.pp_virtual"), std::string::npos);
  EXPECT_NE(error_of("parallel: {pp: 2, microbatches: -1}\n").find("parallel.microbatches"), std::string::npos);
  EXPECT_NE(error_of("parallel: {pp: 2, pp_layers: [3, 1, 1]}\n").find("parallel.pp_layers"), std::string::npos);
  EXPECT_NE(error_of("parallel: {pp: 2, pp_exchanges: nccl}\n").find("parallel.pp_exchanges"), std::string::npos);
  EXPECT_EQ(error_of("parallel: {pp: 1, pp_virtual: 2}\n"), "");  // no pipeline: not checked
}

}  // namespace
}  // namespace strata::parallel
