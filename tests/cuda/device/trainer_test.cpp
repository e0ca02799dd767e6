// `strata train` on a GPU (run.device cuda:0) against the same run on the CPU: the loop
// moves the model, optimizer state and batches to the device, checkpoints cross devices
// in both directions, and bf16 autocast on the GPU tracks the CPU's emulated bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "../cuda_test_util.h"
#include "apps/trainer.h"
#include "tests/apps/test_files.h"
#include "tests/temp_dir_fixture.h"

namespace strata::apps {
namespace {

class CudaTrainerTest : public strata::testing::TempDirTest {};

std::vector<double> train_losses(const std::string& run_dir) {
  std::ifstream f(run_dir + "/metrics.jsonl");
  std::vector<double> out;
  std::string line;
  while (std::getline(f, line))
    if (auto j = nlohmann::json::parse(line); j["type"] == "train") out.push_back(j["loss"].get<double>());
  return out;
}

struct RunResult {
  std::vector<double> losses;
  double eval = 0;
};

RunResult train(const std::string& yaml, std::vector<std::string> sets, const std::string& dir, const std::string& device) {
  sets.push_back("run.dir=" + dir);
  sets.push_back("run.device=" + device);
  Trainer t(TrainConfig::load(yaml, sets), {.verbose = false});
  EXPECT_EQ(t.device().str(), device == "cuda" ? "cuda:0" : device);
  EXPECT_EQ(t.model().parameters()[0].device(), t.device());
  RunResult r;
  r.eval = t.train().loss;
  r.losses = train_losses(dir);
  return r;
}

void expect_close_runs(const RunResult& got, const RunResult& want, double rel, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], rel * std::abs(want.losses[i])) << what << " step " << i + 1;
  EXPECT_NEAR(got.eval, want.eval, rel * std::abs(want.eval)) << what << " eval";
}

const std::vector<std::string> kMlp = {"model.dropout=0", "train.max_steps=8"};
std::vector<std::string> gpt_sets() { return {"data.path=" + kCorpus, "model.dropout=0", "train.max_steps=8"}; }

TEST_F(CudaTrainerTest, MatchesTheCpuRun) {
  STRATA_REQUIRE_GPU();
  expect_close_runs(train(kTinyMlp, kMlp, path("mlp_gpu"), "cuda"), train(kTinyMlp, kMlp, path("mlp_cpu"), "cpu"),
                    1e-4, "mlp");
  expect_close_runs(train(kTinyGpt, gpt_sets(), path("gpt_gpu"), "cuda:0"),
                    train(kTinyGpt, gpt_sets(), path("gpt_cpu"), "cpu"), 1e-4, "gpt");
}

// Train 4 steps on one device, resume for 4 more on the other: the losses equal an
// 8-step run on the CPU (the checkpoint files do not depend on the device).
TEST_F(CudaTrainerTest, CheckpointsMoveBetweenDevices) {
  STRATA_REQUIRE_GPU();
  const RunResult whole = train(kTinyGpt, gpt_sets(), path("whole"), "cpu");
  for (const auto& [first, second] : {std::pair{"cuda:0", "cpu"}, std::pair{"cpu", "cuda:0"}}) {
    const std::string a = path(std::string("first_") + first), b = path(std::string("then_") + second);
    auto sets = gpt_sets();
    sets.push_back("train.max_steps=4");
    sets.push_back("train.save_final=true");
    train(kTinyGpt, sets, a, first);
    auto resume = gpt_sets();
    resume.push_back("train.resume=" + a);
    const RunResult rest = train(kTinyGpt, resume, b, second);
    ASSERT_EQ(rest.losses.size(), 4u);
    for (size_t i = 0; i < 4; ++i)
      EXPECT_NEAR(rest.losses[i], whole.losses[4 + i], 1e-4 * whole.losses[4 + i])
          << first << " -> " << second << " step " << 5 + i;
    EXPECT_NEAR(rest.eval, whole.eval, 1e-4 * whole.eval) << first << " -> " << second;
  }
}

TEST_F(CudaTrainerTest, Bf16AndF16TrackTheCpu) {
  STRATA_REQUIRE_GPU();
  for (const std::string p : {"bf16", "f16"}) {
    auto sets = gpt_sets();
    sets.push_back("run.precision=" + p);
    expect_close_runs(train(kTinyGpt, sets, path(p + "_gpu"), "cuda:0"), train(kTinyGpt, sets, path(p + "_cpu"), "cpu"),
                      p == "bf16" ? 3e-2 : 5e-3, p);
  }
}

}  // namespace
}  // namespace strata::apps
