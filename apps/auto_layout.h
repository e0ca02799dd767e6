// `parallel: auto`: the layout a run uses when its config leaves the choice to strata. The
// planner (plan_search.h) ranks every (dp, tp, pp, zero, schedule) layout of the world's
// ranks by its step-time model at this machine's measured GEMM speed; the fastest that fits
// run.memory_per_rank, and that this build runs, is taken. torchtitan and Megatron-LM take
// the layout from the user; DeepSpeed's autotuner runs trial jobs. Here the choice is the
// planner's prediction, logged with its reasons, so a run can be reproduced by writing
// the chosen keys into the config.
#pragma once
#include <string>

#include "apps/config.h"
#include "apps/plan_search.h"

namespace strata::apps {

struct AutoLayout {
  LayoutPlan plan;  ///< the chosen layout and its predictions
  int candidates = 0, fitting = 0;
  std::string why;  ///< one line: the choice, its predicted step and bytes, the runner-up
};

/// The fastest layout of `world` ranks for `cfg` (its parallel section is ignored beyond
/// its options) that fits cfg.run.memory_per_rank (0: no limit), predicted at
/// `flops_per_s` per rank and the planner's default bandwidth. ConfigError naming
/// `parallel: auto` and run.memory_per_rank, listing the closest layouts, when none fits.
AutoLayout choose_layout(const TrainConfig& cfg, int world, double flops_per_s);

/// Writes the chosen layout into cfg.parallel (dims, schedule, micro-batches, chunks).
void apply_layout(TrainConfig& cfg, const LayoutPlan& plan);

}  // namespace strata::apps
