// CPU kernels for strided copy with dtype conversion, fill and random init.
#pragma once
#include <strata/core/rng.h>
#include <strata/tensor/tensor.h>

namespace strata::cpu {
/// dst = src (src already broadcast-compatible with dst's shape), converting dtype.
void copy_kernel(Tensor& dst, const Tensor& src);
void fill_kernel(Tensor& t, double value);
void uniform_kernel(Tensor& t, double lo, double hi, const Generator& gen, uint64_t base);
void normal_kernel(Tensor& t, double mean, double std, const Generator& gen, uint64_t base);
}  // namespace strata::cpu
