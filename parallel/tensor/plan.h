// The tensor-parallel plan as data (torchtitan's parallelize_module plan): module paths
// mapped to styles, applied to a model by swapping its Linears for their tp shards.
// The plan of a concrete model comes with its family (nn/), never from here.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/nn/lm_hooks.h>
#include <strata/nn/module.h>
#include <strata/nn/parallel_plan.h>
#include <strata/parallel/tensor/layers.h>

namespace strata::parallel {

// The plan's types are the model family's data (nn/parallel_plan.h).
using nn::TpStyle;
using nn::TpPlan;
using nn::tp_style_name;

/// One parameter that apply_tp sharded: its global name and shape and how it is split.
struct TpShardedParam {
  std::string name;
  Shape global_shape;
  TpSplit split;
};

/// What apply_tp did: the sharded parameters (every other parameter is replicated over tp
/// and equal on every tp rank) and the group.
struct TpLayout {
  std::shared_ptr<comm::ProcessGroup> tp;
  std::vector<TpShardedParam> sharded;
  std::vector<std::string> modules;  ///< the paths apply_tp replaced, in plan order
  bool sequence_parallel = false;     ///< the plan has sequence_norm entries
  /// The entry of a sharded parameter, or nullptr when `name` is replicated.
  const TpShardedParam* find(const std::string& name) const;
};

/// Collective over tp: broadcasts tp rank 0's parameters, buffers and generator states
/// (so the ranks shard one model and replicated regions draw the same masks), then
/// replaces every Linear of the plan by its column/row-parallel shard and gives every
/// parallel_rng module's generator a seed of its own per tp rank (seed + 2718 + rank),
/// and installs the nn::LanguageModel hooks a vocab_parallel head or sequence parallelism
/// needs. Parameters keep their global names. Error naming the path when it is absent, of
/// the wrong type, or its width does not split into tp (nothing is changed then). The
/// model must not be wrapped yet.
TpLayout apply_tp(nn::Module& model, const TpPlan& plan, std::shared_ptr<comm::ProcessGroup> tp);

/// RAII: while alive, every module apply_tp replaced is swapped for the whole single-rank
/// module (TpModule::whole(): gathered weights; collective over tp at construction) and
/// the LanguageModel hooks are taken out, so one rank can run the model's forward alone
/// (evaluation, sampling); the shards and hooks are put back at destruction. Changes to
/// the whole weights are not written back.
class TpWholeModules {
 public:
  TpWholeModules(nn::Module& model, const TpLayout& layout);
  ~TpWholeModules();
  TpWholeModules(const TpWholeModules&) = delete;
  TpWholeModules& operator=(const TpWholeModules&) = delete;

 private:
  nn::Module& model_;
  std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>> shards_;
  nn::LmHooks hooks_;
};

/// Elements of `model`'s parameters that apply_tp(model, plan, ...) would split over tp
/// (the weights and column biases of the Linears, the vocab_parallel tables); the rest is
/// replicated. No communication; the model is the whole single-rank one.
int64_t tp_sharded_elements(const nn::Module& model, const TpPlan& plan);
/// The whole model's parameter count from a tp rank's: every sharded parameter counted at
/// its global size (`layout` null: tp 1, num_parameters()).
int64_t tp_global_parameters(const nn::Module& model, const TpLayout* layout);

/// The squared gradient norm of `params` (named as the model names them) counting every
/// parameter once over tp: the sharded ones' squares summed over tp, the replicated ones'
/// taken once (they are equal on every tp rank). Collective over tp.
double tp_grad_norm_sq(const nn::NamedTensors& params, const TpLayout& layout);

}  // namespace strata::parallel
