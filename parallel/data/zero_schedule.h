// ZeRO-2/3's backward schedule as data, and the exact backward peak planned from it:
// the order in which units' reduce-scatters are launched, how many staged units the
// runtime holds (L), and plan_backward_peak() replaying that schedule on byte counters.
#pragma once
#include <cstddef>
#include <vector>

#include <strata/parallel/data/flat_shard.h>
#include <strata/parallel/memory_plan.h>

namespace strata::parallel {

class ZeroDataParallel;

/// L, the stage-2/3 reduce-scatters whose staged gradients (the unit's full gradient,
/// copied out of .grad) are held at once. Launching unit i first waits, on the compute
/// thread, for unit i-L's reduce-scatter and frees its staging; finalize() frees the rest.
/// 2: the reduce-scatter of unit i may run through the backward of units i+1 and i+2
/// before anyone waits for it (DeepSpeed ZeRO-2's overlap_comm double buffer; the depth
/// of FSDP1's limit_all_gathers). 1 would be FSDP2's (wait for the previous
/// reduce-scatter before the next is staged): one unit less memory, less overlap.
inline constexpr int kZeroReduceScatterDepth = 2;

/// Units in the order their reduce-scatters are launched: module units (stage 3, unit 0
/// the root) the wrapped ones last-first, then the root; size units in their order
/// (already backward order).
std::vector<int> zero_launch_order(size_t units, bool by_module);

/// ZeRO-2/3's backward as plan_backward_peak() replays it.
struct ZeroBackwardSchedule {
  std::vector<FlatUnit> units;    ///< unit order (stage 3: root first); params are registration indices
  std::vector<int> launch_order;  ///< units in the order their reduce-scatters are launched
  int reduce_scatter_depth = kZeroReduceScatterDepth;  ///< L
  bool prefetch = true;           ///< stage 3: ZeroOptions::prefetch
};

/// The schedule `z` runs (its units, launch order, L and prefetch).
ZeroBackwardSchedule zero_backward_schedule(const ZeroDataParallel& z);

/// plan_backward_peak(in) for stages 0-1 (the schedule is not needed there), and for
/// stages 2-3 the peak of the schedule `z` replayed event by event, as the runtime runs
/// it on the compute thread (every free during backward happens at a defined point of
/// that thread, never when the comm thread completes an op). Same conditions: from the
/// start of backward to the end of finalize(), after zero_grad() (stages 2-3
/// reduce-scatter straight into the gradient slices), a reduction that stages nothing.
/// Gradients arrive in reverse registration order (the order plan_zero_units assumes);
/// each adds its .grad (B x numel). When a unit's last gradient arrives, stage 3 frees
/// its gathered parameters, and every unit complete in launch order is launched: while
/// L are staged the oldest is waited for and its staging freed, the unit's padded
/// staging is allocated (B x padded), its .grad tensors freed (the one whose hook
/// launched it when that hook returns: the engine holds it until then). finalize()
/// only frees. So, with arrivals contiguous per unit, grads peak at
///   BΨ' + max over launches i of (G_i + S_{i-L+1} + ... + S_i)  (G_i + S_{i-L} + ... +
///   S_{i-1}, just before unit i-L's staging is freed, when larger), G_i = unit i's .grad
///   bytes plus those of later units already arrived (stage 3: the root's ln_f);
/// stage 3 holds gathered parameters (comm): the root from backward's start until its
/// last gradient, each wrapped unit from its prefetch by the unit after it in backward
/// (or its own first gradient, without prefetch) until its last gradient, so
///   comm = P_root + max over adjacent wrapped units (P_k + P_{k-1})  (P = B x padded).
/// params and optimizer are static: plan_memory(in). z.units' numels must sum to Ψ.
MemoryPlan plan_backward_peak(const MemoryPlanInput& in, const ZeroBackwardSchedule& z);

}  // namespace strata::parallel
