// CPU reduction kernels. Outputs arrive allocated, contiguous, in keepdim shape
// (size 1 on every reduced dim), so the kernels see which dims to reduce.
#pragma once
#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// out = scale * sum of `in` over the dims where out has size 1 and in does not.
/// f32 accumulates in f64; the result does not depend on the thread count.
void sum_kernel(Tensor& out, const Tensor& in, double scale);
/// Max along dim (values and/or first-argmax i64 indices; either may be undefined).
void max_kernel(Tensor& values, Tensor& indices, const Tensor& in, int64_t dim);
/// Sum of squares of all elements, accumulated in f64.
double sum_squares_kernel(const Tensor& in);

}  // namespace strata::cpu
