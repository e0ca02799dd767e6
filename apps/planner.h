// The layout planner behind `strata plan`: the model's parameters counted from the config
// alone (names and shapes, as build_model would register them, never allocated), and every
// (dp, tp, pp, zero, schedule) layout of N ranks with its per-rank bytes, bytes sent per
// step and predicted bubble, ranked by a simple step-time model (docs/planner.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "apps/config.h"
#include <strata/parallel/memory_plan.h>
#include <strata/parallel/parallel_dims.h>
#include <strata/parallel/pipeline/schedule.h>

namespace strata::apps {

/// One parameter of the model a config describes, as build_model(cfg) registers it.
struct ParamShape {
  std::string name;  ///< "h.3.attn.c_attn.weight"
  Shape shape;       ///< (out, in) for a Linear, (num, dim) for an Embedding, ...
  int64_t numel() const;
};

/// The trainable parameters of build_model(cfg), in named_parameters() order, derived from
/// the config alone (only classifier datasets whose input shape lives in a file header,
/// idx/npy, read that header). A tied GPT head is listed once (wte.weight). Cheap: a 70B
/// GPT is ~1000 entries.
std::vector<ParamShape> model_param_shapes(const TrainConfig& cfg);

/// What the planner needs to know about a model, counted from model_param_shapes().
struct ModelCounts {
  int64_t params = 0;          ///< Ψ
  /// Of Ψ, the elements model_tp_plan() splits over tp (0 for a model without a plan).
  int64_t tp_sharded = 0;
  bool has_tp_plan = false;    ///< mlp with a hidden pair, gpt
  bool has_pp_plan = false;    ///< gpt (the MLP splits by layers too, but is not planned at pp > 1)
  /// gpt: per block h.i, its parameters and the tp-sharded ones among them
  std::vector<int64_t> block_params, block_tp_sharded;
  /// gpt: what the first stage holds besides its blocks (wte, wpe) and the last (ln_f and
  /// the head: wte again when tied, lm_head otherwise), each with its tp-sharded part
  int64_t first_params = 0, first_tp_sharded = 0, last_params = 0, last_tp_sharded = 0;
  /// gpt with tied weights: wte, counted in both first_* and last_* (held once by a rank
  /// holding both ends, i.e. at pp 1)
  int64_t tied_params = 0, tied_tp_sharded = 0;
  /// mlp at tp > 1: values per sample its hidden pairs all-reduce (forward: the pair's
  /// output, backward: its input)
  int64_t tp_exchange_per_sample = 0;
  /// mlp, cnn: f32 values per sample kept for backward, estimated (each layer's output
  /// and its activation's); a GPT's are gpt_activation_bytes()
  int64_t activations_per_sample = 0;
  double flops_per_sample = 0;  ///< plan_flops_per_sample()
};
ModelCounts count_model(const TrainConfig& cfg);

/// FLOPs of one training sample, as train_flops_per_sample() (flops.h) counts them, from
/// the config alone.
double plan_flops_per_sample(const TrainConfig& cfg, const std::vector<ParamShape>& params);

/// The stored activations of a GPT micro-batch that a pipeline rank keeps from a forward to
/// its backward, as strata's autograd graph holds them (f32, no activation checkpointing
/// unless `checkpoint`): see gpt_activation_bytes() in planner.cpp for the per-tensor sum.
struct ActivationInput {
  int64_t batch = 1, seq = 1, embd = 1, heads = 1, vocab = 1;
  int64_t layers = 1;      ///< blocks on this stage
  bool first = true;       ///< holds the embeddings
  bool last = true;        ///< holds ln_f, the head and the loss
  int tp = 1;
  bool sequence_parallel = false;
  bool dropout = false;    ///< model.dropout > 0
  bool checkpoint = false; ///< model.checkpoint_activations: only each block's input is kept
  /// Under the pipeline executor, which holds each in-flight micro-batch's stage output
  /// until its backward: N·C more on a stage that sends its output on (last = false), the
  /// logits N·V/tp on the last stage.
  bool pipeline = false;
};
int64_t gpt_activation_bytes(const ActivationInput& in);
/// What one block's backward holds on top of the stored activations at its largest (the
/// MLP's output-gradient pair and c_fc's weight gradient); a rank's peak adds it once.
int64_t gpt_backward_transient_bytes(const ActivationInput& in);

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
  double bubble = 0;
  double compute_s = 0, comm_s = 0, step_s = 0;
  bool fits = true;
  std::string note;  ///< why the planner cannot vouch for its bytes ("" when it can); never chosen
  std::vector<RankBytes> pp_ranks;  ///< per pipeline rank (one entry at pp 1)
  int64_t total() const { return memory.total() + activations; }
};

/// The predictions for one layout (dims resolved; schedule fields used only at pp > 1).
/// ConfigError naming the key when the layout cannot be split that way.
LayoutPlan plan_layout(const TrainConfig& cfg, const ModelCounts& counts, const parallel::ParallelDims& dims,
                       parallel::ScheduleKind schedule, int microbatches, int virtual_stages,
                       const PlanAssumptions& a);

/// Every valid layout of `ranks` ranks (tp dividing the heads and vocabulary, pp at most the
/// blocks, dp dividing the batch; ZeRO stages only at dp > 1; each pipeline schedule at
/// pp > 1, interleaved with 2 chunks per rank where the blocks and micro-batches allow),
/// sorted by predicted step time (fitting layouts first).
std::vector<LayoutPlan> plan_layouts(const TrainConfig& cfg, int ranks, const PlanAssumptions& a);

/// "1.50 GiB", "600.00 KiB", "12 B" (powers of 1024).
std::string bytes_str(int64_t bytes);

/// The table `strata plan` prints for plan_layouts(); `limit` rows at most (0 = all).
std::string format_layouts(const std::vector<LayoutPlan>& plans, const PlanAssumptions& a, size_t limit);

/// True when the config fixes the layout (parallel.dp a number, tp or pp above 1, a ZeRO
/// stage, or thread replicas): `strata plan` then prints that layout alone.
bool layout_fixed(const TrainConfig& cfg);

}  // namespace strata::apps
