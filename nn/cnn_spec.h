// The CNN as the layout planner reads it, from its config alone (see nn/model_spec.h).
#pragma once
#include <strata/nn/cnn.h>
#include <strata/nn/model_spec.h>

namespace strata::nn {

/// features.<i> per block: the 3x3 Conv2d's weight (and bias without BatchNorm), the
/// BatchNorm2d's weight and bias; classifier.1 and the last classifier Linear; in CNN's
/// named_parameters() order. No TP plan, no pipeline description. FLOPs 3 x (2·in·out per
/// Linear + 2·Cin·Cout·9·S² per convolution at its block's resolution S). Activations,
/// estimated: the input, per block the conv, BatchNorm and ReLU outputs and the pooled
/// one, per Linear its output and its activation's, f32.
ModelSpec cnn_spec(const CNNConfig& cfg);

}  // namespace strata::nn
