// Training checkpoints (apps/checkpoint.h) over the one v2 path: a single-process save is
// an index plus one plain safetensors file and round-trips model, optimizer and training
// state; a version 1 single-process directory (written here exactly as the v1 code did)
// still reads, resolves through LATEST, loads into a model, and fails naming the file.
#include <strata/parallel/checkpoint/training.h>

#include <gtest/gtest.h>

#include <filesystem>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/nn/mlp.h>
#include <strata/optim/adam.h>
#include <strata/tensor/file_io.h>
#include <strata/tensor/ops.h>
#include "tests/temp_dir_fixture.h"

namespace strata::apps {
namespace {
namespace fs = std::filesystem;

// A small MLP after one Adam step (so the optimizer has state tensors).
struct Trained {
  std::shared_ptr<nn::MLP> model;
  std::unique_ptr<optim::Adam> opt;
  parallel::TrainingState state;
  explicit Trained(uint64_t seed) {
    Generator g(seed);
    model = std::make_shared<nn::MLP>(nn::MLPConfig{.input = 6, .hidden = {5}, .classes = 3}, g);
    opt = std::make_unique<optim::Adam>(model->named_parameters(), optim::AdamOptions{.lr = 1e-2});
    const Tensor x = ops::uniform({4, 6}, -1, 1, g);
    const Tensor y = ops::from_vector(std::vector<int64_t>{0, 1, 2, 1}, {4});
    backward(cross_entropy(model->forward(x), y));
    opt->step();
    state.step = 1;
    state.loader_batch = 1;
    state.default_rng = {seed, 17};
    state.sampler_seed = seed;
    state.config_yaml = "model: {type: mlp}\n";
    state.extra = {{"model_type", "mlp"}};
  }
};

void expect_same(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  std::map<std::string, const Tensor*> by;
  for (const auto& [n, t] : b) by[n] = &t;
  for (const auto& [n, t] : a) {
    ASSERT_TRUE(by.count(n)) << n;
    EXPECT_EQ(t.shape(), by[n]->shape()) << n;
    EXPECT_EQ(t.to_vector<float>(), by[n]->to_vector<float>()) << n;
  }
}

class CheckpointTest : public strata::testing::TempDirTest {};

TEST_F(CheckpointTest, SingleProcessSaveIsIndexPlusOnePlainFile) {
  const Trained a(1);
  const std::string dir = path("run/checkpoints/step_00000001");
  parallel::save_checkpoint(dir, a.model->state_dict(), a.opt->state_dict(), a.state);
  const std::string shard = dir + "/shard_00000_of_00001.safetensors";
  EXPECT_TRUE(fs::exists(dir + "/index.json"));
  // Any safetensors reader sees the model and optimizer tensors under their own names.
  NamedTensors all = a.model->state_dict();
  for (const auto& kv : a.opt->state_dict().tensors) all.push_back(kv);
  expect_same(load_safetensors(shard), all);

  write_file_atomic(path("run/checkpoints/LATEST"), std::string("step_00000001\n"));
  const parallel::Checkpoint ck = parallel::read_checkpoint(path("run"), true);
  EXPECT_EQ(ck.dir, dir);
  EXPECT_EQ(ck.model_file, shard);
  EXPECT_EQ(ck.state_file, dir + "/index.json");
  EXPECT_EQ(ck.state.step, 1);
  EXPECT_EQ(ck.state.default_rng, (std::pair<uint64_t, uint64_t>{1, 17}));
  EXPECT_EQ(ck.state.config_yaml, a.state.config_yaml);
  EXPECT_EQ(ck.state.optimizer, a.opt->state_dict().scalars);
  expect_same(ck.model, a.model->state_dict());
  expect_same(ck.optimizer, a.opt->state_dict().tensors);
  EXPECT_EQ(ck.reader->mesh(), (parallel::MeshDims{{"pp", 1}, {"dp", 1}, {"tp", 1}}));

  Trained b(2);
  parallel::load_into(ck, *b.model, b.opt.get());
  expect_same(b.model->state_dict(), a.model->state_dict());
  expect_same(b.opt->state_dict().tensors, a.opt->state_dict().tensors);

  // open_checkpoint reads no tensor; its reader serves any range.
  const parallel::Checkpoint lazy = parallel::open_checkpoint(dir);
  EXPECT_TRUE(lazy.model.empty());
  const NamedTensors sd = a.model->state_dict();
  const auto& [n0, t0] = sd[0];
  EXPECT_EQ(lazy.reader->read(n0, 1, 4).to_vector<float>(), ops::narrow(ops::flatten(t0), 0, 1, 3).to_vector<float>());
}

// The v1 single-process layout, as apps/checkpoint.cpp wrote it before format v2.
void write_v1(const std::string& dir, const Trained& t) {
  fs::create_directories(dir);
  nlohmann::json j = parallel::training_state_to_json(t.state);
  j["optimizer"] = t.opt->state_dict().scalars;
  save_safetensors(dir + "/model.safetensors", t.model->state_dict(), {{"format", "pt"}});
  save_safetensors(dir + "/optimizer.safetensors", t.opt->state_dict().tensors);
  write_file_atomic(dir + "/state.json", j.dump(2) + "\n");
}

TEST_F(CheckpointTest, Version1DirectoryStillLoads) {
  const Trained a(3);
  const std::string dir = path("run/checkpoints/step_00000001");
  write_v1(dir, a);
  write_file_atomic(path("run/checkpoints/LATEST"), std::string("step_00000001\n"));
  const parallel::Checkpoint ck = parallel::read_checkpoint(path("run"), true);
  EXPECT_EQ(ck.reader->version(), 1);
  EXPECT_EQ(ck.state_file, dir + "/state.json");
  EXPECT_EQ(ck.model_file, dir + "/model.safetensors");
  EXPECT_EQ(ck.state.step, 1);
  EXPECT_EQ(ck.state.optimizer, a.opt->state_dict().scalars);
  expect_same(ck.model, a.model->state_dict());
  expect_same(ck.optimizer, a.opt->state_dict().tensors);
  Trained b(4);
  parallel::load_into(ck, *b.model, b.opt.get());
  expect_same(b.model->state_dict(), a.model->state_dict());

  // A wrong model names the v1 weights file and the tensor.
  Generator g(1);
  nn::MLP other(nn::MLPConfig{.input = 6, .hidden = {7}, .classes = 3}, g);
  try {
    parallel::load_into(ck, other, nullptr);
    ADD_FAILURE() << "loaded into a different model";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/model.safetensors' does not match the model"), std::string::npos)
        << e.what();
  }
  // Saving over it replaces the v1 files with a v2 checkpoint.
  parallel::save_checkpoint(dir, a.model->state_dict(), a.opt->state_dict(), a.state);
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/state.json"));
  EXPECT_EQ(parallel::read_checkpoint(dir, false).reader->version(), 2);
}

TEST_F(CheckpointTest, DamagedVersion1FilesNameTheFile) {
  const Trained a(5);
  write_v1(path("c"), a);
  const std::string model = path("c/model.safetensors"), state = path("c/state.json");
  fs::resize_file(model, fs::file_size(model) - 9);
  auto error = [&] {
    try {
      parallel::read_checkpoint(path("c"), true);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string msg = error();
  EXPECT_NE(msg.find(model), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  write_v1(path("c"), a);
  write_file_atomic(state, std::string("{\"format\": \"strata-checkpoint\", \"version\": 1}"));
  msg = error();
  EXPECT_NE(msg.find(state + "': missing field 'step'"), std::string::npos) << msg;
  fs::remove(state);
  fs::remove(path("c/model.safetensors"));
  msg = error();
  EXPECT_NE(msg.find("is not a checkpoint directory"), std::string::npos) << msg;
}

TEST_F(CheckpointTest, IndexWithoutTrainingStateIsRefused) {
  parallel::RankPieces p;
  p.boxes.push_back({"w", {2}, parallel::whole_box({2}), ops::zeros({2})});
  parallel::save_single(path("c"), p, {}, {{"anything", 1}});
  try {
    parallel::read_checkpoint(path("c"), false);
    ADD_FAILURE() << "read a checkpoint without training state";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(path("c/index.json") + "': not a strata training checkpoint"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata::apps
