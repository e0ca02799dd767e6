// Parameter initialisers. Every draw goes through a counter-based Generator, so a
// model's initial weights depend only on the seed, never on the thread count.
#pragma once
#include <strata/tensor/ops.h>

namespace strata::nn::init {

/// U(-bound, bound) (f32) allocated under MemCategory::params.
Tensor uniform(const Shape& shape, double bound, Generator& gen);
/// N(0, std) (f32) allocated under MemCategory::params.
Tensor normal(const Shape& shape, double std, Generator& gen);
/// Constant tensors (f32) allocated under MemCategory::params.
Tensor zeros(const Shape& shape);
Tensor full(const Shape& shape, double value);
/// PyTorch's Linear/Conv default: kaiming_uniform(a = sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
/// which is also the bias init.
Tensor kaiming_uniform_default(const Shape& shape, int64_t fan_in, Generator& gen);
/// Overwrites t (in place, e.g. a registered parameter) with N(mean, std) draws.
void normal_(Tensor& t, double mean, double std, Generator& gen);

}  // namespace strata::nn::init
