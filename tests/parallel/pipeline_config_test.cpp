// The pipeline keys of the `parallel:` section: parallel.{pp_schedule, microbatches,
// pp_virtual, pp_layers}, their defaults and the errors naming the key.
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

TEST(PipelineConfig, KeysAndDefaults) {
  ParallelConfig c = load("parallel: {pp: 4}\n");
  EXPECT_EQ(c.pipeline.schedule, ScheduleKind::one_f_one_b);
  EXPECT_EQ(c.pipeline.microbatches, 4);  // one per stage
  EXPECT_EQ(c.pipeline.virtual_stages, 1);
  EXPECT_TRUE(c.pp_layers.empty());
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
  EXPECT_NE(error_of("parallel: {pp: 2, microbatches: 0}\n").find("parallel.microbatches"), std::string::npos);
  EXPECT_NE(error_of("parallel: {pp: 2, pp_layers: [3, 1, 1]}\n").find("parallel.pp_layers"), std::string::npos);
  EXPECT_EQ(error_of("parallel: {pp: 1, pp_virtual: 2}\n"), "");  // no pipeline: not checked
}

}  // namespace
}  // namespace strata::parallel
