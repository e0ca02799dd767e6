// Predicted vs measured memory for `strata train` and `strata plan`: the planner input a
// config describes, and the table that puts the allocator's per-category bytes beside
// parallel::plan_memory's prediction (reusable by every data-parallel trainer).
#pragma once
#include <cstdint>
#include <string>

#include "apps/config.h"
#include <strata/core/memory.h>
#include <strata/nn/module.h>
#include <strata/parallel/memory_plan.h>

namespace strata::apps {

/// The planner input for `model` trained as `cfg` says, at `world` ranks and ZeRO
/// `stage`: Ψ and the element size from model.parameters() (all must share one element
/// size, else strata::Error), the state count of cfg.optim, and stage 0's DDP buckets
/// (one flat copy of the grads unless parallel.gradient_as_bucket_view, none when
/// `ddp_buckets` is false, e.g. mode none/dp). flat_units is left empty (one unit); a
/// ZeRO trainer that pads per unit sets it.
parallel::MemoryPlanInput memory_plan_input(const TrainConfig& cfg, const nn::Module& model, int world, int stage,
                                            bool ddp_buckets = true);
/// The same from a parameter count and element size (the planner counts from the config,
/// never building the model). run.precision bf16_params gives the 16-bit regime.
parallel::MemoryPlanInput memory_plan_input(const TrainConfig& cfg, int64_t elements, int64_t bytes_per_element,
                                            int world, int stage, bool ddp_buckets = true);

/// "0.90 MiB (4.00Ψ)": bytes in MiB and as a multiple of psi bytes-elements (psi > 0).
std::string format_bytes_psi(int64_t bytes, int64_t psi);

/// `strata plan`'s table: one row per ZeRO stage 0..3 (DDP, ZeRO-1, -2, -3) of
/// plan_memory(base with that stage), each category in MiB and multiples of Ψ, then the
/// exact total bytes; the row of `configured_stage` is marked "<- configured".
std::string format_plan_table(const parallel::MemoryPlanInput& base, int configured_stage);

/// A table, one row per category (params, grads, optimizer, comm, then activations and
/// other, which the plan does not predict, and the total): the tracker's current and
/// peak bytes beside `predicted`, each in MiB and multiples of Ψ = `psi`. `heading` is
/// the first line. The tracker is read, not reset (peaks are since process start, or
/// the last reset_peaks()). Thread-safe as far as the tracker is (atomics).
std::string format_memory_report(const parallel::MemoryPlan& predicted, const MemoryTracker& tracker, int64_t psi,
                                 const std::string& heading);

}  // namespace strata::apps
