// The data a model family's parallel plans are made of: the tensor-parallel plan
// (module path -> style), the pipeline split (first/last children, the block list, how a
// stage runs and what it sends) and the limits the degrees must respect. A family builds
// them next to its module (nn/gpt_plans.h, nn/mlp_plans.h); parallel/ applies them to any
// Module without knowing the family (torchtitan's per-model parallelize plans).
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <strata/core/dtype.h>
#include <strata/nn/module.h>
#include <strata/tensor/tensor.h>

namespace strata::nn {

// ---------------------------------------------------------------- tensor parallel

enum class TpStyle {
  colwise,      ///< ColumnParallelLinear, output left sharded
  colwise_qkv,  ///< ColumnParallelLinear of a fused q|k|v weight: whole heads of each
  rowwise,      ///< RowParallelLinear, input already sharded
  /// A module with its own generator (Dropout) inside a tensor-parallel region: each tp
  /// rank draws different masks (Megatron's model-parallel RNG). Every other generator
  /// is made equal over tp, so replicated regions draw identical masks.
  parallel_rng,
  /// Vocabulary-parallel (Megatron's VocabParallelEmbedding / parallel lm head): an
  /// nn::Embedding (wte) becomes a VocabParallelEmbedding, a bias-free nn::Linear head
  /// (lm_head) a ColumnParallelLinear over the vocabulary. When the path is the head of an
  /// nn::LanguageModel (the tied wte, or lm_head), its logits and loss are computed from
  /// the vocabulary shards (vocab_parallel_cross_entropy): (N, V) never exists on a rank.
  vocab_parallel,
  /// A LayerNorm or RMSNorm on sequence shards (SequenceParallelNorm). Any such entry turns on
  /// sequence parallelism (Megatron-SP) for the whole plan: the residual stream of the
  /// nn::LanguageModel is split along T after the embeddings and gathered after the final
  /// norm, colwise layers all-gather their input along T and rowwise ones reduce-scatter
  /// their output along T (in place of the all-reduces). Needs a vocab_parallel head.
  sequence_norm,
};
const char* tp_style_name(TpStyle s);

/// Module path ("net.1", "h.0.attn.c_attn") -> style. Every path must name an nn::Linear,
/// except parallel_rng paths (a module with its own generator), vocab_parallel ones (an
/// Embedding or a bias-free Linear) and sequence_norm ones (a LayerNorm or an RMSNorm).
using TpPlan = std::map<std::string, TpStyle>;

/// Whether `plan` splits the parameter `name` ("h.0.mlp.c_fc.bias") over tp, as
/// parallel::apply_tp does: every parameter of a colwise, colwise_qkv or vocab_parallel
/// module, the weight of a rowwise one (its bias stays whole); nothing else.
bool tp_shards(const TpPlan& plan, const std::string& name);

// ---------------------------------------------------------------- pipeline

/// Stage `stage` of `stages`: the blocks [begin, end) of the model's block list, plus the
/// plan's `first` children on stage 0 and its `last` children on the last stage.
struct PipelineStageSpec {
  int stage = 0;
  int stages = 1;
  int64_t begin = 0, end = 0;
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
};

/// The activation a stage sends for one micro-batch (shape and dtype of its output).
struct ActivationSpec {
  Shape shape;
  DType dtype = DType::f32;
};

/// The model's half of the pipeline split. Empty (no forward) for a model without one.
struct PipelinePlan {
  std::string blocks;              ///< dotted path of the ModuleList of repeated blocks ("h")
  std::vector<std::string> first;  ///< top-level children of the first stage ("wte", "wpe", "drop")
  std::vector<std::string> last;   ///< top-level children of the last stage ("ln_f", "wte" when tied)
  /// Parameters held by both the first and the last stage (a tied embedding): their
  /// gradients are summed between those two ranks before the step (the embedding group).
  std::vector<std::string> tied;
  /// Blocks per stage (parallel.pp_layers, one entry per stage); empty: balanced by
  /// parameter count (the first and last stages' own children counted too).
  std::vector<int64_t> layers;
  /// Blocks per layer, when a layer spans several blocks a stage boundary may not cut
  /// (the MLP's Sequential: [Flatten, Linear, act, Dropout], [Linear, act, Dropout], ...,
  /// [Linear]); `layers` then counts these layers. Empty: each block is a layer.
  std::vector<int64_t> layer_blocks;
  /// Runs one stage on `model` (the rank's pruned model): `in` is the micro-batch input
  /// on the first stage, else the previous stage's output; returns the stage's output
  /// (the model's output on the last stage). Called with autograd on.
  std::function<Tensor(Module& model, const PipelineStageSpec& stage, const Tensor& in)> forward;
  /// The mean loss of one micro-batch from the last stage's output and the targets.
  std::function<Tensor(const Tensor& out, const Tensor& target)> loss;
  /// What a (non-last) stage sends for a micro-batch whose input has shape `mb_input`.
  std::function<ActivationSpec(const PipelineStageSpec& stage, const Shape& mb_input)> activation;
  bool empty() const { return !forward; }
};

// ---------------------------------------------------------------- limits

/// What the parallel degrees must divide in the model (parallel::ParallelDims::check_model
/// checks them). Unset fields are not checked.
struct ModelLimits {
  std::optional<int64_t> heads;   ///< attention heads: tp must divide them
  std::optional<int64_t> vocab;   ///< vocabulary: tp must divide it
  std::optional<int64_t> layers;  ///< blocks: at least pp of them
  std::optional<int64_t> block_size{};  ///< sequence length: divisible by 2 * cp (zigzag split)
  std::optional<int64_t> experts{};     ///< MoE experts per layer (ep must divide them); unset: dense
  bool moe_capacity = false;            ///< MoE with a capacity (drops are decided per whole sequence)
};

/// The sequence splits a family's model supports (a LanguageModel whose blocks see (B, T, C)).
struct SequenceSplits {
  bool sequence_parallel = false;  ///< Megatron-SP under tp (sequence_norm entries in its TP plan)
  bool context_parallel = false;   ///< parallel.cp: its sequences split over cp ranks (ring attention)
};

/// The dtype pipeline stages of `model` send: its parameters' (bf16 under 16-bit model
/// states, so activations stay 16-bit end to end), f32 for a model without parameters.
DType stage_activation_dtype(const Module& model);

}  // namespace strata::nn
