// The MLP's parallel plans, next to its module: its hidden Linears in tensor-parallel
// pairs, and a pipeline split between whole layers.
#pragma once
#include <cstdint>
#include <vector>

#include <strata/nn/mlp.h>
#include <strata/nn/parallel_plan.h>

namespace strata::nn {

/// The hidden Linears in pairs, the first colwise, the second rowwise, the dropout between
/// them parallel_rng (an odd last hidden layer and the output layer stay replicated).
/// Empty with fewer than two hidden layers.
TpPlan mlp_tp_plan(const MLPConfig& cfg);

/// By layers: net's children grouped as [Flatten, Linear, act, Dropout], [Linear, act,
/// Dropout], ..., [Linear], a stage a run of whole layers; nothing outside net. A stage
/// sends its last Linear's (activated) output (b, width) in the model's parameter dtype.
/// `layers` is parallel.pp_layers (in layers). The loss is cross-entropy of the logits.
PipelinePlan mlp_pp_plan(const MLP& model, const std::vector<int64_t>& layers = {});

}  // namespace strata::nn
