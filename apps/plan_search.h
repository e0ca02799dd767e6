// The layout search behind `strata plan`: every (dp, tp, pp, zero, schedule) layout of N
// ranks (and ep for a mixture of experts) with its per-rank bytes, bytes sent per step
// and predicted bubble, ranked by a
// simple step-time model (docs/planner.md). The model is its family's description
// (nn::ModelSpec, model_family.h), counted from the config: nothing is allocated.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "apps/config.h"
#include <strata/nn/model_spec.h>
#include <strata/parallel/memory_plan.h>
#include <strata/parallel/parallel_dims.h>
#include <strata/parallel/pipeline/schedule.h>

namespace strata::apps {

/// The most (micro-batch, chunk) pairs pipeline rank `rank` has forwarded and not yet
/// backwarded under `shape`, in closed form (what parallel::simulate() reports, without
/// building the schedule): GPipe m; 1F1B min(m, p - rank); interleaved (Megatron's
/// warm-up) min(v·m, 2 (p - rank - 1) + (v - 1) p + 1).
int peak_in_flight(const parallel::ScheduleShape& shape, int rank);

/// The step-time model's constants.
struct PlanAssumptions {
  double flops_per_s = 0;     ///< per rank (--gflops, or measured)
  double bytes_per_s = 0;     ///< per rank, every dimension alike (--bandwidth)
  int64_t memory_per_rank = 0;  ///< bytes; 0 = no limit (--memory-per-rank)
  int microbatches = 0;       ///< pp > 1; 0 = one sample per micro-batch
};

/// What one pipeline rank holds (every dp and tp rank of it alike).
struct RankBytes {
  parallel::MemoryPlan memory;  ///< static: params, grads, optimizer state, DDP buckets
  int64_t activations = 0;      ///< its peak: stored activations of its peak in-flight micro-batches + one backward's transients
  int in_flight = 1;
  int64_t total() const { return memory.total() + activations; }
};

/// One candidate layout and what the planner predicts for it (the worst pipeline rank).
struct LayoutPlan {
  parallel::ParallelDims dims;
  parallel::ScheduleKind schedule = parallel::ScheduleKind::one_f_one_b;
  int microbatches = 1, virtual_stages = 1;
  parallel::MemoryPlan memory;  ///< static bytes of the rank with the most in total
  int64_t activations = 0;      ///< that rank's peak (in-flight micro-batches' stored activations + one backward's transients)
  int in_flight = 1;            ///< its peak in-flight micro-batches (chunks, interleaved)
  int64_t dp_bytes = 0, tp_bytes = 0, pp_bytes = 0;  ///< sent per step by one rank
  int64_t ep_bytes = 0;  ///< the MoE layers' all-to-alls per step (0 at ep 1)
  double bubble = 0;
  double compute_s = 0, comm_s = 0, step_s = 0;
  bool fits = true;
  std::string note;  ///< why the planner cannot vouch for its bytes ("" when it can); never chosen
  std::vector<RankBytes> pp_ranks;  ///< per pipeline rank (one entry at pp 1)
  int64_t total() const { return memory.total() + activations; }
};

/// The predictions for one layout of the model `model` describes (its family's spec of
/// `cfg`; dims resolved; schedule fields used only at pp > 1). ConfigError naming the key
/// when the layout cannot be split that way.
LayoutPlan plan_layout(const TrainConfig& cfg, const nn::ModelSpec& model, const parallel::ParallelDims& dims,
                       parallel::ScheduleKind schedule, int microbatches, int virtual_stages,
                       const PlanAssumptions& a);

/// Every valid layout of `ranks` ranks (tp within the family's limits and TP widths, pp at
/// most the blocks, dp dividing the batch; ZeRO stages only at dp > 1; each pipeline
/// schedule at pp > 1, interleaved with 2 chunks per rank where the blocks and
/// micro-batches allow; for a mixture of experts every ep dividing dp and the experts),
/// sorted by predicted step time (fitting layouts first).
std::vector<LayoutPlan> plan_layouts(const TrainConfig& cfg, int ranks, const PlanAssumptions& a);

/// Bytes one rank sends per step in the MoE all-to-alls: per MoE layer it runs and per
/// micro-batch, 4 exchanges (dispatch and combine, forward and backward) of
/// (ep - 1)/ep · samples · a2a_per_sample values of `bytes_per_value` each (what it keeps
/// for its own experts does not travel).
int64_t all_to_all_bytes(int64_t a2a_per_sample, int64_t samples, int ep, int64_t moe_layers, int microbatches,
                         int64_t bytes_per_value);

/// True when the config fixes the layout (parallel.dp a number, tp, pp or ep above 1, a
/// ZeRO stage, or thread replicas): `strata plan` then prints that layout alone.
bool layout_fixed(const TrainConfig& cfg);

}  // namespace strata::apps
