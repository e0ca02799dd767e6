// The pipeline split of a model into stages, without knowing the model: the model's side
// (which children run first and last, how a stage runs, the activation it sends) comes as
// a PipelinePlan built where the model is known (apps/), as the TP plan does. Each rank
// keeps its stages' modules under their global names and drops the rest.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <strata/core/dtype.h>
#include <strata/nn/module.h>
#include <strata/tensor/tensor.h>

namespace strata::parallel {

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

/// The model's half of the split. Empty (no forward) for a model without one.
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
  std::function<Tensor(nn::Module& model, const PipelineStageSpec& stage, const Tensor& in)> forward;
  /// The mean loss of one micro-batch from the last stage's output and the targets.
  std::function<Tensor(const Tensor& out, const Tensor& target)> loss;
  /// What a (non-last) stage sends for a micro-batch whose input has shape `mb_input`.
  std::function<ActivationSpec(const PipelineStageSpec& stage, const Shape& mb_input)> activation;
  bool empty() const { return !forward; }
};

/// The blocks of each of `stages` stages: `explicit_layers` when given (ConfigError naming
/// parallel.pp_layers unless it has one entry >= 1 per stage summing to the block count),
/// else contiguous ranges minimising the largest stage's parameter count, with
/// `first_params` / `last_params` charged to stages 0 and stages-1. ConfigError naming
/// parallel.pp when there are fewer blocks than stages.
std::vector<PipelineStageSpec> split_stages(const std::vector<int64_t>& block_params, int64_t first_params,
                                            int64_t last_params, int stages,
                                            const std::vector<int64_t>& explicit_layers = {});

/// The stages of `model` under `plan` (block and first/last parameter counts read from the
/// model). ConfigError naming the key when the split is impossible.
std::vector<PipelineStageSpec> plan_stages(const nn::Module& model, const PipelinePlan& plan, int stages);

/// Drops from `model` every block and first/last child that none of `mine` runs
/// (replaced by a placeholder without parameters, so the names of what stays are
/// unchanged: a rank holding blocks 5-7 lists "h.5.attn.c_attn.weight"; the placeholder
/// keeps the dropped part's parameterless generator modules). Throws when a top-level child with
/// parameters belongs to no part of the plan.
void keep_stages(nn::Module& model, const PipelinePlan& plan, const std::vector<PipelineStageSpec>& mine);

/// Per entry of model.generators(): 1 when this rank runs it, 0 when it belongs to a part
/// keep_stages dropped (kept only so every rank lists the same generators).
std::vector<char> owned_generators(nn::Module& model);

}  // namespace strata::parallel
