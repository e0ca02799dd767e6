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

// The MLP on 2 ranks at tp (1 or 2: net.1 colwise, net.3 rowwise) and ZeRO `stage` (over
// the dp ranks: 2 at tp 1, 1 at tp 2).
std::unique_ptr<parallel::ParallelModel> layout_on(comm::ProcessGroup& g, int tp, int stage, uint64_t seed) {
  std::shared_ptr<comm::ProcessGroup> world(&g, [](comm::ProcessGroup*) {});
  const parallel::ParallelDims dims = parallel::ParallelDims{.tp = tp, .zero_stage = stage}.resolve(g.size());
  parallel::TpPlan plan;
  if (tp > 1) plan = {{"net.1", parallel::TpStyle::colwise}, {"net.3", parallel::TpStyle::rowwise}};
  return parallel::parallelize(make_model("mlp", seed), comm::DeviceMesh(world, dims.mesh_shape()),
                               {.dims = dims, .tp_plan = plan, .make_optimizer = optimizer_factory("adam")});
}

// A checkpoint of that layout whose first floating piece from rank 1 holds a NaN: loaded
// at the same layout, only rank 1 reads it. Returns the tensor's name.
std::string save_poisoned(const std::string& dir, int tp, int stage) {
  std::string victim;
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    auto pm = layout_on(g, tp, stage, kModelSeed);
    std::vector<parallel::ShardPiece> pieces = pm->state_pieces();
    if (g.rank() == 1)
      for (auto& p : pieces)
        if (p.data.numel() > 0 && p.data.dtype() == DType::f32) {
          p.data = ops::clone(p.data);
          p.data.data<float>()[0] = NAN;
          victim = p.name;
          break;
        }
    parallel::CheckpointLayout layout{.mesh = {}, .zero_stage = stage};
    for (const auto& d : pm->mesh().shape().dims()) layout.mesh.emplace_back(d.name, d.size);
    parallel::save_sharded(dir, g, parallel::RankPieces{.ranges = pieces, .boxes = {}}, layout,
                           nlohmann::json{{parallel::kOptimizerMetaKey, pm->optimizer().state_dict().scalars}});
  });
  return victim;
}

TEST(CheckpointAgreement, OneRanksReadErrorEndsEveryRankWithItsCause) {
  const fs::path root = fs::temp_directory_path() / ("strata_ckpt_agree_" + std::to_string(::getpid()));
  fs::remove_all(root);
  // ZeRO-1/2/3 over 2 dp ranks, tensor parallel alone and with ZeRO-1: every layout whose
  // ranks read pieces of their own.
  for (const auto& [tp, stage] : std::vector<std::pair<int, int>>{{1, 1}, {1, 2}, {1, 3}, {2, 0}, {2, 1}}) {
    const std::string what = "tp " + std::to_string(tp) + " zero_stage " + std::to_string(stage);
    const std::string dir = (root / ("tp" + std::to_string(tp) + "_s" + std::to_string(stage))).string();
    const std::string victim = save_poisoned(dir, tp, stage);
    ASSERT_FALSE(victim.empty()) << what;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> errors(2);
    comm::run_local(
        2,
        [&](comm::ProcessGroup& g) {
          auto pm = layout_on(g, tp, stage, kModelSeed + 1);
          const auto state = [&] {
            const parallel::ParallelModel::FullParams full = pm->summon_full_params();
            nn::NamedTensors out;
            for (const auto& [n, t] : pm->module().state_dict()) out.emplace_back(n, ops::clone(t));
            return out;
          };
          const nn::NamedTensors before = state();
          try {
            pm->load_state(parallel::ShardedCheckpointReader(dir), true);
          } catch (const DataError& e) {
            errors[size_t(g.rank())] = e.what();
          }
          // Every rank got here: the next collective completes, and nothing was loaded.
          EXPECT_EQ(max_relative_error(state(), before, nullptr), 0.0) << what << " rank " << g.rank();
        },
        comm::CommOptions{.timeout_s = 20.0});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 10.0) << what << ": a rank waited for the one that failed";
    EXPECT_NE(errors[1].find("tensor '" + victim + "'"), std::string::npos) << what << ": " << errors[1];
    EXPECT_NE(errors[1].find("not finite"), std::string::npos) << what << ": " << errors[1];
    EXPECT_EQ(errors[0].rfind("rank 1: ", 0), 0u) << what << ": " << errors[0];
    EXPECT_NE(errors[0].find("tensor '" + victim + "'"), std::string::npos) << what << ": " << errors[0];
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace strata::testing
