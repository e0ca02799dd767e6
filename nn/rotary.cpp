// RoPE frequencies (see rotary.h).
#include <strata/nn/rotary.h>

#include <cmath>
#include <numbers>
#include <vector>

#include <strata/core/error.h>
#include <strata/tensor/ops.h>

namespace strata::nn {

Tensor rope_inv_freq(int64_t head_dim, double theta, const std::optional<RopeScaling>& scaling) {
  STRATA_CHECK(head_dim > 0 && head_dim % 2 == 0, "[rope] head_dim must be positive and even, got ", head_dim);
  STRATA_CHECK(theta > 0, "[rope] rope_theta must be positive, got ", theta);
  std::vector<double> f(size_t(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) f[size_t(i)] = 1.0 / std::pow(theta, double(2 * i) / double(head_dim));
  if (scaling) {
    const RopeScaling& s = *scaling;
    STRATA_CHECK(s.factor > 0 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor &&
                     s.original_max_position_embeddings > 0,
                 "[rope] rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                 "original_max_position_embeddings > 0");
    const double len = double(s.original_max_position_embeddings);
    const double low_wavelen = len / s.low_freq_factor, high_wavelen = len / s.high_freq_factor;
    for (double& v : f) {
      const double wavelen = 2 * std::numbers::pi / v;
      if (wavelen > low_wavelen) {
        v /= s.factor;
      } else if (wavelen >= high_wavelen) {  // the medium band: interpolated
        const double smooth = (len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        v = (1 - smooth) * v / s.factor + smooth * v;
      }
    }
  }
  return ops::from_vector(f, {head_dim / 2});
}

}  // namespace strata::nn
