// CUDA inverted dropout. Element i is kept iff the word i % 4 of Philox block
// (base + i / 4) of the generator passes the CPU kernel's threshold, so the mask is
// bit-identical to tensor/cpu/dropout.cpp's for the same generator state. A thread
// handles the 4 elements of one block. f16/bf16 elements are scaled in f32 and rounded
// once (widen.h), as on the CPU.
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/cuda/philox.h>
#include <strata/tensor/cuda/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {
namespace {

template <class T>
T keep_scale(double p) {
  return p < 1 ? T(1.0 / (1.0 - p)) : T(0);
}

template <class S, class A = acc_t<S>>
__global__ void dropout_k(int64_t n, const S* x, S* y, uint8_t* mask, uint64_t seed, uint64_t base,
                          uint32_t threshold, A scale) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = global_index(); b < blocks; b += grid_stride()) {
    const PhiloxWords w = philox_block(seed, base + uint64_t(b));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * b + k;
      if (i < n) {
        const bool keep = (w.w[k] >> 8) >= threshold;
        mask[i] = keep;
        y[i] = st<S>(keep ? ld(x[i]) * scale : A(0));
      }
    }
  }
}

template <class S, class A = acc_t<S>>
__global__ void dropout_bwd_k(int64_t n, const S* dy, const uint8_t* mask, S* dx, A scale) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) dx[i] = st<S>(mask[i] ? ld(dy[i]) * scale : A(0));
}

}  // namespace

void dropout_kernel(const Tensor& x, Tensor& y, Tensor& mask, double p, const Generator& gen, uint64_t base) {
  const int64_t n = x.numel();
  if (n == 0) return;
  OpContext ctx(y);
  STRATA_DISPATCH_FLOAT16(x.dtype(), "dropout", [&] {
    dropout_k<<<grid_for((n + 3) / 4), kThreads, 0, ctx.stream>>>(n, dptr<scalar_t>(x), dptr<scalar_t>(y),
                                                                   dptr<uint8_t>(mask), gen.seed(), base,
                                                                   dropout_threshold(p), keep_scale<acc_t<scalar_t>>(p));
  });
  STRATA_CUDA_CHECK_LAUNCH("dropout");
}

void dropout_backward_kernel(const Tensor& dy, const Tensor& mask, Tensor& dx, double p) {
  const int64_t n = dy.numel();
  if (n == 0) return;
  OpContext ctx(dx);
  STRATA_DISPATCH_FLOAT16(dy.dtype(), "dropout_backward", [&] {
    dropout_bwd_k<<<grid_for(n), kThreads, 0, ctx.stream>>>(n, dptr<scalar_t>(dy), dptr<uint8_t>(mask),
                                                            dptr<scalar_t>(dx), keep_scale<acc_t<scalar_t>>(p));
  });
  STRATA_CUDA_CHECK_LAUNCH("dropout_backward");
}

}  // namespace strata::cuda
