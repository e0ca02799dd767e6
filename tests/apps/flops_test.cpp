// Model FLOPs per sample (the count MFU is reported from) and the mfu field of
// metrics.jsonl against a given run.peak_flops.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/factory.h"
#include "apps/flops.h"
#include "apps/trainer.h"
#include "tests/apps/test_files.h"
#include "tests/temp_dir_fixture.h"

namespace strata::apps {
namespace {

class FlopsTest : public strata::testing::TempDirTest {};

double flops_of(const std::string& yaml, const std::vector<std::string>& sets) {
  return train_flops_per_sample(TrainConfig::load(yaml, sets));
}

TEST_F(FlopsTest, DirectCountsAndTheGptEstimate) {
  // tiny_mlp: 16 -> 32 -> 4: 3 x 2 x (16*32 + 32*4) per sample.
  EXPECT_DOUBLE_EQ(flops_of(kTinyMlp, {}), 3.0 * 2.0 * (16 * 32 + 32 * 4));
  // Fashion CNN, channels [4, 8], hidden 16: conv1 1->4 at 28x28, conv2 4->8 at 14x14, then
  // 8*7*7 -> 16 -> 10.
  const double cnn = 3.0 * 2.0 * (4 * 1 * 9 * 28 * 28 + 8 * 4 * 9 * 14 * 14 + 8 * 7 * 7 * 16 + 16 * 10);
  EXPECT_DOUBLE_EQ(flops_of(kSrc + "/configs/fashion_cnn.yaml", {"model.channels=[4, 8]", "model.hidden=16",
                                                                  "model.batch_norm=false"}),
                   cnn);
  // GPT: (6N + 12 L C T) per token, T tokens.
  const TrainConfig g = TrainConfig::load(kTinyGpt, {"data.path=" + kCorpus});
  Generator gen(0);
  const auto model = build_model(g, gen);
  const double t = double(g.model.block_size);
  EXPECT_DOUBLE_EQ(train_flops_per_sample(g),
                   (6.0 * double(model->num_parameters()) + 12.0 * double(g.model.n_layer * g.model.n_embd) * t) * t);
}

TEST_F(FlopsTest, MetricsCarryMfuAgainstTheGivenPeak) {
  const std::string run = path("r");
  Trainer t(TrainConfig::load(kTinyMlp, {"run.dir=" + run, "train.max_steps=4", "train.log_every=2",
                                         "run.peak_flops=1e6"}),
            {.verbose = false});
  t.train();
  std::ifstream f(run + "/metrics.jsonl");
  std::string line;
  int seen = 0;
  const double per_step = 3.0 * 2.0 * (16 * 32 + 32 * 4) * 16;  // batch 16
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] != "train") continue;
    ++seen;
    // flops/s = steps/s x FLOPs per step; mfu = flops/s / world / peak.
    const double steps_per_s = j["throughput"].get<double>() / 16.0;
    EXPECT_NEAR(j["flops_per_s"].get<double>(), steps_per_s * per_step, 1e-6 * steps_per_s * per_step);
    EXPECT_NEAR(j["mfu"].get<double>(), j["flops_per_s"].get<double>() / 1e6, 1e-9 * j["mfu"].get<double>());
  }
  EXPECT_EQ(seen, 2);
}

}  // namespace
}  // namespace strata::apps
