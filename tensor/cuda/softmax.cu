// CUDA softmax / log_softmax (forward and backward) over one dim of a contiguous
// (outer, n, inner) tensor, and cross-entropy fused with its softmax. Rows (inner == 1)
// get a block each with block reductions; other dims a thread per (outer, inner)
// column. The cross-entropy loss adds f64 row losses in a fixed order (deterministic).
// f16/bf16 tensors compute in f32 (widen.h), as the CPU: each output is rounded once (the
// probabilities from a final pass that recomputes exp), cross-entropy keeps f32
// probabilities and loss for 16-bit logits and writes a 16-bit logit gradient.
#include <limits>

#include <strata/tensor/cuda/convert.h>
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/cuda/op_math.h>
#include <strata/tensor/cuda/validate.h>
#include <strata/tensor/cuda/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {
namespace {

template <class T>
constexpr T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

// Softmax of one row of n into y (probabilities, or log-probabilities when `log`);
// returns the row max and sum of exp(x - max). Every thread of the block calls it.
// S, Y: the storage types of x and y (f16/bf16 widened / rounded once); math in A.
template <class S, class Y, class A = acc_t<S>>
__device__ void softmax_row(const S* x, Y* y, int64_t n, bool log, A* smem, A* out_max, A* out_sum) {
  A mx = neg_inf<A>();
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    const A v = ld(x[k]);
    mx = v > mx ? v : mx;
  }
  mx = block_reduce(mx, MaxOp(), neg_inf<A>(), smem);
  A s = 0;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += math::exp_(ld(x[k]) - mx);
  s = block_reduce(s, SumOp(), A(0), smem);
  if (log) {
    const A lse = mx + math::log_(s);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) y[k] = st<Y>(ld(x[k]) - lse);
  } else {
    const A inv = A(1) / s;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) y[k] = st<Y>(math::exp_(ld(x[k]) - mx) * inv);
  }
  *out_max = mx;
  *out_sum = s;
}

template <class S, class A = acc_t<S>>
__global__ void softmax_rows_k(int64_t rows, int64_t n, const S* x, S* y, bool log) {
  __shared__ A smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    A mx, s;
    softmax_row(x + r * n, y + r * n, n, log, smem, &mx, &s);
  }
}

template <class S, class A = acc_t<S>>
__global__ void softmax_cols_k(int64_t outer, int64_t n, int64_t inner, const S* x, S* y, bool log) {
  for (int64_t t = global_index(); t < outer * inner; t += grid_stride()) {
    const int64_t base = (t / inner) * n * inner + t % inner;
    const S* xc = x + base;
    S* yc = y + base;
    A mx = neg_inf<A>();
    for (int64_t k = 0; k < n; ++k) {
      const A v = ld(xc[k * inner]);
      mx = v > mx ? v : mx;
    }
    A s = 0;
    for (int64_t k = 0; k < n; ++k) s += math::exp_(ld(xc[k * inner]) - mx);
    if (log) {
      const A lse = mx + math::log_(s);
      for (int64_t k = 0; k < n; ++k) yc[k * inner] = st<S>(ld(xc[k * inner]) - lse);
    } else {
      const A inv = A(1) / s;
      for (int64_t k = 0; k < n; ++k) yc[k * inner] = st<S>(math::exp_(ld(xc[k * inner]) - mx) * inv);
    }
  }
}

// softmax: dx = y * (dy - sum(dy * y));  log_softmax: dx = dy - exp(y) * sum(dy)
template <class S, class A = acc_t<S>>
__global__ void softmax_bwd_rows_k(int64_t rows, int64_t n, const S* dy, const S* y, S* dx, bool log) {
  __shared__ A smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const S* g = dy + r * n;
    const S* yr = y + r * n;
    S* d = dx + r * n;
    A s = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += log ? ld(g[k]) : ld(g[k]) * ld(yr[k]);
    s = block_reduce(s, SumOp(), A(0), smem);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const A gk = ld(g[k]), yk = ld(yr[k]);
      d[k] = st<S>(log ? gk - math::exp_(yk) * s : yk * (gk - s));
    }
  }
}

template <class S, class A = acc_t<S>>
__global__ void softmax_bwd_cols_k(int64_t outer, int64_t n, int64_t inner, const S* dy, const S* y, S* dx,
                                   bool log) {
  for (int64_t t = global_index(); t < outer * inner; t += grid_stride()) {
    const int64_t base = (t / inner) * n * inner + t % inner;
    A s = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t o = base + k * inner;
      s += log ? ld(dy[o]) : ld(dy[o]) * ld(y[o]);
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t o = base + k * inner;
      const A gk = ld(dy[o]), yk = ld(y[o]);
      dx[o] = st<S>(log ? gk - math::exp_(yk) * s : yk * (gk - s));
    }
  }
}

// Per row: probs = softmax(logits); row_loss = log(sum) + max - x[target] (0 when the
// target is ignore_index or out of range; the host checks the range separately).
// S: the logits' storage; probabilities in A = acc_t<S> (f32 for f16/bf16 logits).
template <class S, class I, class A = acc_t<S>>
__global__ void ce_rows_k(int64_t N, int64_t C, const S* x, const I* tgt, int64_t ignore, A* probs,
                          double* row_loss) {
  __shared__ A smem[32];
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    A mx, s;
    softmax_row(x + r * C, probs + r * C, C, false, smem, &mx, &s);
    if (threadIdx.x == 0) {
      const int64_t t = int64_t(tgt[r]);
      row_loss[r] =
          (t == ignore || t < 0 || t >= C) ? 0.0 : ::log(double(s)) + double(mx) - double(ld(x[r * C + t]));
    }
  }
}

// loss = sum(row_loss) / count(target != ignore), 0 when every row is ignored. One block.
template <class T, class I>
__global__ void ce_finish_k(int64_t N, const double* row_loss, const I* tgt, int64_t ignore, T* loss) {
  __shared__ double smem[32];
  __shared__ long long csmem[32];
  double total = 0;
  long long count = 0;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
    total += row_loss[r];
    count += int64_t(tgt[r]) != ignore;
  }
  total = block_reduce(total, SumOp(), 0.0, smem);
  count = block_reduce(count, SumOp(), 0LL, csmem);
  if (threadIdx.x == 0) loss[0] = T(count > 0 ? total / double(count) : 0.0);
}

template <class I>
__global__ void ce_count_k(int64_t N, const I* tgt, int64_t ignore, long long* count) {
  __shared__ long long smem[32];
  long long c = 0;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) c += int64_t(tgt[r]) != ignore;
  c = block_reduce(c, SumOp(), 0LL, smem);
  if (threadIdx.x == 0) count[0] = c;
}

// dlogits = dloss / count * (probs - onehot(target)); ignored rows are zero. Probabilities
// in A (f32 or f64), the gradient S (= A, or f16/bf16 rounded once per element).
template <class S, class I, class A = acc_t<S>>
__global__ void ce_backward_k(int64_t N, int64_t C, const void* dloss, DType dloss_dtype, const long long* count,
                              const A* probs, const I* tgt, int64_t ignore, S* dx) {
  const double dl = scalar_as_double(load_scalar(dloss, 0, dloss_dtype));
  const long long cnt = count[0];
  const A scale = A(cnt > 0 ? dl / double(cnt) : 0.0);
  for (int64_t i = global_index(); i < N * C; i += grid_stride()) {
    const int64_t r = i / C, c = i % C;
    const int64_t t = int64_t(tgt[r]);
    if (t == ignore) {
      dx[i] = st<S>(A(0));
    } else {
      const A d = scale * probs[i];
      dx[i] = st<S>(c == t ? A(d - scale) : d);
    }
  }
}

template <class F>
void dispatch_target(const Tensor& target, F&& f) {
  if (target.dtype() == DType::i64)
    f(int64_t{});
  else if (target.dtype() == DType::i32)
    f(int32_t{});
  else
    STRATA_THROW(Error, "[cross_entropy] targets must be i64 or i32, got ", dtype_name(target.dtype()));
}

void check_targets(const Tensor& target, int64_t C, int64_t ignore_index) {
  if (auto bad = find_bad_index(target, C, ignore_index, "cross_entropy"))
    STRATA_THROW(Error, "[cross_entropy] target ", bad->value, " at row ", bad->position, " is out of range for ", C,
                 " classes (ignore_index ", ignore_index, ")");
}

unsigned row_grid(int64_t rows) { return unsigned(std::clamp<int64_t>(rows, 1, kMaxBlocks)); }

}  // namespace

void softmax_kernel(const Tensor& x, Tensor& y, int64_t outer, int64_t n, int64_t inner, bool log) {
  if (x.numel() == 0) return;
  OpContext ctx(y);
  STRATA_DISPATCH_FLOAT16(x.dtype(), log ? "log_softmax" : "softmax", [&] {
    if (inner == 1)
      softmax_rows_k<<<row_grid(outer), pow2_threads(n, 32, 512), 0, ctx.stream>>>(outer, n, dptr<scalar_t>(x),
                                                                                  dptr<scalar_t>(y), log);
    else
      softmax_cols_k<<<grid_for(outer * inner), kThreads, 0, ctx.stream>>>(outer, n, inner, dptr<scalar_t>(x),
                                                                           dptr<scalar_t>(y), log);
  });
  STRATA_CUDA_CHECK_LAUNCH(log ? "log_softmax" : "softmax");
}

void softmax_backward_kernel(const Tensor& dy, const Tensor& y, Tensor& dx, int64_t outer, int64_t n, int64_t inner,
                             bool log) {
  if (y.numel() == 0) return;
  OpContext ctx(dx);
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  STRATA_DISPATCH_FLOAT16(y.dtype(), op, [&] {
    if (inner == 1)
      softmax_bwd_rows_k<<<row_grid(outer), pow2_threads(n, 32, 512), 0, ctx.stream>>>(
          outer, n, dptr<scalar_t>(dy), dptr<scalar_t>(y), dptr<scalar_t>(dx), log);
    else
      softmax_bwd_cols_k<<<grid_for(outer * inner), kThreads, 0, ctx.stream>>>(
          outer, n, inner, dptr<scalar_t>(dy), dptr<scalar_t>(y), dptr<scalar_t>(dx), log);
  });
  STRATA_CUDA_CHECK_LAUNCH(op);
}

void cross_entropy_kernel(const Tensor& logits, const Tensor& target, int64_t ignore_index, Tensor& loss,
                          Tensor& probs) {
  const int64_t N = logits.size(0), C = logits.size(1);
  OpContext ctx(loss);
  dispatch_target(target, [&](auto tag) {
    using I = decltype(tag);
    check_targets(target, C, ignore_index);
    Tensor row_loss = Tensor::empty({std::max<int64_t>(N, 1)}, DType::f64, loss.device());
    STRATA_DISPATCH_FLOAT16(logits.dtype(), "cross_entropy", [&] {
      using A = acc_t<scalar_t>;  // probs and loss: f32 for 16-bit logits
      if (N > 0 && C > 0) {
        ce_rows_k<scalar_t, I><<<row_grid(N), pow2_threads(C, 32, 512), 0, ctx.stream>>>(
            N, C, dptr<scalar_t>(logits), dptr<I>(target), ignore_index, dptr<A>(probs), dptr<double>(row_loss));
        STRATA_CUDA_CHECK_LAUNCH("cross_entropy");
      }
      ce_finish_k<A, I><<<1, 1024, 0, ctx.stream>>>(N, dptr<double>(row_loss), dptr<I>(target), ignore_index,
                                                    dptr<A>(loss));
      STRATA_CUDA_CHECK_LAUNCH("cross_entropy");
    });
  });
}

void cross_entropy_backward_kernel(const Tensor& dloss, const Tensor& probs, const Tensor& target,
                                   int64_t ignore_index, Tensor& dlogits) {
  const int64_t N = probs.size(0), C = probs.size(1);
  OpContext ctx(dlogits);
  dispatch_target(target, [&](auto tag) {
    using I = decltype(tag);
    check_targets(target, C, ignore_index);
    if (N * C == 0) return;
    Tensor count = Tensor::empty({1}, DType::i64, dlogits.device());
    ce_count_k<I><<<1, 1024, 0, ctx.stream>>>(N, dptr<I>(target), ignore_index, dptr<long long>(count));
    STRATA_CUDA_CHECK_LAUNCH("cross_entropy_backward");
    STRATA_DISPATCH_FLOAT16(dlogits.dtype(), "cross_entropy_backward", [&] {
      using A = acc_t<scalar_t>;
      STRATA_CHECK(probs.dtype() == dtype_v<A>, "[cross_entropy_backward] a ", dtype_name(dlogits.dtype()),
                   " gradient needs ", dtype_name(dtype_v<A>), " probs, got ", probs.str());
      ce_backward_k<scalar_t, I><<<grid_for(N * C), kThreads, 0, ctx.stream>>>(
          N, C, dloss.raw_data(), dloss.dtype(), dptr<long long>(count), dptr<A>(probs), dptr<I>(target),
          ignore_index, dptr<scalar_t>(dlogits));
    });
    STRATA_CUDA_CHECK_LAUNCH("cross_entropy_backward");
  });
}

}  // namespace strata::cuda
