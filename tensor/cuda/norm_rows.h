// The LayerNorm row of the CUDA layer norm kernels (norm.cu's ln_fwd_k and the residual add
// fused with it, residual_norm.cu), so that both give the same bits: a block per row, the
// statistics through block reductions. Included only by .cu files (nvcc).
#pragma once
#include <cstdint>

#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/cuda/op_math.h>
#include <strata/tensor/cuda/widen.h>

namespace strata::cuda::norm_rows {

/// Row r: y = layer_norm(x) from s, this thread's part of the row's sum (the elements
/// i = threadIdx.x, +blockDim.x, ... of x, which this thread wrote or read), and mean[r],
/// rstd[r]. Every thread of the block calls it; smem holds 32 values of A.
template <class S, class A = acc_t<S>>
__device__ __forceinline__ void layer_norm_row(A s, const S* xr, const S* w, const S* b, S* yr, A* mean, A* rstd,
                                               int64_t r, int64_t C, double eps, A* smem) {
  const A mu = block_reduce(s, SumOp(), A(0), smem) / A(C);
  A v = 0;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) v += (ld(xr[i]) - mu) * (ld(xr[i]) - mu);
  v = block_reduce(v, SumOp(), A(0), smem);
  const A rs = A(1) / math::sqrt_(v / A(C) + A(eps));
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const A xh = (ld(xr[i]) - mu) * rs;
    yr[i] = st<S>(w ? (b ? xh * ld(w[i]) + ld(b[i]) : xh * ld(w[i])) : xh + (b ? ld(b[i]) : A(0)));
  }
}

}  // namespace strata::cuda::norm_rows
