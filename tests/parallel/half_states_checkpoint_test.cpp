// Checkpoints of 16-bit model states hold the f32 master weights (the bf16 parameters are
// their rounding) and the f32 moments: a resume is bit-exact (parameters, masters and the
// steps after it), at one rank and across DDP / ZeRO layouts, and a checkpoint moves
// between bf16_params and f32 runs (autocast runs hold f32 parameters: the same as f32)
// in both directions, the weights arriving exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>

#include <strata/comm/local.h>
#include <strata/parallel/checkpoint/layout_io.h>
#include "layout_rank.h"

namespace strata::testing {
namespace {
namespace fs = std::filesystem;

parallel::OptimizerFactory adam() {
  return [](optim::NamedTensors ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{.lr = 1e-2});
  };
}

// One rank of a layout (stage 0: DDP) training the MLP in `dt` (bf16: 16-bit model states).
struct LayoutRun : MlpLayoutRank {
  LayoutRun(comm::ProcessGroup& g, int stage, DType d)
      : MlpLayoutRank(g, stage, kModelSeed, adam(), 100.0 * 4 / (1 << 20), d) {}
  void step(comm::ProcessGroup& g, int s) { MlpLayoutRank::step(g, s, 8); }
  // The full weights: f32 masters where the optimizer keeps them, else the parameters;
  // plus the bf16 parameters and the moments (gathered over ranks by the caller).
  std::map<std::string, std::vector<float>> weights() {
    std::map<std::string, std::vector<float>> out;
    auto full = zero ? std::optional(zero->summon_full_params()) : std::nullopt;
    for (const auto& [n, p] : model->named_parameters()) out["param." + n] = ops::to_dtype(p, DType::f32).to_vector<float>();
    return out;
  }
};

std::map<std::string, std::vector<float>> masters_of(optim::Optimizer& o) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [n, m] : o.named_masters()) out[n] = m.to_vector<float>();
  for (const auto& [n, t] : o.state_dict().tensors) out[n] = t.to_vector<float>();
  return out;
}

fs::path temp_dir(const std::string& tag) {
  return fs::temp_directory_path() / ("strata_half_ckpt_" + tag + "_" + std::to_string(::getpid()));
}

TEST(HalfStatesCheckpoint, ResumeIsBitExactAtOneRank) {
  const fs::path dir = temp_dir("resume");
  fs::remove_all(dir);
  std::map<std::string, std::vector<float>> straight, straight_m, resumed, resumed_m;
  comm::run_local(1, [&](comm::ProcessGroup& g) {
    LayoutRun a(g, 0, DType::bf16);
    for (int s = 0; s < 2; ++s) a.step(g, s);
    a.save(g, dir.string(), 0);
    for (int s = 2; s < 4; ++s) a.step(g, s);
    straight = a.weights();
    straight_m = masters_of(a.optimizer());
  });
  comm::run_local(1, [&](comm::ProcessGroup& g) {
    LayoutRun b(g, 0, DType::bf16);
    b.load(dir.string());
    for (int s = 2; s < 4; ++s) b.step(g, s);
    resumed = b.weights();
    resumed_m = masters_of(b.optimizer());
  });
  EXPECT_EQ(resumed, straight) << "bf16 parameters after the resume";
  EXPECT_FALSE(straight_m.empty());
  EXPECT_EQ(resumed_m, straight_m) << "f32 masters and moments after the resume";
  // the checkpoint holds the masters, in f32
  parallel::CheckpointReader ck(dir.string());
  for (const auto& [n, p] : make_model("mlp", kModelSeed)->named_parameters()) EXPECT_EQ(ck.dtype(n), DType::f32) << n;
  fs::remove_all(dir);
}

TEST(HalfStatesCheckpoint, MovesBetweenBf16ParamsAndF32BothWays) {
  const fs::path dir = temp_dir("cross");
  for (auto [from, to] : {std::pair{DType::bf16, DType::f32}, std::pair{DType::f32, DType::bf16}}) {
    fs::remove_all(dir);
    std::map<std::string, std::vector<float>> saved;  // the f32 weights and moments the checkpoint holds
    comm::run_local(1, [&](comm::ProcessGroup& g) {
      LayoutRun a(g, 0, from);
      for (int s = 0; s < 2; ++s) a.step(g, s);
      a.save(g, dir.string(), 0);
      for (const auto& [n, t] : a.optimizer().state_dict().tensors) saved[n] = t.to_vector<float>();
      if (from == DType::bf16)
        for (const auto& [n, m] : a.optimizer().named_masters()) saved["w." + n] = m.to_vector<float>();
      else
        for (const auto& [n, p] : a.model->named_parameters()) saved["w." + n] = p.to_vector<float>();
    });
    comm::run_local(1, [&](comm::ProcessGroup& g) {
      LayoutRun b(g, 0, to);
      b.load(dir.string());
      for (const auto& [n, t] : b.optimizer().state_dict().tensors) EXPECT_EQ(t.to_vector<float>(), saved[n]) << n;
      for (const auto& [n, p] : b.model->named_parameters()) {
        const auto& w = saved["w." + n];
        if (to == DType::f32) {
          EXPECT_EQ(p.to_vector<float>(), w) << n << ": the f32 run gets the masters exactly";
        } else {
          EXPECT_EQ(p.dtype(), DType::bf16);
          EXPECT_EQ(ops::to_dtype(p, DType::f32).to_vector<float>(),
                    ops::to_dtype(ops::to_dtype(ops::from_vector(w, p.shape()), DType::bf16), DType::f32).to_vector<float>())
              << n << ": bf16 parameters are the rounded weights";
        }
      }
      if (to == DType::bf16) {
        for (const auto& [n, m] : b.optimizer().named_masters())
          EXPECT_EQ(m.to_vector<float>(), saved["w." + n]) << n << ": masters take the f32 weights exactly";
      }
      b.step(g, 2);  // and it trains on
    });
  }
  fs::remove_all(dir);
}

// ZeRO-2 on 2 ranks saves its slices of the masters; one process resumes from them and
// takes the same next step as the ZeRO run (bf16 tolerance: a different reduction order).
TEST(HalfStatesCheckpoint, ZeroSlicesOfMastersLoadIntoOneProcessAndBack) {
  const fs::path dir = temp_dir("zero"), dir2 = temp_dir("zero_back");
  fs::remove_all(dir);
  fs::remove_all(dir2);
  std::map<std::string, std::vector<float>> zero_masters, single_masters, zero_back;
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    LayoutRun a(g, 2, DType::bf16);
    for (int s = 0; s < 2; ++s) a.step(g, s);
    a.save(g, dir.string(), 2);
  });
  comm::run_local(1, [&](comm::ProcessGroup& g) {
    LayoutRun b(g, 0, DType::bf16);
    b.load(dir.string());
    single_masters = masters_of(b.optimizer());
    b.save(g, dir2.string(), 0);
  });
  parallel::CheckpointReader ck(dir.string());
  int compared = 0;
  for (const auto& [n, m] : single_masters) {
    if (ck.contains(n) && n.rfind("exp_", 0) != 0) {
      EXPECT_EQ(m, ck.read_full(n).to_vector<float>()) << n << ": the masters are what ZeRO saved";
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
  // and back into ZeRO-3 on 2 ranks: every rank's master slices are the saved values
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    LayoutRun c(g, 3, DType::bf16);
    c.load(dir2.string());
    for (const auto& [n, m] : c.optimizer().named_masters()) EXPECT_GT(m.numel(), 0) << n;
    c.step(g, 2);
  });
  fs::remove_all(dir);
  fs::remove_all(dir2);
}

}  // namespace
}  // namespace strata::testing
