// A checkpoint that only some ranks cannot read (a NaN in the slice one rank owns, the
// checksums consistent): every rank ends at once with the failing rank's cause (a
// DataError naming the file and tensor), nothing changes, and no rank is left waiting in
// its next collective until the timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include <strata/comm/local.h>
#include <strata/parallel/checkpoint/writer.h>
#include <strata/parallel/parallelize.h>
#include "equivalence.h"

namespace strata::testing {
namespace {
namespace fs = std::filesystem;

// A 2-rank ZeRO checkpoint at `stage` whose piece from rank 1 holds a NaN: loaded at the
// same layout, only rank 1 reads it. Returns the tensor's name.
std::string save_poisoned(const std::string& dir, int stage) {
  std::string victim;
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    auto pm = parallelize_on(g, make_model("mlp", kModelSeed), stage, {}, true, "adam");
    std::vector<parallel::ShardPiece> pieces = pm->state_pieces();
    if (g.rank() == 1)
      for (auto& p : pieces)
        if (p.data.numel() > 0 && p.data.dtype() == DType::f32) {
          p.data = ops::clone(p.data);
          p.data.data<float>()[0] = NAN;
          victim = p.name;
          break;
        }
    parallel::save_sharded(dir, g, pieces, stage,
                           nlohmann::json{{parallel::kOptimizerMetaKey, pm->optimizer().state_dict().scalars}});
  });
  return victim;
}

TEST(CheckpointAgreement, OneRanksReadErrorEndsEveryRankWithItsCause) {
  const fs::path root = fs::temp_directory_path() / ("strata_ckpt_agree_" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (int stage : {1, 2, 3}) {
    const std::string dir = (root / ("s" + std::to_string(stage))).string();
    const std::string victim = save_poisoned(dir, stage);
    ASSERT_FALSE(victim.empty());
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> errors(2);
    comm::run_local(
        2,
        [&](comm::ProcessGroup& g) {
          auto pm = parallelize_on(g, make_model("mlp", kModelSeed + 1), stage, {}, true, "adam");
          const nn::NamedTensors before = [&] {
            const parallel::ParallelModel::FullParams full = pm->summon_full_params();
            nn::NamedTensors out;
            for (const auto& [n, t] : pm->module().state_dict()) out.emplace_back(n, ops::clone(t));
            return out;
          }();
          try {
            pm->load_state(parallel::ShardedCheckpointReader(dir), true);
          } catch (const DataError& e) {
            errors[size_t(g.rank())] = e.what();
          }
          // Every rank got here: the next collective completes, and nothing was loaded.
          const parallel::ParallelModel::FullParams full = pm->summon_full_params();
          nn::NamedTensors after;
          for (const auto& [n, t] : pm->module().state_dict()) after.emplace_back(n, ops::clone(t));
          EXPECT_EQ(max_relative_error(after, before, nullptr), 0.0) << "stage " << stage << " rank " << g.rank();
        },
        comm::CommOptions{.timeout_s = 20.0});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 10.0) << "stage " << stage << ": a rank waited for the one that failed";
    EXPECT_NE(errors[1].find("tensor '" + victim + "'"), std::string::npos) << errors[1];
    EXPECT_NE(errors[1].find("not finite"), std::string::npos) << errors[1];
    EXPECT_EQ(errors[0].rfind("rank 1: ", 0), 0u) << errors[0];
    EXPECT_NE(errors[0].find("tensor '" + victim + "'"), std::string::npos) << errors[0];
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace strata::testing
