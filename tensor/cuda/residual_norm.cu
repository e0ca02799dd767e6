// CUDA twins of tensor/cpu/residual_norm.cpp. Forward: a block per row writes
// s = r + (y + b) over y and normalises it while the row is in the SM's cache, where
// bias_residual_ then layer_norm read s back from global memory (llm.c's
// fused_residual_forward). Backward: layer norm's dx plus the gradient s received from its
// other consumers in one kernel, where layer_norm_backward and the engine's add_ write dx
// and read it back. Each loop is norm.cu's / bias_act.cu's, so the results equal the
// separate CUDA kernels' bit for bit (the add cannot merge into an FMA: add_rn). The
// weight / bias gradients are norm.cu's chunked f64 column sums. f32, f64 and f16/bf16
// (f32 arithmetic, widen.h).
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/cuda/norm_rows.h>
#include <strata/tensor/cuda/op_math.h>
#include <strata/tensor/cuda/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {
namespace {

// S storage, A = acc_t<S> arithmetic and statistics. y (rows, C): y in, s out.
template <class S, class A = acc_t<S>>
__global__ void residual_ln_fwd_k(int64_t rows, int64_t C, S* y, const S* b, const S* res, const S* w, const S* lb,
                                  S* z, A* mean, A* rstd, double eps) {
  __shared__ A smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    S* xr = y + r * C;
    const S* rr = res + r * C;
    S* zr = z + r * C;
    A s = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const S v = st<S>(ld(rr[i]) + (b ? A(ld(xr[i]) + ld(b[i])) : ld(xr[i])));  // bias_residual_k
      xr[i] = v;
      s += ld(v);
    }
    // ln_fwd_k's row on s; each thread reads back only the elements it wrote
    norm_rows::layer_norm_row(s, static_cast<const S*>(xr), w, lb, zr, mean, rstd, r, C, eps, smem);
  }
}



}  // namespace

void bias_residual_layer_norm_kernel(Tensor& y, const Tensor& b, const Tensor& r, const Tensor& w, const Tensor& lb,
                                     Tensor& z, Tensor& mean, Tensor& rstd, int64_t rows, int64_t C, double eps) {
  if (rows == 0 || C == 0) return;
  OpContext ctx(z);
  STRATA_DISPATCH_FLOAT16(y.dtype(), "bias_residual_layer_norm_", [&] {
    using A = acc_t<scalar_t>;
    residual_ln_fwd_k<<<block_grid(rows), pow2_threads(C, 32, 512), 0, ctx.stream>>>(
        rows, C, dptr<scalar_t>(y), dptr_or_null<scalar_t>(b), dptr<scalar_t>(r), dptr_or_null<scalar_t>(w), dptr_or_null<scalar_t>(lb),
        dptr<scalar_t>(z), dptr<A>(mean), dptr<A>(rstd), eps);
  });
  STRATA_CUDA_CHECK_LAUNCH("bias_residual_layer_norm_");
}

void layer_norm_backward_add_kernel(const Tensor& dz, const Tensor& s, const Tensor& mean, const Tensor& rstd,
                                    const Tensor& w, const Tensor& g, Tensor& ds, Tensor& dw, Tensor& db,
                                    int64_t rows, int64_t C) {
  layer_norm_backward_into("layer_norm_backward_add", dz, s, mean, rstd, w, g, ds, dw, db, rows, C);  // norm.cu
}

}  // namespace strata::cuda
