// Hostile training-checkpoint inputs: LATEST pointing outside the run, stale
// "*.tmp" saves, deep JSON in the training state, NaN weights. Each is one DataError
// naming the file (and tensor); remove_stale_tmp cleans what a failed save left.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <strata/parallel/checkpoint/training.h>
#include <strata/tensor/file_io.h>
#include <strata/tensor/ops.h>
#include "tests/hostile_files.h"
#include "tests/temp_dir_fixture.h"

namespace strata::apps {
namespace {

namespace fs = std::filesystem;
using strata::testing::expect_error;

class CheckpointHostileAppsTest : public strata::testing::TempDirTest {
 protected:
  // A training checkpoint of one weight "w" (and one optimizer tensor).
  std::string save(const std::string& dir, float w5 = 5.0f) {
    Tensor w = ops::arange(0, 8, 1, DType::f32);
    w.data<float>()[5] = w5;
    parallel::TrainingState st;
    st.step = 3;
    st.config_yaml = "model: {type: mlp}\n";
    parallel::save_checkpoint(dir, {{"w", w}}, optim::OptimizerState{{{"step", 3}}, {{"exp_avg.w", ops::zeros({8})}}}, st);
    return dir;
  }
};

TEST_F(CheckpointHostileAppsTest, LatestWithAnAbsolutePathIsNotFollowed) {
  save(path("outside/step_1"));
  save(path("run/checkpoints/step_2"));
  write_file_atomic(path("run/checkpoints/LATEST"), path("outside/step_1") + "\n");
  expect_error<DataError>([&] { parallel::resolve_checkpoint_dir(path("run")); },
                          {path("run/checkpoints/LATEST"), "not the name of a checkpoint directory next to it"});
}

TEST_F(CheckpointHostileAppsTest, LatestClimbingOutOfTheRunIsNotFollowed) {
  save(path("outside/step_1"));
  fs::create_directories(path("run/checkpoints"));
  for (const std::string bad : {"../../outside/step_1", "..", "."}) {
    write_file_atomic(path("run/checkpoints/LATEST"), bad);
    expect_error<DataError>([&] { parallel::open_checkpoint(path("run")); }, {path("run/checkpoints/LATEST"), "'" + bad + "'"});
  }
  write_file_atomic(path("run/checkpoints/LATEST"), std::string("step_2\n"));
  save(path("run/checkpoints/step_2"));
  EXPECT_EQ(parallel::resolve_checkpoint_dir(path("run")), path("run/checkpoints/step_2"));  // a sibling still works
}

// A step directory that is a symlink (to outside the run) is not followed, as a symlinked
// shard is not.
TEST_F(CheckpointHostileAppsTest, LatestNamingASymlinkedStepIsNotFollowed) {
  save(path("outside/step_1"));
  fs::create_directories(path("run/checkpoints"));
  fs::create_directory_symlink(path("outside/step_1"), path("run/checkpoints/step_1"));
  write_file_atomic(path("run/checkpoints/LATEST"), std::string("step_1\n"));
  expect_error<DataError>([&] { parallel::resolve_checkpoint_dir(path("run")); },
                          {path("run/checkpoints/LATEST"), "'step_1', a symbolic link", path("outside/step_1")});
}

TEST_F(CheckpointHostileAppsTest, RemoveStaleTmpCleansWhatFailedSavesLeft) {
  const std::string root = path("run/checkpoints");
  save(root + "/step_00000001");
  fs::create_directories(root + "/step_00000002.tmp/sub");  // a save that never committed
  write_file_atomic(root + "/step_00000002.tmp/shard_00000_of_00001.safetensors", std::string("half"));
  write_file_atomic(root + "/LATEST.tmp.4242", std::string("step_00000002"));  // a dead atomic write
  write_file_atomic(root + "/LATEST", std::string("step_00000001"));
  fs::create_directories(path("elsewhere.tmp"));
  fs::create_symlink(path("elsewhere.tmp"), root + "/link.tmp");  // removed as a link, never followed
  const std::vector<std::string> removed = parallel::remove_stale_tmp(root);
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_FALSE(fs::exists(root + "/step_00000002.tmp"));
  EXPECT_FALSE(fs::exists(root + "/LATEST.tmp.4242"));
  EXPECT_TRUE(fs::exists(path("elsewhere.tmp")));
  EXPECT_TRUE(fs::exists(root + "/LATEST"));
  EXPECT_EQ(parallel::open_checkpoint(path("run")).state.step, 3);  // the committed checkpoint is intact
  EXPECT_TRUE(parallel::remove_stale_tmp(path("no/such/dir")).empty());
}

TEST_F(CheckpointHostileAppsTest, DeepStateJsonIsRefusedNotACrash) {
  const std::string dir = path("v1");
  fs::create_directories(dir);
  save_safetensors(dir + "/model.safetensors", {{"w", ops::zeros({2}, DType::f32)}});
  write_file_atomic(dir + "/state.json", "{\"format\": \"strata-checkpoint\", \"version\": 1, \"step\": " +
                                             strata::testing::deep_json_array(100000) + "}");
  expect_error<DataError>([&] { parallel::open_checkpoint(dir); }, {dir + "/state.json", "recursion limit exceeded"});
}

TEST_F(CheckpointHostileAppsTest, WrongTypeInStateDoesNotPrintTheValue) {
  const std::string big(100000, 'x');
  const auto parse = [&] {
    parallel::parse_training_state("{\"format\": \"strata-checkpoint\", \"version\": 1, \"step\": [\"" + big + "\", 1]}",
                                   "s.json");
  };
  expect_error<DataError>(parse, {"s.json", "field 'step' has the wrong type (an array of 2)"});
  try {
    parse();
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find("xxxxxxxx"), std::string::npos) << "the value is printed: " << msg.substr(0, 200) << "...";
    EXPECT_LT(msg.size(), 1000u) << msg.substr(0, 200) << "...";
  }
}

TEST_F(CheckpointHostileAppsTest, NonFiniteWeightIsRefusedOnReadCheckpoint) {
  const std::string dir = save(path("c"), NAN);
  expect_error<DataError>([&] { parallel::read_checkpoint(dir, false); },
                          {dir + "/shard_00000_of_00001.safetensors", "tensor 'w'", "not finite", parallel::kAllowNonfiniteEnv});
}

}  // namespace
}  // namespace strata::apps
