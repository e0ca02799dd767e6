// CPU kernels for inverted dropout with a counter-based mask.
#pragma once
#include <cstdint>

#include <strata/core/rng.h>
#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// mask[i] = uniform(base, i) >= p; y = x * mask / (1-p) (0 when p == 1). x, y, mask
/// contiguous; element i's draw depends only on (gen seed, base, i).
void dropout_kernel(const Tensor& x, Tensor& y, Tensor& mask, double p, const Generator& gen, uint64_t base);
/// dx = dy * mask / (1-p)
void dropout_backward_kernel(const Tensor& dy, const Tensor& mask, Tensor& dx, double p);

}  // namespace strata::cpu
