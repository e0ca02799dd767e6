// The LayerNorm rows of the CUDA layer norm kernels (norm.cu's and the residual add fused
// with them, residual_norm.cu), so that both give the same bits: a block per row, the
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

// a + b rounded once, never contracted with the multiply that produced either operand.
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

/// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * w; with `pending` (the
/// gradient x already received from its other consumers) dx = pending + that dx rounded to
/// S, the engine's add_ of the two (dx may be pending itself: each thread reads pending[i]
/// before writing dx[i]).
template <class S, class A = acc_t<S>>
__global__ void ln_bwd_dx_k(int64_t rows, int64_t C, const S* dy, const S* x, const A* mean, const A* rstd,
                            const S* w, const S* pending, S* dx) {
  __shared__ A smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const S* gr = dy + r * C;
    const S* xr = x + r * C;
    S* dr = dx + r * C;
    const A mu = mean[r], rs = rstd[r];
    A sg = 0, sgx = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const A g = w ? ld(gr[i]) * ld(w[i]) : ld(gr[i]);
      sg += g;
      sgx += g * (ld(xr[i]) - mu) * rs;
    }
    sg = block_reduce(sg, SumOp(), A(0), smem) / A(C);
    sgx = block_reduce(sgx, SumOp(), A(0), smem) / A(C);
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const A g = w ? ld(gr[i]) * ld(w[i]) : ld(gr[i]);
      const S d = st<S>(rs * (g - sg - (ld(xr[i]) - mu) * rs * sgx));
      dr[i] = pending ? st<S>(add_rn(ld(pending[r * C + i]), ld(d))) : d;
    }
  }
}

}  // namespace strata::cuda::norm_rows
