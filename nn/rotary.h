// Rotary position embedding frequencies (RoPE): the base inv_freq of a head dimension and
// Llama 3.1's frequency-dependent rescaling for long contexts.
#pragma once
#include <cstdint>
#include <optional>

#include <strata/tensor/tensor.h>

namespace strata::nn {

/// Llama 3.1's rope_scaling (config.json "rope_type": "llama3"). Wavelengths longer than
/// original_max_position_embeddings / low_freq_factor are slowed down by `factor`, those
/// shorter than original_max_position_embeddings / high_freq_factor are kept, and the
/// band between is interpolated.
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

/// inv_freq (head_dim / 2) f64: inv_freq[i] = theta^(-2i / head_dim), then with `scaling`
/// as transformers 4.46's _compute_llama3_parameters:
///   wavelen = 2 pi / inv_freq
///   wavelen > L / low:   inv_freq / factor
///   wavelen < L / high:  inv_freq
///   otherwise:           (1 - s) inv_freq / factor + s inv_freq,  s = (L / wavelen - low) / (high - low)
/// with L = original_max_position_embeddings. head_dim even, theta > 0.
Tensor rope_inv_freq(int64_t head_dim, double theta, const std::optional<RopeScaling>& scaling = std::nullopt);

}  // namespace strata::nn
