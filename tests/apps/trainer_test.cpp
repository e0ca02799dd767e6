// The training driver end to end, in process: stored losses of a tiny GPT, bit-exact
// resume from a checkpoint, checkpoint validation (nothing loaded partially), and
// the shipped configs all loading.
#include "apps/trainer.h"
#include "tests/apps/test_files.h"
#include "tests/temp_dir_fixture.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <strata/tensor/file_io.h>
#ifdef STRATA_WITH_CUDA
#include <strata/tensor/cuda/runtime.h>
#endif

namespace strata::apps {
namespace {

namespace fs = std::filesystem;

const std::string kGptLossFixture = kSrc + "/tests/data_files/tiny_gpt_losses.json";

class TrainerTest : public strata::testing::TempDirTest {
 protected:
};

struct Record {
  int64_t step;
  double loss;
};

// Training records of <run_dir>/metrics.jsonl.
std::vector<Record> train_records(const std::string& run_dir) {
  std::ifstream f(run_dir + "/metrics.jsonl");
  std::vector<Record> out;
  std::string line;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "train") out.push_back({j["step"].get<int64_t>(), j["loss"].get<double>()});
  }
  return out;
}

std::vector<std::string> gpt_overrides(const std::string& run_dir) {
  return {"run.dir=" + run_dir, "data.path=" + kCorpus};
}

// The stored-loss test. The fixture tiny_gpt_losses.json was generated once by running
// this test with STRATA_REGEN_FIXTURES=1 (threads=1) and committed; a change in any op,
// init, optimizer or data order that moves these losses by more than 1e-5 relative fails.
TEST_F(TrainerTest, TinyGptMatchesStoredLosses) {
  const std::string run = path("gpt");
  Trainer t(TrainConfig::load(kTinyGpt, gpt_overrides(run)), {.verbose = false});
  t.train();
  const auto recs = train_records(run);
  ASSERT_EQ(recs.size(), 10u);
  if (std::getenv("STRATA_REGEN_FIXTURES")) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : recs) j.push_back(r.loss);
    write_file_atomic(kGptLossFixture, j.dump(1) + "\n");
    GTEST_SKIP() << "regenerated " << kGptLossFixture;
  }
  const auto want = nlohmann::json::parse(read_file_text(kGptLossFixture));
  ASSERT_EQ(want.size(), recs.size());
  for (size_t i = 0; i < recs.size(); ++i) {
    const double w = want[i].get<double>();
    EXPECT_NEAR(recs[i].loss, w, 1e-5 * std::abs(w)) << "step " << recs[i].step;
  }
  // Sanity independent of the fixture: the model learns.
  EXPECT_LT(recs.back().loss, recs.front().loss - 0.5);
  EXPECT_NEAR(recs.front().loss, std::log(256.0), 0.3);  // ~uniform over bytes at init
}

// Run 2k steps vs k steps + checkpoint + resume for k: identical losses bit for bit and
// identical final weights. (The schedule must not depend on max_steps: not cosine.) Covers dropout RNG, Adam state, grad accumulation, LR schedule
// and the data loader crossing epoch boundaries.
void check_resume(const std::string& yaml, std::vector<std::string> common, const std::string& base, int64_t k) {
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> o = common;
    o.insert(o.end(), extra.begin(), extra.end());
    return o;
  };
  const std::string a = base + "/a", b = base + "/b", c = base + "/c";
  const std::string two_k = "train.max_steps=" + std::to_string(2 * k);
  Trainer ta(TrainConfig::load(yaml, with({"run.dir=" + a, two_k})), {.verbose = false});
  ta.train();
  {
    Trainer tb(TrainConfig::load(yaml, with({"run.dir=" + b, "train.max_steps=" + std::to_string(k)})),
               {.verbose = false});
    tb.train();
  }
  Trainer tc(TrainConfig::load(yaml, with({"run.dir=" + c, two_k, "train.resume=" + b})), {.verbose = false});
  EXPECT_EQ(tc.step_count(), k);
  tc.train();
  const auto ra = train_records(a), rc = train_records(c);
  ASSERT_EQ(ra.size(), size_t(2 * k));
  ASSERT_EQ(rc.size(), size_t(k));
  for (int64_t i = 0; i < k; ++i) {
    EXPECT_EQ(rc[size_t(i)].step, ra[size_t(k + i)].step);
    EXPECT_EQ(rc[size_t(i)].loss, ra[size_t(k + i)].loss) << "step " << ra[size_t(k + i)].step;  // bit for bit
  }
  const auto pa = ta.model().state_dict(), pc = tc.model().state_dict();
  ASSERT_EQ(pa.size(), pc.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(std::memcmp(pa[i].second.raw_data(), pc[i].second.raw_data(), size_t(pa[i].second.nbytes())), 0)
        << pa[i].first;
}

TEST_F(TrainerTest, ResumeIsBitExactMlp) {
  // 480 train samples / batch 16 = 30 batches = 15 steps per epoch with accum 2.
  check_resume(kTinyMlp,
               {"train.grad_accum_steps=2", "schedule.name=step", "schedule.step_size=7", "schedule.gamma=0.7",
                "train.eval_every=6", "train.log_every=1"},
               dir_.string(), 20);
}

TEST_F(TrainerTest, ResumeIsBitExactGpt) {
  check_resume(kTinyGpt, {"data.path=" + kCorpus, "schedule.name=step", "schedule.step_size=4", "data.prefetch=2",
                          "train.save_final=true"}, dir_.string(), 6);
}

TEST_F(TrainerTest, CnnBatchNormResumeIsBitExact) {
  // BatchNorm running stats are buffers: they must travel in model.safetensors.
  check_resume(kTinyMlp,
               {"model.type=cnn", "model.channels=[4]", "model.batch_norm=true", "model.hidden=16",
                "data.sample_shape=[1, 8, 8]", "train.eval_every=0", "schedule.name=constant"},
               dir_.string(), 5);
}

TEST_F(TrainerTest, MismatchedCheckpointNamesFileAndTensorAndLoadsNothing) {
  const std::string run = path("run");
  {
    Trainer t(TrainConfig::load(kTinyMlp, {"run.dir=" + run, "train.max_steps=3"}), {.verbose = false});
    t.train();
  }
  Trainer other(TrainConfig::load(kTinyMlp, {"run.dir=" + path("other"), "model.hidden=[48]"}), {.verbose = false});
  const auto before = other.model().state_dict();
  std::vector<std::vector<float>> snapshot;
  for (const auto& [n, t] : before) snapshot.push_back(t.to_vector<float>());
  const parallel::Checkpoint ck = parallel::read_checkpoint(run, true);
  try {
    parallel::load_into(ck, other.model(), nullptr);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("shard_00000_of_00001.safetensors"), std::string::npos) << msg;  // the one weights file
    EXPECT_NE(msg.find("'net.1.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32(32,16) but the model expects f32(48,16)"), std::string::npos) << msg;
  }
  const auto after = other.model().state_dict();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].second.to_vector<float>(), snapshot[i]);
}

TEST_F(TrainerTest, TruncatedCheckpointFileFailsBeforeTouchingTheModel) {
  const std::string run = path("run");
  {
    Trainer t(TrainConfig::load(kTinyMlp, {"run.dir=" + run, "train.max_steps=3"}), {.verbose = false});
    t.train();
  }
  const std::string ckdir = parallel::resolve_checkpoint_dir(run);
  const std::string opt_file = ckdir + "/shard_00000_of_00001.safetensors";  // weights and optimizer state
  fs::resize_file(opt_file, fs::file_size(opt_file) - 7);
  try {
    Trainer t(TrainConfig::load(kTinyMlp, {"run.dir=" + path("c"), "train.resume=" + run}), {.verbose = false});
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(opt_file), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  }
  // A live model the truncated checkpoint is loaded into keeps every value it had.
  Trainer other(TrainConfig::load(kTinyMlp, {"run.dir=" + path("other")}), {.verbose = false});
  std::vector<std::vector<float>> snapshot;
  for (const auto& [n, t] : other.model().state_dict()) snapshot.push_back(t.to_vector<float>());
  EXPECT_THROW(other.parallel_model().load_state(*parallel::open_checkpoint(run).reader, /*with_optimizer=*/true),
               DataError);
  const auto after = other.model().state_dict();
  ASSERT_EQ(after.size(), snapshot.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].second.to_vector<float>(), snapshot[i]) << after[i].first;
}

TEST_F(TrainerTest, CheckpointWriteIsAtomicAndReplaces) {
  const std::string run = path("run");
  Trainer t(TrainConfig::load(kTinyMlp, {"run.dir=" + run, "train.max_steps=2", "train.checkpoint_every=1",
                                         "train.keep_checkpoints=1"}),
            {.verbose = false});
  t.train();
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"LATEST", "step_00000002"}));
  EXPECT_EQ(parallel::resolve_checkpoint_dir(run), run + "/checkpoints/step_00000002");
  t.save(run + "/checkpoints/step_00000002");  // overwrite in place
  EXPECT_FALSE(fs::exists(run + "/checkpoints/step_00000002.tmp"));
  EXPECT_FALSE(fs::exists(run + "/checkpoints/step_00000002.old"));
  const parallel::Checkpoint ck = parallel::read_checkpoint(run, true);
  EXPECT_EQ(ck.state.step, 2);
  EXPECT_FALSE(ck.optimizer.empty());
  EXPECT_NE(ck.state.config_yaml.find("dataset: synthetic"), std::string::npos);
}

// Resuming a run from one of its earlier checkpoints: the later ones move aside into
// checkpoints/superseded/ (never deleted), rotation keeps every checkpoint the resumed run
// writes, LATEST names the newest of them, and resume: auto continues from it.
TEST_F(TrainerTest, ResumingFromThePastKeepsWhatItWritesAndSetsTheFutureAside) {
  const std::string run = path("past"), ck = run + "/checkpoints";
  Trainer(TrainConfig::load(kTinyMlp, {"run.dir=" + run, "train.max_steps=9", "train.checkpoint_every=3",
                                       "train.keep_checkpoints=3"}),
          {.verbose = false})
      .train();
  Trainer(TrainConfig::load(kTinyMlp, {"run.dir=" + run, "train.max_steps=5", "train.checkpoint_every=1",
                                       "train.keep_checkpoints=3", "train.resume=" + ck + "/step_00000003"}),
          {.verbose = false})
      .train();
  const auto listing = [](const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  EXPECT_EQ(listing(ck), (std::vector<std::string>{"LATEST", "step_00000003", "step_00000004", "step_00000005",
                                                   "superseded"}));
  EXPECT_EQ(listing(ck + "/superseded"), (std::vector<std::string>{"step_00000006", "step_00000009"}));
  EXPECT_EQ(parallel::resolve_checkpoint_dir(run), ck + "/step_00000005");
  EXPECT_EQ(parallel::read_checkpoint(ck + "/superseded/step_00000009", false).state.step, 9);  // intact
  Trainer again(TrainConfig::load(kTinyMlp, {"run.dir=" + run, "train.max_steps=6", "train.resume=auto"}),
                {.verbose = false});
  EXPECT_EQ(again.step_count(), 5);
}

// train.checkpoint_async: the checkpoints written in the background hold the same bytes
// as the synchronous ones (the snapshot is the step's state, not a later one: a GPT with
// dropout changes every weight each step), LATEST names the last, and rotation keeps
// train.keep_checkpoints of them.
TEST_F(TrainerTest, AsyncCheckpointsEqualSynchronousOnes) {
  const auto run_with = [&](const std::string& name, bool async) {
    const std::string run = path(name);
    auto o = gpt_overrides(run);
    for (const char* kv : {"train.max_steps=6", "train.checkpoint_every=2", "train.keep_checkpoints=2"}) o.push_back(kv);
    o.push_back(std::string("train.checkpoint_async=") + (async ? "true" : "false"));
    Trainer(TrainConfig::load(kTinyGpt, o), {.verbose = false}).train();
    return run + "/checkpoints";
  };
  const std::string sync = run_with("sync", false), async = run_with("async", true);
  for (const char* step : {"step_00000004", "step_00000006"}) {
    const std::string a = async + "/" + step + "/shard_00000_of_00001.safetensors";
    const std::string b = sync + "/" + step + "/shard_00000_of_00001.safetensors";
    ASSERT_TRUE(fs::exists(a)) << a;
    EXPECT_EQ(read_file_bytes(a), read_file_bytes(b)) << step;
  }
  EXPECT_FALSE(fs::exists(async + "/step_00000002"));  // rotated away, as the synchronous run's
  EXPECT_EQ(parallel::resolve_checkpoint_dir(fs::path(async).parent_path().string()), async + "/step_00000006");
}

// Weights that are no longer finite are never committed: the save is refused naming the
// last good checkpoint, which stays LATEST.
TEST_F(TrainerTest, NonFiniteWeightsAreNeverCheckpointed) {
  const std::string run = path("nan"), ck = run + "/checkpoints";
  Trainer t(TrainConfig::load(kTinyMlp, {"run.dir=" + run, "train.max_steps=1", "train.checkpoint_every=1"}),
            {.verbose = false});
  t.train();
  ASSERT_EQ(parallel::resolve_checkpoint_dir(run), ck + "/step_00000001");
  Tensor w = t.model().parameters().front();
  w.data<float>()[0] = NAN;
  try {
    t.save(ck + "/step_00000002");
    FAIL() << "a NaN weight was checkpointed";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("weights are not finite"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the last good checkpoint is '" + ck + "/step_00000001'"), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(ck + "/step_00000002"));
  EXPECT_EQ(parallel::resolve_checkpoint_dir(run), ck + "/step_00000001");
}

// Resuming with another architecture names the model mismatch (the tensors), not a count
// that follows from it (the RNG states).
TEST_F(TrainerTest, ResumeWithAnotherModelNamesTheTensors) {
  const std::string run = path("gpt2");
  const std::vector<std::string> data = {"data.path=" + kCorpus, "train.max_steps=1", "train.save_final=true"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.end(), data.begin(), data.end());
    return more;
  };
  Trainer(TrainConfig::load(kTinyGpt, with({"run.dir=" + run})), {.verbose = false}).train();
  try {
    Trainer(TrainConfig::load(kTinyGpt, with({"run.dir=" + path("gpt1"), "model.n_layer=1", "train.resume=" + run})),
            {.verbose = false});
    FAIL() << "a 1-layer GPT resumed a 2-layer checkpoint";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("holds another model than the config's"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'h.1."), std::string::npos) << msg;
    EXPECT_EQ(msg.find("RNG states"), std::string::npos) << msg;
  }
}

// LATEST that cannot be written after a committed checkpoint (a full disk): the error says
// the checkpoint is complete and how to resume from it.
TEST_F(TrainerTest, LatestWriteFailureNamesTheCommittedCheckpoint) {
  const std::string run = path("latest"), ck = run + "/checkpoints";
  Trainer t(TrainConfig::load(kTinyMlp, {"run.dir=" + run, "train.max_steps=1", "train.checkpoint_every=1"}),
            {.verbose = false});
  fs::create_directories(ck + "/LATEST.tmp." + std::to_string(::getpid()));  // the atomic write's temporary
  try {
    t.train();
    FAIL() << "LATEST was written";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("checkpoint '" + ck + "/step_00000001' (step 1) was committed, but LATEST could not be updated"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("--resume " + ck + "/step_00000001"), std::string::npos) << msg;
  }
  EXPECT_EQ(parallel::read_checkpoint(ck + "/step_00000001", false).state.step, 1);
}

// A save that died half-way left step_N.tmp: the next start removes it before anything
// is written or resumed, and keeps the complete checkpoints beside it.
TEST_F(TrainerTest, StartRemovesAStaleCheckpointTmp) {
  const std::string run = path("stale");
  Trainer(TrainConfig::load(kTinyMlp, {"run.dir=" + run, "train.max_steps=2"}), {.verbose = false}).train();
  const std::string tmp = run + "/checkpoints/step_00000009.tmp";
  std::filesystem::create_directories(tmp);
  write_file_atomic(tmp + "/shard_00000_of_00001.safetensors", std::string("half a file"));
  Trainer t(TrainConfig::load(kTinyMlp, {"run.dir=" + run, "train.max_steps=3", "train.resume=" + run}),
            {.verbose = false});
  EXPECT_FALSE(std::filesystem::exists(tmp));
  EXPECT_EQ(t.step_count(), 2);  // resumed from the complete step_00000002
}

// Outside mpirun the world is one rank: dp: auto resolves to 1 (no DDP wrapper, the plain
// optimizer), and a layout that needs more ranks is a config error naming the launcher.
TEST_F(TrainerTest, OneRankWorldResolvesTheLayout) {
  Trainer t(TrainConfig::load(kTinyMlp, {"run.dir=" + path("one"), "train.max_steps=1"}), {.verbose = false});
  EXPECT_EQ(t.world_size(), 1);
  EXPECT_EQ(t.parallel_model().dims(), (parallel::ParallelDims{.dp = 1}));
  EXPECT_EQ(t.parallel_model().ddp(), nullptr);
  EXPECT_EQ(t.parallel_model().describe(), "single process over 1 dp rank(s)");
  // The degrees are resolved against the world when the trainer starts.
  auto trainer_error = [&](const std::string& yaml, std::vector<std::string> sets) -> std::string {
    sets.push_back("run.dir=" + path("bad"));
    try {
      Trainer bad(TrainConfig::load(yaml, sets), {.verbose = false, .write_files = false});
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(trainer_error(kTinyMlp, {"parallel.dp=2"}),
            "parallel: dp x tp x pp = 2 x 1 x 1 = 2 rank(s), but the world has 1 (start with mpirun -np 2, or set "
            "parallel.dp: auto)");
  EXPECT_NE(trainer_error(kTinyGpt, {"parallel.tp=3", "data.path=" + kCorpus})
                .find("parallel.dp: is auto but the world of 1 rank(s) is not divisible by tp x pp = 3"),
            std::string::npos);
}

// ---------------------------------------------------------------- run.precision

struct PrecisionRun {
  std::vector<Record> train;
  double eval_loss = 0;
  std::vector<nlohmann::json> metrics;  // the train records as written
};

PrecisionRun run_precision(const std::string& yaml, std::vector<std::string> sets, const std::string& dir,
                           const std::string& precision) {
  sets.push_back("run.dir=" + dir);
  sets.push_back("run.precision=" + precision);
  Trainer t(TrainConfig::load(yaml, sets), {.verbose = false});
  EXPECT_EQ(t.grad_scaler() != nullptr, precision == "f16");
  PrecisionRun r;
  r.eval_loss = t.train().loss;
  r.train = train_records(dir);
  std::ifstream f(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(f, line))
    if (auto j = nlohmann::json::parse(line); j["type"] == "train") r.metrics.push_back(j);
  return r;
}

// bf16 / f16 autocast: every loss tracks f32 within 16-bit tolerance, yet the runs are not
// f32 in disguise (the losses differ); f16 reports its loss scale and skipped steps.
TEST_F(TrainerTest, MixedPrecisionTracksF32) {
  const std::vector<std::string> sets = {"data.path=" + kCorpus, "model.dropout=0"};
  const auto f32 = run_precision(kTinyGpt, sets, path("f32"), "f32");
  ASSERT_EQ(f32.train.size(), 10u);
  for (const std::string p : {"bf16", "f16"}) {
    const auto low = run_precision(kTinyGpt, sets, path(p), p);
    ASSERT_EQ(low.train.size(), f32.train.size()) << p;
    double max_rel = 0;
    for (size_t i = 0; i < f32.train.size(); ++i)
      max_rel = std::max(max_rel, std::abs(low.train[i].loss - f32.train[i].loss) / f32.train[i].loss);
    EXPECT_LT(max_rel, p == "bf16" ? 0.02 : 0.005) << p;
    EXPECT_GT(max_rel, 1e-6) << p << ": the losses equal f32's, so autocast did not run";
    EXPECT_NEAR(low.eval_loss, f32.eval_loss, 0.02 * f32.eval_loss) << p;
    EXPECT_LT(low.train.back().loss, low.train.front().loss - 0.5) << p;
    for (const auto& m : low.metrics) {
      EXPECT_EQ(m.contains("loss_scale"), p == "f16") << m.dump();
      if (p == "f16") {
        EXPECT_EQ(m["skipped_steps"].get<int64_t>(), 0) << m.dump();
      }
    }
  }
}

// f16's scaler state (scale, growth counter) travels in the checkpoint: the resumed run
// continues bit for bit, and what was saved is the scaler's state after k clean steps.
TEST_F(TrainerTest, ResumeIsBitExactWithF16LossScaling) {
  check_resume(kTinyGpt, {"data.path=" + kCorpus, "schedule.name=step", "schedule.step_size=4",
                          "train.save_final=true", "run.precision=f16"}, dir_.string(), 4);
  const parallel::Checkpoint ck = parallel::read_checkpoint(dir_.string() + "/b", false);
  ASSERT_TRUE(ck.state.extra.contains("grad_scaler")) << ck.state.extra.dump();
  EXPECT_EQ(ck.state.extra["grad_scaler"]["scale"].get<double>(), 65536.0);
  EXPECT_EQ(ck.state.extra["grad_scaler"]["_growth_tracker"].get<int64_t>(), 4);
}

TEST_F(TrainerTest, MissingCheckpointNamesThePath) {
  try {
    parallel::read_checkpoint(path("nope"), true);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(path("nope")), std::string::npos);
  }
}

// ---------------------------------------------------------------- config schema

std::string config_error(const std::string& yaml, std::vector<std::string> sets) {
  try {
    TrainConfig::load(yaml, sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The config error of loading `yaml` with `sets` contains `want`.
void expect_config_error(const std::string& yaml, std::vector<std::string> sets, const std::string& want) {
  const std::string got = config_error(yaml, std::move(sets));
  EXPECT_NE(got.find(want), std::string::npos) << "expected '" << want << "' in '" << got << "'";
}

TEST(TrainConfigTest, SchemaErrorsNameKeyPaths) {
  expect_config_error(kTinyMlp, {"model.n_head=4"}, "model.n_head: unknown key");
  expect_config_error(kTinyMlp, {"train.lerning_rate=1"}, "train.lerning_rate: unknown key");
  expect_config_error(kTinyMlp, {"optim.lr=abc"}, "optim.lr: expected a number, got 'abc'");
  expect_config_error(kTinyMlp, {"model.dropout=1.5"}, "model.dropout: expected a value in [0, 1)");
  expect_config_error(kTinyMlp, {"parallel.mode=ddp"}, "parallel.mode: was removed ('ddp')");
  expect_config_error(kTinyMlp, {"parallel.bucket_cap_mb=0"}, "parallel.bucket_cap_mb");
  expect_config_error(kTinyMlp, {"comm.algorithm=star"}, "comm.algorithm: expected one of");
  expect_config_error(kTinyMlp, {"comm.timeout_s=0"}, "comm.timeout_s");
  expect_config_error(kTinyMlp, {"comm.reduce_dtype=bf16"}, "comm.reduce_dtype: expected one of");
  expect_config_error(kTinyGpt, {"model.n_head=3"}, "model.n_embd: must be divisible");
  expect_config_error(kTinyMlp, {"optim.name=adamm"}, "optim.name: expected one of sgd|adam|adamw");
}

TEST(TrainConfigTest, DevicePrecisionAndBackendErrorsNameKeyPaths) {
  expect_config_error(kTinyMlp, {"run.device=tpu"}, "run.device: 'tpu' is not a device: expected cpu, cuda or cuda:N");
  expect_config_error(kTinyMlp, {"run.device=cuda:x"}, "run.device: 'cuda:x' is not a device");
  expect_config_error(kTinyMlp, {"run.precision=fp8"}, "run.precision: expected one of f32|bf16|f16");
  expect_config_error(kTinyMlp, {"comm.backend=gloo"}, "comm.backend: expected one of auto|mpi|nccl");
  EXPECT_EQ(config_error(kTinyMlp, {"parallel.zero_stage=2", "run.precision=f16"}), "");
  EXPECT_EQ(config_error(kTinyMlp, {"parallel.zero_stage=2", "run.precision=bf16"}), "");
  const std::string nccl_cpu = config_error(kTinyMlp, {"comm.backend=nccl"});
  EXPECT_EQ(nccl_cpu.rfind("comm.backend: nccl ", 0), 0u) << nccl_cpu;
#ifndef STRATA_WITH_CUDA
  expect_config_error(kTinyMlp, {"run.device=cuda:1"},
                      "run.device: 'cuda:1' needs a CUDA build of strata; this one was built without CUDA");
#else
  expect_config_error(kTinyMlp, {"run.device=cuda", "comm.backend=mpi"},
                      "comm.backend: mpi cannot move CUDA tensors (run.device is 'cuda')");
#endif
}

TEST(TrainConfigTest, ParseDevice) {
  EXPECT_EQ(parse_device("cpu"), kCPU);
  EXPECT_EQ(parse_device("cuda"), (Device{DeviceType::CUDA, 0}));
  EXPECT_EQ(parse_device("cuda:3"), (Device{DeviceType::CUDA, 3}));
  EXPECT_EQ(parse_device("cuda:3").str(), "cuda:3");
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:1x", "CPU", "cuda:99999"}) {
    try {
      parse_device(bad);
      ADD_FAILURE() << "'" << bad << "' parsed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected cpu, cuda or cuda:N"), std::string::npos) << e.what();
    }
  }
}

#ifdef STRATA_WITH_CUDA
// A CUDA build on a machine without a GPU: the run stops before any work with the key
// path and the driver's reason (a GPU machine runs tests/cuda/device/trainer_test.cpp).
TEST(TrainConfigTest, CudaDeviceWithoutGpuNamesRunDevice) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is visible; tests/cuda/device covers training on it";
  try {
    Trainer t(TrainConfig::load(kTinyMlp, {"run.device=cuda", "run.dir=/nonexistent/never"}), {.verbose = false});
    FAIL() << "constructed";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("run.device: 'cuda': no CUDA device is visible (", 0), 0u) << e.what();
  }
}
#endif

std::string schema_error(const std::string& yaml) {
  try {
    TrainConfig::from_node(ConfigNode::load_string(yaml));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// model.type llama: its keys, their defaults (tie_weights false), and an error naming the
// key path for each invalid value.
TEST(TrainConfigTest, LlamaKeys) {
  const std::string head = "data: {dataset: text}\noptim: {lr: 0.1}\nmodel: {type: llama, n_head: 4, n_embd: 32";
  const TrainConfig d = TrainConfig::from_node(ConfigNode::load_string(head + "}\n"));
  EXPECT_EQ(d.model.n_kv_head, 0);
  EXPECT_FALSE(d.model.tie_weights);
  EXPECT_FALSE(d.model.rope_scaling.has_value());
  const TrainConfig c = TrainConfig::from_node(ConfigNode::load_string(
      head + ", n_kv_head: 2, intermediate_size: 96, norm_eps: 1e-6, rope_theta: 500000, tie_weights: true, "
             "rope_scaling: {factor: 32, original_max_position_embeddings: 4096}}\n"));
  EXPECT_EQ(c.model.n_kv_head, 2);
  EXPECT_EQ(c.model.intermediate_size, 96);
  EXPECT_DOUBLE_EQ(c.model.norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 500000);
  EXPECT_TRUE(c.model.tie_weights);
  ASSERT_TRUE(c.model.rope_scaling.has_value());
  EXPECT_DOUBLE_EQ(c.model.rope_scaling->factor, 32);
  EXPECT_DOUBLE_EQ(c.model.rope_scaling->high_freq_factor, 4);
  EXPECT_EQ(c.model.rope_scaling->original_max_position_embeddings, 4096);
  const auto starts = [&](const std::string& extra, const std::string& key) {
    const std::string e = schema_error(head + extra + "}\n");
    EXPECT_EQ(e.rfind(key, 0), 0u) << extra << " -> " << e;
  };
  starts(", n_kv_head: 3", "model.n_kv_head");
  starts(", n_kv_head: -1", "model.n_kv_head");
  starts(", norm_eps: 0", "model.norm_eps");
  starts(", rope_theta: 0", "model.rope_theta");
  starts(", intermediate_size: -5", "model.intermediate_size");
  starts(", multiple_of: 0", "model.multiple_of");
  starts(", dropout: 0.1", "model.dropout");
  starts(", bias: false", "model.bias");  // not a llama key
  starts(", rope_scaling: {low_freq_factor: 4, high_freq_factor: 2}", "model.rope_scaling.high_freq_factor");
  starts(", rope_scaling: {factor: 0}", "model.rope_scaling.factor");
  starts(", checkpoint_activations: some", "model.checkpoint_activations");
  EXPECT_EQ(schema_error(head + ", checkpoint_activations: full}\n"), "");
  EXPECT_EQ(schema_error(head + ", checkpoint_activations: selective}\n"), "");
  EXPECT_EQ(schema_error("data: {dataset: text}\noptim: {lr: 0.1}\nmodel: {type: llama, n_head: 4, n_embd: 12}\n")
                .rfind("model.n_embd", 0),
            0u);  // head dimension 3: odd
}

TEST(TrainConfigTest, CrossFieldValidation) {
  EXPECT_EQ(schema_error("model: {type: gpt}\ndata: {dataset: fashion_mnist}\noptim: {lr: 0.1}\n"),
            "data.dataset: model.type gpt needs token data (text, tokens, or synthetic with kind: tokens), got "
            "'fashion_mnist'");
  EXPECT_EQ(schema_error("model: {type: mlp}\ndata: {dataset: text}\noptim: {lr: 0.1}\n"),
            "model.type: token data needs model.type gpt or llama, got 'mlp'");
  EXPECT_EQ(schema_error("model: {type: cnn, channels: [8, 8, 8]}\noptim: {lr: 0.1}\n"),
            "model.channels: 28x28 images allow at most 2 pooling blocks, got 3");
  EXPECT_EQ(schema_error("model: {type: mlp}\noptim: {name: sgd}\n"),
            "optim.lr: required key is missing from optim (line 2)");
  EXPECT_EQ(schema_error("optim: {lr: 0.1}\ntrain: {epochs: 0}\n"),
            "train.epochs: must be > 0 when train.max_steps is 0 (line 2)");
  EXPECT_EQ(schema_error("optim: {lr: 0.1}\n"), "");
}

TEST(TrainConfigTest, UnknownKeyInFileHasLineAndSuggestion) {
  const auto root = ConfigNode::load_string("optim: {name: adam, lr: 0.1}\nmodel:\n  type: mlp\n  hiden: [3]\n");
  try {
    TrainConfig::from_node(root);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "model.hiden: unknown key; did you mean 'model.hidden'? (line 4)");
  }
}

TEST(TrainConfigTest, ShippedConfigsLoad) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(kSrc + "/configs")) {
    if (e.path().extension() != ".yaml") continue;
    SCOPED_TRACE(e.path().string());
    // A build without CUDA refuses run.device: cuda (the 1.3B config): load it on the CPU
    // there, as the planner and config-reference tests do.
    EXPECT_NO_THROW(TrainConfig::load(e.path().string(), kNoCudaSets));
    ++n;
  }
  EXPECT_GE(n, 3);
}

}  // namespace
}  // namespace strata::apps
