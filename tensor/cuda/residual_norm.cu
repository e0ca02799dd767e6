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

// a + b rounded once, never contracted with the multiply that produced either operand.
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

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

// ds = g + rstd * (gw - mean(gw) - xhat * mean(gw * xhat)),  gw = dz * w (ln_bwd_dx_k's dx,
// rounded to S, then the add). ds may be g (each thread reads g[i] before writing ds[i]).
template <class S, class A = acc_t<S>>
__global__ void ln_bwd_dx_add_k(int64_t rows, int64_t C, const S* dy, const S* x, const A* mean, const A* rstd,
                                const S* w, const S* g, S* ds) {
  __shared__ A smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const S* gr = dy + r * C;
    const S* xr = x + r * C;
    const S* orr = g + r * C;
    S* dr = ds + r * C;
    const A mu = mean[r], rs = rstd[r];
    A sg = 0, sgx = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const A gi = w ? ld(gr[i]) * ld(w[i]) : ld(gr[i]);
      sg += gi;
      sgx += gi * (ld(xr[i]) - mu) * rs;
    }
    sg = block_reduce(sg, SumOp(), A(0), smem) / A(C);
    sgx = block_reduce(sgx, SumOp(), A(0), smem) / A(C);
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      const A gi = w ? ld(gr[i]) * ld(w[i]) : ld(gr[i]);
      const S dx = st<S>(rs * (gi - sg - (ld(xr[i]) - mu) * rs * sgx));
      dr[i] = st<S>(add_rn(ld(orr[i]), ld(dx)));
    }
  }
}

template <class T>
const T* cptr(const Tensor& t) {
  return t.defined() ? dptr<T>(t) : nullptr;
}
unsigned block_grid(int64_t n) { return unsigned(std::clamp<int64_t>(n, 1, kMaxBlocks)); }


}  // namespace

void bias_residual_layer_norm_kernel(Tensor& y, const Tensor& b, const Tensor& r, const Tensor& w, const Tensor& lb,
                                     Tensor& z, Tensor& mean, Tensor& rstd, int64_t rows, int64_t C, double eps) {
  if (rows == 0 || C == 0) return;
  OpContext ctx(z);
  STRATA_DISPATCH_FLOAT16(y.dtype(), "bias_residual_layer_norm_", [&] {
    using A = acc_t<scalar_t>;
    residual_ln_fwd_k<<<block_grid(rows), pow2_threads(C, 32, 512), 0, ctx.stream>>>(
        rows, C, dptr<scalar_t>(y), cptr<scalar_t>(b), dptr<scalar_t>(r), cptr<scalar_t>(w), cptr<scalar_t>(lb),
        dptr<scalar_t>(z), dptr<A>(mean), dptr<A>(rstd), eps);
  });
  STRATA_CUDA_CHECK_LAUNCH("bias_residual_layer_norm_");
}

void layer_norm_backward_add_kernel(const Tensor& dz, const Tensor& s, const Tensor& mean, const Tensor& rstd,
                                    const Tensor& w, const Tensor& g, Tensor& ds, Tensor& dw, Tensor& db,
                                    int64_t rows, int64_t C) {
  if (C == 0) return;
  OpContext ctx(ds);
  STRATA_DISPATCH_FLOAT16(s.dtype(), "layer_norm_backward_add", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    if (rows == 0) {
      for (Tensor* t : {&dw, &db})
        if (t->defined()) fill_kernel(*t, 0.0);
      return;
    }
    ln_bwd_dx_add_k<<<block_grid(rows), pow2_threads(C, 32, 512), 0, ctx.stream>>>(
        rows, C, dptr<T>(dz), dptr<T>(s), dptr<A>(mean), dptr<A>(rstd), cptr<T>(w), dptr<T>(g), dptr<T>(ds));
    STRATA_CUDA_CHECK_LAUNCH("layer_norm_backward_add");
  });
  layer_norm_param_grads(dz, s, mean, rstd, dw, db, rows, C);  // norm.cu's column sums
}

}  // namespace strata::cuda
