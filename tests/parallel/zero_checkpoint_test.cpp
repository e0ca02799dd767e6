// Sharded checkpoints across layouts: train 2 steps on N ranks at stage s (0 = DDP),
// save, load on M ranks at stage t, train 1 more step; the result must equal 3
// single-process steps, for every N, M in 1..4 and s, t in 0..3. Also: loading into a
// different model fails naming the tensor and changes nothing.
#include <gtest/gtest.h>

#include <filesystem>

#include "comm/local.h"
#include "parallel/checkpoint_io.h"
#include "zero_equivalence.h"

namespace strata::testing {
namespace {
namespace fs = std::filesystem;

// One rank's training setup at a layout: stage 0 = DDP (N = 1: plain DDP of one rank).
struct Layout {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<parallel::DistributedDataParallel> ddp;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<parallel::ZeroDataParallel> zero;

  Layout(comm::ProcessGroup& g, int stage, uint64_t seed) : model(make_model("mlp", seed)) {
    if (stage == 0) {
      ddp = parallel::apply_ddp(model, g, {});
      opt = make_optimizer("adam", *model);
    } else {
      zero = parallel::apply_zero(model, g, {.stage = stage, .bucket_cap_mb = 200.0 * 4 / (1 << 20), .wrap = {}},
                                  optimizer_factory("adam"));
    }
  }
  optim::Optimizer& optimizer() { return zero ? zero->optimizer() : *opt; }

  void step(comm::ProcessGroup& g, int s, int64_t batch) {
    auto [x, y] = make_batch("mlp", batch, s);
    const int64_t per = batch / g.size();
    Tensor xr = ops::narrow(x, 0, g.rank() * per, per), yr = ops::narrow(y, 0, g.rank() * per, per);
    if (zero) {
      backward(zero->forward_with([&] { return batch_loss(*model, xr, yr); }));
      zero->finalize();
      zero->step();
      zero->zero_grad();
    } else {
      backward(ddp->forward_with([&] { return batch_loss(*model, xr, yr); }));
      ddp->finalize();
      opt->step();
      ddp->zero_grad();
    }
  }
  void save(comm::ProcessGroup& g, const std::string& dir, int stage) {
    auto pieces = zero ? zero->state_pieces() : parallel::replicated_pieces(*model, opt.get(), g.rank());
    const nlohmann::json meta = {{parallel::kOptimizerMetaKey, optimizer().state_dict().scalars}};
    parallel::save_sharded(dir, g, pieces, stage, meta);
  }
  void load(const std::string& dir) {
    parallel::ShardedCheckpointReader ck(dir);
    if (zero)
      parallel::load_zero(ck, *zero, true);
    else
      parallel::load_replicated(ck, *model, opt.get());
  }
  nn::NamedTensors state() { return zero ? zero->full_state_dict() : model->state_dict(); }
};

constexpr int64_t kBatch = 12;  // divisible by 1..4

TEST(ZeroCheckpoint, SaveLoadMatrixAnyWorldSizeAnyStage) {
  const nn::NamedTensors ref = reference_state(EquivCase{.optim = "adam", .steps = 3, .batch = kBatch}, 1);
  const fs::path root = fs::temp_directory_path() / ("strata_zero_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(root);
  int combos = 0;
  for (int n = 1; n <= 4; ++n)
    for (int s = 0; s <= 3; ++s) {
      const std::string dir = (root / ("n" + std::to_string(n) + "_s" + std::to_string(s))).string();
      comm::run_local(n, [&](comm::ProcessGroup& g) {
        Layout l(g, s, kModelSeed + 13 * uint64_t(g.rank()));
        for (int k = 0; k < 2; ++k) l.step(g, k, kBatch);
        l.save(g, dir, s);
      });
      ASSERT_TRUE(fs::exists(fs::path(dir) / parallel::kShardedIndexFile));
      for (int m = 1; m <= 4; ++m)
        for (int t = 0; t <= 3; ++t) {
          nn::NamedTensors got;
          comm::run_local(m, [&](comm::ProcessGroup& g) {
            Layout l(g, t, 999 + uint64_t(g.rank()));  // a different init: the load must replace it
            l.load(dir);
            l.step(g, 2, kBatch);
            auto st = l.state();
            if (g.rank() == 0) got = st;
          });
          std::string worst;
          EXPECT_LT(max_relative_error(got, ref, &worst), 1e-5)
              << "saved N=" << n << " stage " << s << ", loaded M=" << m << " stage " << t << ": worst " << worst;
          ++combos;
        }
    }
  EXPECT_EQ(combos, 256);
  fs::remove_all(root);
}

TEST(ZeroCheckpoint, WrongModelIsRefusedAndNothingChanges) {
  const fs::path dir = fs::temp_directory_path() / ("strata_zero_ckpt_bad_" + std::to_string(::getpid()));
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    Layout l(g, 3, kModelSeed);
    l.step(g, 0, kBatch);
    l.save(g, dir.string(), 3);
  });
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    auto gpt = make_model("gpt", 5);
    auto zero = parallel::apply_zero(gpt, g, {.stage = 2, .wrap = {}}, optimizer_factory("adam"));
    const nn::NamedTensors before = zero->full_state_dict();
    parallel::ShardedCheckpointReader ck(dir.string());
    try {
      parallel::load_zero(ck, *zero, true);
      ADD_FAILURE() << "a GPT loaded an MLP checkpoint";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("is missing"), std::string::npos) << e.what();
    }
    EXPECT_EQ(max_relative_error(zero->full_state_dict(), before, nullptr), 0.0);
  });
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata::testing
