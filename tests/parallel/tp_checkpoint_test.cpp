// Tensor-parallel checkpoints store shards as pieces of the global tensors under global
// names: a run saved at dp 2 x tp 2 with ZeRO-1 (or at tp 2) resumes at tp 1, tp 2, tp 4
// and dp 2 x tp 2 with ZeRO-3 and trains on exactly as one uninterrupted process.
#include <gtest/gtest.h>

#include "tests/temp_dir_fixture.h"
#include "tp_harness.h"

namespace strata::parallel {
namespace {

using namespace strata::testing::tp;  // NOLINT: test harness

class TpCheckpoint : public strata::testing::TempDirTest {};

TEST_F(TpCheckpoint, SavedAtDp2Tp2Zero1ResumesAtAnyLayout) {
  const std::string ck = path("ck");
  // Steps 0-1, saved, then step 2: itself equal to the reference.
  check({.model = "mlp", .dp = 2, .tp = 2, .stage = 1, .save = ck, .save_after = 1});
  for (const TpCase& resume : {TpCase{.dp = 1, .tp = 1}, TpCase{.dp = 1, .tp = 2}, TpCase{.dp = 1, .tp = 4},
                               TpCase{.dp = 2, .tp = 2, .stage = 3}, TpCase{.dp = 2, .tp = 1, .stage = 0}}) {
    TpCase c = resume;
    c.model = "mlp";
    c.first = 2;
    c.load = ck;
    check(c);
  }
}

TEST_F(TpCheckpoint, GptSavedAtTp2ResumesAtTp1AndTp4) {
  const std::string ck = path("gpt");
  check({.model = "gpt", .tp = 2, .save = ck, .save_after = 1});
  check({.model = "gpt", .tp = 1, .first = 2, .load = ck});
  check({.model = "gpt", .tp = 4, .first = 2, .load = ck});
  // The vocabulary-parallel wte and untied head, saved with sequence parallelism, resume
  // at dp 2 x tp 2 with ZeRO-1 and ZeRO-3 and in one process.
  const std::string ck2 = path("gpt_untied");
  check({.model = "gpt_untied", .sp = true, .tp = 2, .save = ck2, .save_after = 1});
  check({.model = "gpt_untied", .tp = 1, .first = 2, .load = ck2});
  for (int stage : {1, 3}) check({.model = "gpt_untied", .sp = true, .dp = 2, .tp = 2, .stage = stage, .first = 2, .load = ck2});
}

TEST_F(TpCheckpoint, PiecesAreGlobalRangesUnderGlobalNames) {
  const std::string ck = path("ck");
  check({.model = "mlp", .tp = 2, .steps = 1, .save = ck, .save_after = 0});
  const CheckpointReader r(ck);
  EXPECT_EQ(r.global_shape("net.1.weight"), (Shape{12, 16}));  // colwise: rows split
  EXPECT_EQ(r.global_shape("net.3.weight"), (Shape{10, 12}));  // rowwise: columns split
  EXPECT_EQ(r.global_shape("exp_avg.net.3.weight"), (Shape{10, 12}));
  EXPECT_EQ(r.info("net.1.weight").pieces.size(), 2u);   // one contiguous half per tp rank
  EXPECT_EQ(r.info("net.3.weight").pieces.size(), 20u);  // 10 rows x 2 ranks
  EXPECT_EQ(r.info("net.3.bias").pieces.size(), 1u);     // replicated: tp rank 0 only
}

}  // namespace
}  // namespace strata::parallel
