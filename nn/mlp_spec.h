// The MLP as the layout planner reads it, from its config alone (see nn/model_spec.h).
#pragma once
#include <strata/nn/mlp.h>
#include <strata/nn/model_spec.h>

namespace strata::nn {

/// net.<i>.weight (out, in) and .bias (out) per Linear, in MLP's named_parameters() order,
/// tp-sharded as mlp_tp_plan(cfg) splits them; no pipeline description (the planner plans
/// it at pp 1). FLOPs 3 x 2·in·out per Linear. At tp > 1 each hidden pair all-reduces its
/// output forward and its input backward. Activations, estimated: the input, then per
/// Linear its output and its activation's, f32.
ModelSpec mlp_spec(const MLPConfig& cfg);

}  // namespace strata::nn
