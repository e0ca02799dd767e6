// CPU kernels for index_select / index_add / gather / scatter_add. Front ends
// (tensor/index.cpp) check shapes and allocate `out` (zeroed for the *_add ops);
// kernels check index ranges and accept any strides. Index tensors are i64 or i32.
#pragma once
#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// out = t with dim replaced by idx (1-d).
void index_select_kernel(Tensor& out, const Tensor& t, int64_t dim, const Tensor& idx);
/// out[..idx[j]..] += src[..j..] along dim.
void index_add_kernel(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src);
/// out (idx.shape) = t[.., idx[..], ..] along dim.
void gather_kernel(Tensor& out, const Tensor& t, int64_t dim, const Tensor& idx);
/// out[.., idx[..], ..] += src[..] along dim, over idx's shape.
void scatter_add_kernel(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src);

}  // namespace strata::cpu
