// metrics.jsonl across resumes: every training step and every evaluation is recorded once,
// whether a finished run is resumed (it evaluates again) or an interrupted one continues
// from a checkpoint older than its last records.
#include "apps/progress.h"
#include "apps/trainer.h"
#include "tests/apps/test_files.h"
#include "tests/temp_dir_fixture.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <utility>

namespace strata::apps {
namespace {

class MetricsResumeTest : public strata::testing::TempDirTest {};

// (type, step) -> how many records metrics.jsonl holds.
std::map<std::pair<std::string, int64_t>, int> record_counts(const std::string& run_dir) {
  std::ifstream f(run_dir + "/metrics.jsonl");
  std::map<std::pair<std::string, int64_t>, int> n;
  std::string line;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    ++n[{j["type"].get<std::string>(), j["step"].get<int64_t>()}];
  }
  return n;
}

void train(const std::vector<std::string>& sets) {
  Trainer t(TrainConfig::load(kTinyMlp, sets), {.verbose = false});
  t.train();
}

// tiny_mlp: 20 steps, a train record every step, evaluations at steps 10 and 20.
void expect_each_once(const std::string& run) {
  const auto n = record_counts(run);
  for (int64_t s = 1; s <= 20; ++s) EXPECT_EQ((n.count({"train", s}) ? n.at({"train", s}) : 0), 1) << "step " << s;
  EXPECT_EQ(n.at({"eval", 10}), 1);
  EXPECT_EQ(n.at({"eval", 20}), 1);
  EXPECT_EQ(n.size(), 22u);
}

TEST_F(MetricsResumeTest, ResumingAFinishedRunRecordsItsFinalEvaluationOnce) {
  const std::string run = path("run");
  train({"run.dir=" + run});
  expect_each_once(run);
  train({"run.dir=" + run, "train.resume=auto"});
  expect_each_once(run);
}

TEST_F(MetricsResumeTest, ResumingFromAnOlderCheckpointDropsTheRecordsAfterIt) {
  const std::string run = path("run");
  train({"run.dir=" + run, "train.checkpoint_every=10"});
  train({"run.dir=" + run, "train.resume=" + run + "/checkpoints/step_00000010"});
  expect_each_once(run);
}

TEST_F(MetricsResumeTest, PruneKeepsEarlierRecordsAndUnparsableLinesInOrder) {
  const std::string file = path("metrics.jsonl");
  {
    std::ofstream f(file);
    f << R"({"type":"train","step":9})" << "\n"
      << "not json\n"
      << R"({"type":"eval","step":10})" << "\n"
      << R"({"type":"train","step":11})" << "\n";
  }
  prune_metrics_for_resume(file, 10, 20);  // a mid-run evaluation at the checkpoint's step stays
  std::ifstream f(file);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_EQ(text.str(), "{\"type\":\"train\",\"step\":9}\nnot json\n{\"type\":\"eval\",\"step\":10}\n");
  prune_metrics_for_resume(file, 10, 10);  // at the last step the final evaluation is redone
  std::ifstream g(file);
  std::stringstream again;
  again << g.rdbuf();
  EXPECT_EQ(again.str(), "{\"type\":\"train\",\"step\":9}\nnot json\n");
  prune_metrics_for_resume(path("absent.jsonl"), 1, 1);
  EXPECT_FALSE(std::filesystem::exists(path("absent.jsonl")));
}

}  // namespace
}  // namespace strata::apps
