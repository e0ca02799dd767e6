// run.precision: how a run types its model states and its compute. f32 throughout; bf16 /
// f16 autocast (f32 weights, 16-bit matmuls; f16 with dynamic loss scaling); bf16_params /
// f16_params keep the model states themselves in 16 bits with f32 master weights in the
// optimizer (f16_params with dynamic loss scaling).
#pragma once
#include <optional>
#include <string>

#include <strata/core/dtype.h>

namespace strata {

enum class Precision { f32, bf16, f16, bf16_params, f16_params };

/// ConfigError naming `key` unless `s` is one of f32|bf16|f16|bf16_params|f16_params.
Precision parse_precision(const std::string& s, const std::string& key);
const char* precision_name(Precision p);
/// The autocast dtype of bf16 and f16; none otherwise.
std::optional<DType> precision_autocast(Precision p);
/// The dtype of 16-bit model states (bf16_params, f16_params); none otherwise.
std::optional<DType> precision_state_dtype(Precision p);
/// True for the precisions that scale the loss dynamically (f16, f16_params).
bool scales_loss(Precision p);
/// " (autocast)", " (16-bit model states, f32 master weights)", ...: for logs ("" for f32).
const char* precision_summary(Precision p);

}  // namespace strata
