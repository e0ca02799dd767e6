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
}

TEST(ParallelConfig, ReadsEveryKey) {
  ParallelConfig c = load(
      "parallel: {mode: ddp, replicas: 3, bucket_cap_mb: 5, first_bucket_mb: 0.5, last_bucket_mb: 0.25,\n"
      "           find_unused_parameters: true, broadcast_buffers: false, gradient_as_bucket_view: true}\n");
  EXPECT_EQ(c.mode, "ddp");
  EXPECT_EQ(c.replicas, 3);
  EXPECT_EQ(c.dp_options().replicas, 3);
  EXPECT_EQ(c.ddp.bucket_cap_mb, 5.0);
  EXPECT_EQ(c.ddp.first_bucket_mb, 0.5);
  EXPECT_EQ(c.ddp.last_bucket_mb, 0.25);
  EXPECT_TRUE(c.ddp.find_unused_parameters);
  EXPECT_FALSE(c.ddp.broadcast_buffers);
  EXPECT_TRUE(c.ddp.gradient_as_bucket_view);
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
