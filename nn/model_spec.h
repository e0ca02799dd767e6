// What the layout planner knows of a model without building it: each parameter's name,
// shape, whether the family's TP plan splits it and where the pipeline puts it, the
// FLOPs of a sample, the activations a rank keeps, what tp exchanges and, for a mixture of
// experts, which weights are experts and what the all-to-all moves. A family
// derives it from its own config (nn/gpt_spec.h, mlp_spec.h, cnn_spec.h), so the
// planner never mirrors a model's shapes.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <strata/tensor/tensor.h>

namespace strata::nn {

/// Where the pipeline split puts a parameter.
enum class StagePart {
  whole,  ///< the family has no pipeline description: every rank holds the whole model
  block,  ///< in one block of the block list (ParamSpec::block)
  first,  ///< on the first stage (embeddings)
  last,   ///< on the last stage (final norm, untied head)
  tied,   ///< on the first and the last stage (a tied embedding), held once at pp 1
};

/// One parameter of the model, as its module registers it.
struct ParamSpec {
  std::string name;           ///< "h.3.attn.c_attn.weight"
  Shape shape;                ///< (out, in) for a Linear, (num, dim) for an Embedding, ...
  bool tp_sharded = false;    ///< the family's TP plan (without sequence parallelism) splits it over tp
  StagePart part = StagePart::whole;
  int64_t block = -1;         ///< its block (part block)
  /// An MoE layer's expert weight (experts.w1, w2, w3; not the router or the shared
  /// experts): under expert parallelism each rank holds experts / ep of it.
  bool expert = false;
  int64_t numel() const { return shape_numel(shape); }
};

/// `count` all-reduces over tp of `per_sample` values per sample of a micro-batch.
struct TpAllReduce {
  int64_t per_sample = 0;
  int64_t count = 1;
};

/// One pipeline rank's share of the model, for its activation peak. A family without a
/// pipeline description reads only batch, tp and sequence_parallel (one rank holds all).
struct RankActivationQuery {
  int64_t batch = 1;     ///< samples per micro-batch
  int64_t layers = 0;    ///< blocks of the largest chunk (stage) the rank runs
  bool first = false;    ///< it runs the first stage
  bool last = false;     ///< it runs the last stage
  int in_flight = 1;     ///< its peak of (micro-batch, chunk) pairs forwarded and not yet backwarded
  bool pipeline = false; ///< under the pipeline executor (pp > 1)
  int tp = 1;
  bool sequence_parallel = false;
  int64_t moe_layers = 0;  ///< of `layers`, the blocks whose MLP is the mixture of experts
  int ep = 1;              ///< expert-parallel degree (each rank holds experts / ep of every MoE layer)
};

/// Appends the parameter `name` of `shape`, in pipeline part `part` (block index `block`
/// for StagePart::block), not yet marked tp-sharded.
void add_param(std::vector<ParamSpec>& out, const std::string& name, Shape shape, StagePart part, int64_t block = -1);

/// A rank's activation peak from a family's per-tensor counts: `stored(in)` the bytes a
/// micro-batch keeps from forward to backward for `in` (its blocks, or with layers = 0 its
/// first/last-stage parts), `transient(in)` what one block's backward adds at its largest
/// (in.last set where the rank also runs the head's and the loss's backward),
/// `recompute(in)` what one recomputation holds (0 without). `in_flight` micro-batches'
/// stored bytes, one transient, and one recomputation, which never coexists with the last
/// stage's head and loss activations (backwarded and freed before the blocks are).
/// In: a family's activation input with fields layers, moe_layers, first, last, pipeline.
template <class In, class Stored, class Transient, class Recompute>
int64_t rank_activation_bytes(const RankActivationQuery& q, const In& blocks, Stored stored, Transient transient,
                              Recompute recompute) {
  int64_t bytes = int64_t(q.in_flight) * stored(blocks);
  In ends = blocks;
  ends.layers = 0;
  ends.moe_layers = 0;
  ends.first = q.first;
  ends.last = q.last;
  ends.pipeline = q.pipeline;  // a rank's stages: its output (or the logits) per in-flight micro-batch
  if (q.first || q.last || q.pipeline) bytes += int64_t(q.in_flight) * stored(ends);
  if (q.layers > 0) {
    In backward = blocks;
    backward.last = q.last;  // the rank's backward starts with the head's and the loss's
    bytes += transient(backward);
  }
  if (const int64_t re = recompute(blocks); re > 0) {
    In head = ends;
    head.first = false;
    const int64_t freed = q.last ? stored(head) : 0;
    bytes += re > freed ? re - freed : 0;
  }
  return bytes;
}

/// What full recomputation holds at once: one block's activations as they are kept without
/// it, the larger of an MoE block and a dense one when the rank runs both kinds. In: a
/// family's activation input with fields checkpoint, layers, moe_layers, first, last,
/// pipeline; `bytes(in)` its stored bytes.
template <class In, class Bytes>
int64_t one_block_recompute_bytes(const In& a, Bytes bytes) {
  In one = a;
  one.checkpoint = false;
  one.layers = 1;
  one.moe_layers = a.moe_layers > 0 ? 1 : 0;
  one.first = one.last = one.pipeline = false;
  const int64_t first = bytes(one);
  if (a.moe_layers == 0 || a.moe_layers == a.layers) return first;
  one.moe_layers = 0;  // a dense block
  return std::max(first, bytes(one));
}

/// The planner's description of one model. Build it with from_params(), then fill the
/// family's estimates.
struct ModelSpec {
  std::vector<ParamSpec> params;  ///< the trainable parameters in named_parameters() order (a tied head once)

  // Counted from `params` by from_params().
  int64_t total = 0;       ///< Ψ
  int64_t tp_sharded = 0;  ///< of Ψ, the elements the TP plan splits over tp
  /// Per block of the block list, its parameters and the tp-sharded ones among them
  /// (empty: the family has no pipeline description and is planned at pp 1 only).
  std::vector<int64_t> block_params, block_tp_sharded;
  /// What the first stage holds besides its blocks (embeddings) and the last (final norm
  /// and head: a tied embedding again), each with its tp-sharded part.
  int64_t first_params = 0, first_tp_sharded = 0, last_params = 0, last_tp_sharded = 0;
  /// The tied parameters, counted in both first_* and last_* (held once by a rank holding both ends).
  int64_t tied_params = 0, tied_tp_sharded = 0;
  /// Of Ψ, the expert weights (ParamSpec::expert: every expert of every MoE layer), and
  /// per block of the block list its own (0 for a dense block). Never tp-sharded.
  int64_t expert_params = 0;
  std::vector<int64_t> block_expert_params;
  /// What one token computes with: Ψ less the (E - top_k) / E of the expert weights that
  /// its top_k experts leave out (router and shared experts included); Ψ for a dense
  /// model. from_params() sets it to Ψ; the MoE families lower it (set_moe_costs).
  int64_t active_params = 0;

  // The family's estimates.
  double flops_per_sample = 0;  ///< forward + backward of one training sample
  /// Values per sample a stage sends to the next (and receives back as its gradient).
  int64_t stage_output_per_sample = 0;
  /// What tp all-reduces per micro-batch, forward and backward together: per block a
  /// rank runs, on the first stage, on the last stage, and once for a model without blocks.
  std::vector<TpAllReduce> tp_per_block, tp_first, tp_last, tp_whole;
  /// Mixture of experts (all 0 for a dense model): E and top_k of every MoE layer, and
  /// the values per sample one dispatch of one MoE layer moves before the ep split (its
  /// T·top_k routed rows of C). Per micro-batch a rank sends (ep - 1)/ep of b times them in
  /// each of 4 all-to-alls per MoE layer (dispatch and combine, forward and backward).
  int64_t experts = 0, top_k = 0;
  int64_t a2a_per_sample = 0;
  /// What tp all-reduces per MoE block (its attention's only: the MoE runs whole on every
  /// tp rank); tp_per_block is then a dense block's.
  std::vector<TpAllReduce> tp_per_moe_block;
  /// Widths the TP plan cuts that tp must divide beyond the family's limits (the MLP's
  /// paired hidden layers).
  std::vector<int64_t> tp_widths;
  /// Peak activation bytes of one rank (stored activations of its in-flight micro-batches
  /// and what one backward adds at its largest). Set by every family.
  std::function<int64_t(const RankActivationQuery&)> activation_bytes;

  bool has_tp_plan() const { return tp_sharded > 0; }
  bool has_pp_plan() const { return !block_params.empty(); }
  bool has_moe() const { return experts > 0; }
  /// The MoE blocks (blocks with expert weights).
  int64_t moe_layers() const {
    int64_t n = 0;
    for (int64_t e : block_expert_params) n += e > 0 ? 1 : 0;
    return n;
  }
  /// Whether block `l` of the block list carries expert weights (an MoE block).
  bool moe_block(int64_t l) const {
    return l >= 0 && size_t(l) < block_expert_params.size() && block_expert_params[size_t(l)] > 0;
  }
  /// A spec of `params` with the counts above filled in (every other field left for the family).
  static ModelSpec from_params(std::vector<ParamSpec> params);
};

/// The costs of a decoder-only language model (GPT, Llama) of `layers` blocks of width `c`
/// over `t` positions, into `s` (whose `total` and `active_params` are counted): FLOPs
/// (6N + 12·L·C·T)·T per sequence (PaLM's estimate: N the active parameters, all of them
/// for a dense model, the attention scores and values of T positions); a stage sends
/// (B, T, C); tp all-reduces (B, T, C) twice per block each way (once per MoE block: its
/// attention's), once for the embeddings and once for the head's input, and the loss's 3
/// of B·T values.
void set_decoder_lm_costs(ModelSpec& s, int64_t layers, int64_t c, int64_t t);

}  // namespace strata::nn
