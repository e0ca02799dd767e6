// CPU kernels for embedding lookup (row gather) and its scatter-add gradient.
#pragma once
#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// out (n, D) = weight (V, D) rows at idx (n values, i64 or i32). Throws on an index
/// outside [0, V).
void embedding_kernel(const Tensor& weight, const Tensor& idx, Tensor& out);
/// dw (V, D) = 0, then dw[idx[i]] += dy[i] for each of the n rows of dy (n, D).
void embedding_backward_kernel(const Tensor& dy, const Tensor& idx, Tensor& dw);

}  // namespace strata::cpu
