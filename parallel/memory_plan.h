// Predicted static memory per data-parallel rank for DDP and the ZeRO stages (the ZeRO
// paper's / DeepSpeed's formulas, generalised by element size and optimizer state count,
// with the per-rank padding of flat shards). Pure arithmetic: `strata plan` prints it and
// `strata train` compares it with what the allocator measured.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata::parallel {

/// What the plan depends on. Ψ = param_elements.
struct MemoryPlanInput {
  int64_t param_elements = 0;     ///< Ψ: sum of numel over the model's parameters
  int64_t bytes_per_element = 4;  ///< element size of params and grads (f32: 4, 16-bit model states: 2)
  int optimizer_states = 2;       ///< state tensors per parameter (optimizer_state_count())
  /// Element size of each optimizer state tensor; 0 = bytes_per_element. 16-bit model
  /// states keep f32 state: 4.
  int64_t state_bytes_per_element = 0;
  /// Bytes per parameter element of the optimizer's master weights, sharded like its
  /// state: 4 (f32 masters) for 16-bit model states, else 0.
  int64_t master_bytes_per_element = 0;
  int world_size = 1;             ///< N data-parallel ranks, >= 1
  int zero_stage = 0;             ///< 0 (plain DDP) .. 3
  /// Stage 0 only: bytes of DDP's bucket buffers, one flat copy of the grads (4Ψ for
  /// f32), or 0 with gradient_as_bucket_view. Stages 1-3 hold no persistent buckets.
  int64_t ddp_bucket_bytes = 0;
  /// Element counts of the flat buffers ZeRO shards; each is padded separately to a
  /// multiple of N. Empty = one unit holding all Ψ elements. Must sum to Ψ.
  std::vector<int64_t> flat_units;
  int tp = 1;  ///< tensor-parallel degree, >= 1
  /// Of Ψ, the elements tensor parallelism splits over tp (tp_sharded_elements of the
  /// model and its plan; a multiple of tp). A rank holds tp_rank_elements() of them all.
  int64_t tp_sharded_elements = 0;
  /// Expert parallelism (ep > 1): of this rank's Ψ, the expert weights it holds (experts / ep
  /// of every MoE layer's w1, w2, w3; never tp-sharded). They are replicated over the
  /// dp / ep ranks at the same ep position, which all-reduce their gradients: whole params,
  /// grads and optimizer state at every ZeRO stage, outside DDP's buckets and ZeRO's flat
  /// units. 0 at ep 1, where the experts are parameters like the others.
  int64_t expert_elements = 0;
};

/// Elements of the model one tp rank holds: sharded / tp + (Ψ - sharded) (replicated).
/// strata::Error when the sharded part exceeds Ψ or does not divide by tp.
int64_t tp_rank_elements(const MemoryPlanInput& in);
/// Of tp_rank_elements(), what DDP or ZeRO handles: all but the expert_elements.
int64_t dense_rank_elements(const MemoryPlanInput& in);

/// Elements of expert weights one rank holds: `expert_elements` (every expert of the
/// layers it runs) / ep, under expert parallelism (ep > 1); 0 at ep 1. strata::Error when
/// ep does not divide them.
int64_t ep_rank_expert_elements(int64_t expert_elements, int ep);

/// Predicted bytes one rank holds, by category (the MemCategory names).
struct MemoryPlan {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
  int64_t comm = 0;  ///< DDP bucket buffers (stage 0)
  int64_t total() const { return params + grads + optimizer + comm; }
};

/// Elements one rank holds of a flat buffer of n elements sharded over `world` ranks:
/// the buffer is padded to ceil(n/world)*world, so every rank holds ceil(n/world).
int64_t shard_elements(int64_t n, int world);
/// Sum of shard_elements over `units` (each unit padded on its own).
int64_t sharded_elements(std::span<const int64_t> units, int world);

/// State tensors per parameter of optim.name: adam/adamw 2 (exp_avg, exp_avg_sq), sgd 1
/// with momentum > 0 (momentum_buffer) else 0. strata::Error on an unknown name.
int optimizer_state_count(const std::string& optim_name, double momentum = 0.0);

/// The input for 16-bit model states (bf16/f16 params and grads, f32 masters and f32
/// optimizer state): B = 2, state element 4, master 4. With Adam K = 4 + 8 = 12 as in the
/// ZeRO paper: DDP 2Ψ + 2Ψ + 12Ψ (+ 2Ψ 16-bit buckets = 18Ψ), ZeRO-1 (2 + 2 + 12/N)Ψ,
/// ZeRO-2 (2 + 14/N)Ψ, ZeRO-3 16Ψ/N.
MemoryPlanInput sixteen_bit_states(MemoryPlanInput in);

/// Per-rank bytes for in.zero_stage at in.world_size ranks, with B = bytes_per_element,
/// S = optimizer_states (state element size B_s = state_bytes_per_element or B, master
/// bytes M = master_bytes_per_element, so the optimizer holds K = S·B_s + M bytes per
/// element) and Ψ' = sharded_elements(flat_units, N) (≈ Ψ/N); under tensor
/// parallelism (tp > 1) Ψ below is this tp rank's tp_rank_elements(), which ZeRO shards
/// over the dp ranks (flat_units then sum to it); under expert parallelism Ψ is
/// dense_rank_elements() and the X = expert_elements add BX params, BX grads and KX
/// optimizer state at every stage:
///   stage 0: params BΨ,  grads BΨ,  optimizer KΨ,  comm ddp_bucket_bytes
///   stage 1: params BΨ,  grads BΨ,  optimizer KΨ'
///   stage 2: params BΨ,  grads BΨ', optimizer KΨ'
///   stage 3: params BΨ', grads BΨ', optimizer KΨ'
/// (f32 + Adam: 16Ψ (+4Ψ), 8Ψ + 8Ψ/N, 4Ψ + 12Ψ/N, 16Ψ/N; 16-bit states + Adam: see
/// sixteen_bit_states.) Static state only: activations,
/// transient gathers and collective scratch are not counted. strata::Error (STRATA_CHECK)
/// on a bad input (negative counts, N < 1, stage outside 0..3, units not summing to Ψ).
MemoryPlan plan_memory(const MemoryPlanInput& in);

/// Per category, the highest bytes one rank holds from the start of backward to the end
/// of finalize() (the backward peak), for stages whose gradient traffic is deterministic,
/// with a reduction that stages nothing (the local backend's native reduction, or mpi's,
/// at comm.reduce_dtype param):
///   stage 0 (DDP): plan_memory(in): every .grad (BΨ) is live when backward ends and the
///            buckets are static, so the static plan is also the peak;
///   stage 1: plan_memory(in) + comm BΨ': each unit's reduce-scatter output (its shard)
///            lives from the unit's launch in backward until finalize() copies it into
///            the flat gradients.
/// Each category only grows during backward at these stages, so the peak is reached at
/// finalize() and ranks sharing one allocator peak at N times it. Stages 2 and 3 depend
/// on their units: plan_backward_peak(in, zero_backward_schedule(zero)) in
/// zero_schedule.h replays their schedule; strata::Error for them here.
MemoryPlan plan_backward_peak(const MemoryPlanInput& in);

/// The LayerNorm/dropout regions of a pre-LN transformer (outside the tensor-parallel
/// regions, Megatron-SP's "10 sbh" part), the activations one rank keeps from forward to
/// backward there.
struct SequenceRegionInput {
  int64_t batch = 1, seq = 1, embd = 1, layers = 1;
  int64_t bytes_per_element = 4;  ///< of the residual stream (f32: 4)
  bool dropout = false;           ///< residual-stream dropout p > 0 (masks are kept)
  int tp = 1;
  bool sequence_parallel = false;
};
/// Per LayerNorm (2 per layer and the final one) its input (B·T·C elements) and its
/// f32 mean and rstd (2·B·T); with dropout, per residual-stream dropout (2 per layer and
/// the embeddings') a u8 mask of B·T·C. Every tp rank holds all of it without sequence
/// parallelism, and T/tp of the sequence with it (T must divide by tp).
int64_t sequence_region_activation_bytes(const SequenceRegionInput& in);

}  // namespace strata::parallel
