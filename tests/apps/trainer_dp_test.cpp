// `strata train` with parallel.replicas (DataParallel thread replicas) against one process:
// same losses and weights after k steps, a prefix-free checkpoint that a single-process
// eval loads, bit-exact dp resume; the ZeRO stage refusal; and the end-of-run memory
// report (allocator bytes by category vs the planner).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "apps/memory_report.h"
#include "apps/trainer.h"
#include "tests/apps/test_files.h"
#include "tests/temp_dir_fixture.h"

namespace strata::apps {
namespace {

namespace fs = std::filesystem;


class TrainerDpTest : public strata::testing::TempDirTest {
 protected:
};

std::vector<double> train_losses(const std::string& run_dir) {
  std::ifstream f(run_dir + "/metrics.jsonl");
  std::vector<double> out;
  std::string line;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "train") out.push_back(j["loss"].get<double>());
  }
  return out;
}

// Max over tensors of max|a - b| / (max|b| + 1e-12).
double max_rel_diff(const NamedTensors& a, const NamedTensors& b, std::string* worst) {
  double err = 0;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    const auto x = a[i].second.to_vector<float>(), y = b[i].second.to_vector<float>();
    EXPECT_EQ(x.size(), y.size()) << a[i].first;
    double d = 0, scale = 1e-12;
    for (size_t k = 0; k < std::min(x.size(), y.size()); ++k) {
      d = std::max(d, double(std::abs(x[k] - y[k])));
      scale = std::max(scale, double(std::abs(y[k])));
    }
    if (d / scale > err) {
      err = d / scale;
      *worst = a[i].first;
    }
  }
  return err;
}

struct RunResult {
  std::vector<double> losses;
  NamedTensors weights;  // the final checkpoint's model.safetensors
  EvalResult eval;
};

// Trains `yaml` with `sets` plus mode/replicas into <dir>/<name> and reads back the run.
RunResult train_run(const std::string& yaml, std::vector<std::string> sets, const std::string& dir, int replicas = 0) {
  sets.push_back("run.dir=" + dir);
  if (replicas > 0) {
    sets.push_back("parallel.replicas=" + std::to_string(replicas));
  }
  Trainer t(TrainConfig::load(yaml, sets), {.verbose = false});
  EXPECT_EQ(t.data_parallel() != nullptr, replicas > 0);
  if (replicas > 0) {
    EXPECT_EQ(t.data_parallel()->replicas(), replicas);
  }
  EXPECT_EQ(t.world_size(), 1);
  RunResult r;
  r.eval = t.train();
  r.losses = train_losses(dir);
  r.weights = parallel::read_checkpoint(dir, false).model;
  return r;
}

void expect_same_run(const RunResult& dp, const RunResult& none, const std::string& what) {
  ASSERT_EQ(dp.losses.size(), none.losses.size()) << what;
  ASSERT_FALSE(none.losses.empty());
  for (size_t i = 0; i < none.losses.size(); ++i)
    EXPECT_NEAR(dp.losses[i], none.losses[i], 1e-5 * std::abs(none.losses[i])) << what << " step " << i + 1;
  std::string worst;
  const double err = max_rel_diff(dp.weights, none.weights, &worst);
  EXPECT_LT(err, 1e-5) << what << ": worst tensor " << worst;
  EXPECT_NEAR(dp.eval.loss, none.eval.loss, 1e-5 * std::abs(none.eval.loss)) << what;
}

// The MLP with Adam, clipping, a cosine schedule and 2 micro-batches per step (batch 16
// in chunks 8/8 or 6/5/5); dropout off so both modes draw the same numbers.
TEST_F(TrainerDpTest, MlpMatchesModeNone) {
  const std::vector<std::string> sets = {"model.dropout=0", "train.max_steps=8", "train.grad_accum_steps=2",
                                         "train.eval_every=0"};
  const RunResult none = train_run(kTinyMlp, sets, path("none"));
  ASSERT_EQ(none.losses.size(), 8u);
  for (int k : {2, 3}) {
    const RunResult dp = train_run(kTinyMlp, sets, path("dp" + std::to_string(k)), k);
    expect_same_run(dp, none, "replicas " + std::to_string(k));
  }
}

// parallel.devices places replica k on devices[k] (an all-CPU list here: the GPU list is
// tests/cuda/device/data_parallel_test.cpp); the replica count follows the list, and
// devices[0] must be run.device, where the model, optimizer and loss live.
TEST_F(TrainerDpTest, DeviceListMatchesModeNone) {
  const std::vector<std::string> sets = {"model.dropout=0", "train.max_steps=6", "train.eval_every=0"};
  const RunResult none = train_run(kTinyMlp, sets, path("none"));
  std::vector<std::string> listed = sets;
  listed.push_back("parallel.devices=[cpu, cpu, cpu]");
  listed.push_back("run.dir=" + path("listed"));
  RunResult dp;
  {
    Trainer t(TrainConfig::load(kTinyMlp, listed), {.verbose = false});
    ASSERT_NE(t.data_parallel(), nullptr);
    EXPECT_EQ(t.data_parallel()->replicas(), 3);
    dp.eval = t.train();
  }
  dp.losses = train_losses(path("listed"));
  dp.weights = parallel::read_checkpoint(path("listed"), false).model;
  expect_same_run(dp, none, "parallel.devices [cpu, cpu, cpu]");
  try {
    TrainConfig::load(kTinyMlp, {"parallel.devices=[cuda:0, cuda:1]"});
    FAIL() << "loaded";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "parallel.devices: devices[0] is cuda:0 but run.device is 'cpu': the model, its optimizer "
                           "and the loss live on devices[0], so set run.device: cuda:0");
  }
}

// The GPT path (token loss on the gathered (B, T, vocab) logits). AdamW's m/(sqrt(v)+eps)
// turns float summation-order noise on near-zero gradients (fresh biases) into 1e-4
// relative weight differences with eps 1e-8; eps 1e-3 keeps the update smooth, so the
// comparison checks the wiring (measured: 2.3e-7).
TEST_F(TrainerDpTest, GptMatchesModeNone) {
  const std::vector<std::string> sets = {"data.path=" + kCorpus,  "model.dropout=0",        "train.max_steps=4",
                                         "optim.eps=1e-3",         "train.save_final=true", "train.eval_batches=2"};
  const RunResult none = train_run(kTinyGpt, sets, path("none"));
  const RunResult dp = train_run(kTinyGpt, sets, path("dp"), 3);  // batch 8 in chunks 3/3/2
  expect_same_run(dp, none, "gpt replicas 3");
}

// The dp checkpoint is a plain one (no "module." prefix): a mode none trainer loads it
// and evaluates to what the dp run reported, and resuming continues the run.
TEST_F(TrainerDpTest, CheckpointLoadsInSingleProcessEval) {
  const std::vector<std::string> sets = {"model.dropout=0", "train.max_steps=5", "train.eval_every=0"};
  const RunResult dp = train_run(kTinyMlp, sets, path("dp"), 2);
  for (const auto& [name, t] : dp.weights) EXPECT_EQ(name.rfind("module.", 0), std::string::npos) << name;

  // What `strata eval` does: mode none, weights from the checkpoint.
  const parallel::Checkpoint ck = parallel::read_checkpoint(path("dp"), false);
  TrainConfig cfg = TrainConfig::load(kTinyMlp, {"run.dir=" + path("eval"), "model.dropout=0"});
  Trainer single(cfg, {.verbose = false, .write_files = false});
  ASSERT_EQ(single.data_parallel(), nullptr);
  parallel::load_into(ck, single.model(), nullptr);
  const EvalResult r = single.evaluate();
  EXPECT_NEAR(r.loss, dp.eval.loss, 1e-6 * std::abs(dp.eval.loss));
  ASSERT_TRUE(r.accuracy && dp.eval.accuracy);
  EXPECT_EQ(*r.accuracy, *dp.eval.accuracy);
  EXPECT_EQ(r.samples, dp.eval.samples);
}

// dp with dropout: a resumed run continues every replica's dropout stream, so k + k
// steps equal 2k steps bit for bit.
TEST_F(TrainerDpTest, ResumeIsBitExactWithDropout) {
  const std::vector<std::string> common = {"model.dropout=0.2", "parallel.replicas=3",
                                           "train.eval_every=0", "schedule.name=constant"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> o = common;
    o.insert(o.end(), extra.begin(), extra.end());
    return o;
  };
  Trainer ta(TrainConfig::load(kTinyMlp, with({"run.dir=" + path("a"), "train.max_steps=8"})), {.verbose = false});
  ta.train();
  {
    Trainer tb(TrainConfig::load(kTinyMlp, with({"run.dir=" + path("b"), "train.max_steps=4"})), {.verbose = false});
    tb.train();
  }
  Trainer tc(TrainConfig::load(kTinyMlp, with({"run.dir=" + path("c"), "train.max_steps=8",
                                               "train.resume=" + path("b")})),
             {.verbose = false});
  tc.train();
  const auto la = train_losses(path("a")), lc = train_losses(path("c"));
  ASSERT_EQ(la.size(), 8u);
  ASSERT_EQ(lc.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(lc[i], la[4 + i]) << "step " << 5 + i;
}

// ZeRO stages on a 1-rank world train exactly like mode none (the multi-rank runs are
// the e2e_zero_matches_ddp ctest and tests/parallel).
TEST_F(TrainerDpTest, ZeroStagesTrainLikeSingleProcess) {
  auto run = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> sets = {"run.dir=" + path("z"), "model.dropout=0", "train.max_steps=5"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    Trainer t(TrainConfig::load(kTinyMlp, sets), {.verbose = false, .write_files = false});
    std::vector<double> losses;
    for (int i = 0; i < 5; ++i) losses.push_back(t.step());
    return losses;
  };
  const std::vector<double> ref = run({});
  for (const std::string stage : {"1", "2", "3"}) {
    const std::vector<double> got = run({"parallel.zero_stage=" + stage});
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5 * std::abs(ref[i])) << "stage " << stage;
  }
  // Thread replicas do not shard: the config itself is refused.
  try {
    TrainConfig::load(kTinyMlp, {"parallel.zero_stage=1", "parallel.replicas=2"});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.zero_stage"), std::string::npos) << e.what();
  }
}

// The planner's prediction for a single-process Adam run against the allocator: while
// the trainer lives it holds exactly 4Ψ of parameters and 8Ψ of Adam state; its peak
// gradient bytes are 4Ψ (DDP's buckets are checked under mpirun, see plan.cmake).
TEST_F(TrainerDpTest, MemoryReportMatchesAllocator) {
  {
    const std::string mode = "none";
    cpu_memory().reset_peaks();  // the grads' peak below is this run's
    const MemStats p0 = cpu_memory().stats(MemCategory::params), o0 = cpu_memory().stats(MemCategory::optimizer),
                   c0 = cpu_memory().stats(MemCategory::comm), g0 = cpu_memory().stats(MemCategory::grads);
    Trainer t(TrainConfig::load(kTinyMlp, {"run.dir=" + path(mode), "train.max_steps=3"}),
              {.verbose = false, .write_files = false});
    t.train();
    const int64_t psi = t.model().num_parameters();
    EXPECT_EQ(psi, 16 * 32 + 32 + 32 * 4 + 4);
    const parallel::MemoryPlan plan = t.predicted_memory();
    EXPECT_EQ(plan.params, 4 * psi);
    EXPECT_EQ(plan.grads, 4 * psi);
    EXPECT_EQ(plan.optimizer, 8 * psi);
    EXPECT_EQ(plan.comm, 0);
    EXPECT_EQ(cpu_memory().stats(MemCategory::params).current - p0.current, plan.params);
    EXPECT_EQ(cpu_memory().stats(MemCategory::optimizer).current - o0.current, plan.optimizer);
    EXPECT_EQ(cpu_memory().stats(MemCategory::comm).current - c0.current, plan.comm);
    // The gradients live from the backward to zero_grad: at their peak exactly the 4Ψ planned.
    EXPECT_EQ(cpu_memory().stats(MemCategory::grads).peak - g0.current, plan.grads);
    const std::string report = t.memory_report();
    EXPECT_NE(report.find("plan for single process at 1 rank(s)"),
              std::string::npos)
        << report;
    EXPECT_NE(report.find("optimizer    "), std::string::npos) << report;
  }
}

TEST_F(TrainerDpTest, DpMemoryReportHasReplicaTable) {
  Trainer t(TrainConfig::load(kTinyMlp, {"run.dir=" + path("dp"), "train.max_steps=2",
                                         "parallel.replicas=3"}),
            {.verbose = false, .write_files = false});
  t.train();
  const std::string report = t.memory_report();
  EXPECT_NE(report.find("plan for DataParallel"), std::string::npos) << report;
  EXPECT_NE(report.find("replica 0 holds"), std::string::npos) << report;
  const int64_t psi = t.model().num_parameters();
  const auto m = t.data_parallel()->memory_report(nullptr);
  ASSERT_EQ(m.size(), 3u);
  for (const auto& r : m) EXPECT_EQ(r.params, 4 * psi);
}

}  // namespace
}  // namespace strata::apps
