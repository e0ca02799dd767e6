// CUDA twins of tensor/cpu/bias_act.cpp: bias + GELU forward and backward and the bias +
// residual add, one pass over (rows, n) each, the pre-activation y + b recomputed where
// needed and never stored. The GELU and its derivative are op_math.h's (those of the
// unfused unary and activation-gradient kernels). The backward's bias gradient is the
// column sum of dh by the deterministic sum kernel (reduce.cu): a second read of dh, where
// the CPU adds it up in the same pass. f32, f64 (what linear_gelu and linear_residual fuse)
// and f16/bf16 as the CPU kernels: y + b and the GELU in f32, each output rounded once
// (widen.h); the 16-bit bias gradient sums the rounded dh (the CPU sums it before
// rounding: they differ by rounding noise, not in expectation).
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/cuda/op_math.h>
#include <strata/tensor/cuda/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {
namespace {

// Element i of a (rows, n) row-major tensor meets bias element i % n: one thread per
// element of a row chunk, rows in blockIdx.y, so no division.
struct RowGrid {
  dim3 grid, block;
};
RowGrid row_grid(int64_t rows, int64_t n) {
  const unsigned bx = unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
  const unsigned by = unsigned(std::min<int64_t>(rows, 65535));
  return {dim3(bx, by), dim3(kThreads)};
}

// S: the storage type; math in A = acc_t<S>.
template <class S, class A = acc_t<S>>
__global__ void bias_gelu_k(int64_t rows, int64_t n, const S* y, const S* b, S* out, ops::UnaryOp op) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
      const int64_t i = r * n + j;
      out[i] = st<S>(apply_unary(op, b ? A(ld(y[i]) + ld(b[j])) : ld(y[i])));
    }
}

template <class S, class A = acc_t<S>>
__global__ void bias_gelu_bwd_k(int64_t rows, int64_t n, const S* g, const S* y, const S* b, S* dh, ActKind kind) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
      const int64_t i = r * n + j;
      dh[i] = st<S>(apply_act_grad(kind, ld(g[i]), b ? A(ld(y[i]) + ld(b[j])) : ld(y[i])));
    }
}

template <class S, class A = acc_t<S>>
__global__ void bias_residual_k(int64_t rows, int64_t n, S* y, const S* b, const S* res) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
      const int64_t i = r * n + j;
      y[i] = st<S>(ld(res[i]) + (b ? A(ld(y[i]) + ld(b[j])) : ld(y[i])));
    }
}


}  // namespace

void bias_gelu_kernel(const Tensor& y, const Tensor& b, Tensor& out, bool tanh_approx) {
  const int64_t n = y.size(-1), rows = n > 0 ? y.numel() / n : 0;
  if (rows == 0 || n == 0) return;
  OpContext ctx(out);
  const RowGrid g = row_grid(rows, n);
  const ops::UnaryOp op = tanh_approx ? ops::UnaryOp::gelu_tanh : ops::UnaryOp::gelu;
  STRATA_DISPATCH_FLOAT16(y.dtype(), "bias_gelu", [&] {
    bias_gelu_k<<<g.grid, g.block, 0, ctx.stream>>>(rows, n, dptr<scalar_t>(y), dptr_or_null<scalar_t>(b),
                                                   dptr<scalar_t>(out), op);
  });
  STRATA_CUDA_CHECK_LAUNCH("bias_gelu");
}

void bias_gelu_backward_kernel(const Tensor& dout, const Tensor& y, const Tensor& b, Tensor& dh, Tensor& db,
                               bool tanh_approx) {
  const int64_t n = y.size(-1), rows = n > 0 ? y.numel() / n : 0;
  if (n == 0) return;
  if (rows > 0) {
    OpContext ctx(dh);
    const RowGrid g = row_grid(rows, n);
    const ActKind kind = tanh_approx ? ActKind::gelu_tanh : ActKind::gelu;
    STRATA_DISPATCH_FLOAT16(y.dtype(), "bias_gelu_backward", [&] {
      bias_gelu_bwd_k<<<g.grid, g.block, 0, ctx.stream>>>(rows, n, dptr<scalar_t>(dout), dptr<scalar_t>(y),
                                                         dptr_or_null<scalar_t>(b), dptr<scalar_t>(dh), kind);
    });
    STRATA_CUDA_CHECK_LAUNCH("bias_gelu_backward");
  }
  if (!db.defined()) return;
  Tensor dbv = ops::view(db, {1, n});  // keepdim layout of the column sum
  sum_kernel(dbv, ops::view(dh, {rows, n}), 1.0);
}

void bias_residual_kernel(Tensor& y, const Tensor& b, const Tensor& r) {
  const int64_t n = y.size(-1), rows = n > 0 ? y.numel() / n : 0;
  if (rows == 0 || n == 0) return;
  OpContext ctx(y);
  const RowGrid g = row_grid(rows, n);
  STRATA_DISPATCH_FLOAT16(y.dtype(), "bias_residual_", [&] {
    bias_residual_k<<<g.grid, g.block, 0, ctx.stream>>>(rows, n, dptr<scalar_t>(y), dptr_or_null<scalar_t>(b),
                                                       dptr<scalar_t>(r));
  });
  STRATA_CUDA_CHECK_LAUNCH("bias_residual_");
}

}  // namespace strata::cuda
