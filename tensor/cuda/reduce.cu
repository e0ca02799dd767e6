// CUDA reductions. sum: the output's kept dims and the reduced dims each get an
// OffsetCalc; when the input's fastest dim is reduced a warp sums each output (lanes
// read consecutive elements), otherwise a thread sums each output (threads read
// consecutive outputs). Long reductions with few outputs are split into a fixed
// number of chunks whose f64 partials a second kernel adds in order, so results are
// deterministic. Every dtype (f32, f64, and f16 / bf16 for autocast's bias and
// broadcast gradients and for 16-bit model states) accumulates in f64 and rounds once,
// as on the CPU; amax and sum_squares widen f16 / bf16 elements (widen.h).
#include <cmath>
#include <limits>
#include <type_traits>

#include <strata/tensor/cuda/indexing.h>
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/cuda/op_math.h>
#include <strata/tensor/cuda/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {
namespace {

// Element <-> f64 accumulator; f16 / bf16 are their bit patterns (core/dtype.h).
__device__ __forceinline__ double to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ double to_acc(Half v) { return half_bits_to_float(v.bits); }
__device__ __forceinline__ double to_acc(BFloat16 v) { return bf16_bits_to_float(v.bits); }
template <class T>
__device__ __forceinline__ T from_acc(double a) {
  if constexpr (std::is_same_v<T, Half>)
    return Half{float_to_half_bits(float(a))};
  else if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16{float_to_bf16_bits(float(a))};
  else
    return T(a);
}

// Calls f(T{}) for the dtypes sum supports.
template <class F>
void dispatch_sum(DType dt, F&& f) {
  switch (dt) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::f16: return f(Half{});
    case DType::bf16: return f(BFloat16{});
    default: STRATA_THROW(Error, "[sum] unsupported dtype ", dtype_name(dt), " (expected f32, f64, f16 or bf16)");
  }
}

__device__ __forceinline__ int64_t at(const OffsetCalc<1>& c, int64_t i) {
  int64_t off[1];
  c.get(i, off);
  return off[0];
}

template <class T>
__global__ void sum_rows_k(int64_t M, int64_t K, int64_t chunks, int64_t chunk_len, OffsetCalc<1> kept,
                           OffsetCalc<1> red, const T* in, double* partial, T* out, double scale) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t task = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; task < M * chunks; task += warps) {
    const int64_t o = task / chunks, c = task % chunks;
    const int64_t base = at(kept, o);
    const int64_t k0 = c * chunk_len, k1 = min(K, k0 + chunk_len);
    double acc = 0;
    for (int64_t k = k0 + lane; k < k1; k += 32) acc += to_acc(in[base + at(red, k)]);
    acc = warp_reduce(acc, SumOp());
    if (lane == 0) {
      if (chunks == 1)
        out[o] = from_acc<T>(acc * scale);
      else
        partial[o * chunks + c] = acc;
    }
  }
}

template <class T>
__global__ void sum_cols_k(int64_t M, int64_t K, int64_t chunks, int64_t chunk_len, OffsetCalc<1> kept,
                           OffsetCalc<1> red, const T* in, double* partial, T* out, double scale) {
  const int64_t c = blockIdx.y;
  const int64_t k0 = c * chunk_len, k1 = min(K, k0 + chunk_len);
  for (int64_t o = global_index(); o < M; o += grid_stride()) {
    const int64_t base = at(kept, o);
    double acc = 0;
    for (int64_t k = k0; k < k1; ++k) acc += to_acc(in[base + at(red, k)]);
    if (chunks == 1)
      out[o] = from_acc<T>(acc * scale);
    else
      partial[o * chunks + c] = acc;
  }
}

template <class T>
__global__ void sum_finish_k(int64_t M, int64_t chunks, const double* partial, T* out, double scale) {
  for (int64_t o = global_index(); o < M; o += grid_stride()) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[o * chunks + c];
    out[o] = from_acc<T>(s * scale);
  }
}

// (value, index) of a max: `a` is preferred over `b` when larger, NaN over a number,
// and on ties the lower index (the CPU's sequential first-max rule). index < 0 = empty.
template <class T>
__device__ __forceinline__ bool better(T av, int64_t ai, T bv, int64_t bi) {
  if (ai < 0) return false;
  if (bi < 0) return true;
  const bool an = math::is_nan(av), bn = math::is_nan(bv);
  if (an || bn) return an && (!bn || ai < bi);
  if (av != bv) return av > bv;
  return ai < bi;
}

template <class T>
__device__ __forceinline__ bool beats(T v, T best) {
  return v > best || (math::is_nan(v) && !math::is_nan(best));
}

// One warp per row of K contiguous elements. S: the storage type; values compare widened
// (f16/bf16 as f32, as the CPU), and the max is stored back exactly.
template <class S, class T = acc_t<S>>
__global__ void max_rows_k(int64_t rows, int64_t K, const S* in, S* vals, int64_t* idx) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    const S* p = in + r * K;
    T bv = T(0);
    int64_t bi = -1;
    for (int64_t k = lane; k < K; k += 32) {
      const T v = ld(p[k]);
      if (bi < 0 || beats(v, bv)) {
        bv = v;
        bi = k;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const T ov = shfl_xor(bv, o);
      const int64_t oi = shfl_xor(bi, o);
      if (better(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      if (vals) vals[r] = st<S>(bv);
      if (idx) idx[r] = bi;
    }
  }
}

// One thread per (outer, inner) output of a contiguous (outer, K, inner) input.
template <class S, class T = acc_t<S>>
__global__ void max_cols_k(int64_t outer, int64_t K, int64_t inner, const S* in, S* vals, int64_t* idx) {
  for (int64_t t = global_index(); t < outer * inner; t += grid_stride()) {
    const int64_t o = t / inner, i = t % inner;
    const S* p = in + o * K * inner + i;
    T bv = ld(p[0]);
    int64_t bi = 0;
    for (int64_t k = 1; k < K; ++k)
      if (const T v = ld(p[k * inner]); beats(v, bv)) {
        bv = v;
        bi = k;
      }
    if (vals) vals[t] = st<S>(bv);
    if (idx) idx[t] = bi;
  }
}

template <class S>
__global__ void sum_squares_k(int64_t n, const S* in, double* partial) {
  __shared__ double smem[32];
  double acc = 0;
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const double v = double(ld(in[i]));
    acc += v * v;
  }
  acc = block_reduce(acc, SumOp(), 0.0, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void sum_kernel(Tensor& out, const Tensor& in, double scale) {
  const int64_t M = out.numel();
  if (M == 0) return;
  if (in.numel() == 0) {  // sum of nothing is 0, mean of nothing NaN
    dispatch_sum(in.dtype(), [&](auto) { fill_kernel(out, 0.0 * scale); });
    return;
  }
  OpContext ctx(out);
  Shape ks, kst, rs, rst;
  int64_t min_stride = std::numeric_limits<int64_t>::max();
  bool fastest_reduced = false;
  for (int64_t d = 0; d < in.dim(); ++d) {
    const int64_t s = in.shape()[size_t(d)], st = in.strides()[size_t(d)];
    const bool red = out.shape()[size_t(d)] == 1 && s != 1;
    (red ? rs : ks).push_back(s);
    (red ? rst : kst).push_back(st);
    const int64_t ast = st < 0 ? -st : st;
    if (s != 1 && ast < min_stride) {
      min_stride = ast;
      fastest_reduced = red;
    }
  }
  const int64_t K = shape_numel(rs);
  const auto kept = make_offset_calc<1>(ks, {kst}, "sum");
  const auto red = make_offset_calc<1>(rs, {rst}, "sum");
  const bool rows = fastest_reduced && K > 16;
  int64_t chunks = 1;
  if (rows && M < 2048) {
    chunks = std::min(ceil_div(K, 1024), ceil_div(4096, M));
  } else if (!rows) {
    const int64_t bx = ceil_div(M, kThreads);
    if (bx < 128) chunks = std::min({ceil_div(K, 32), ceil_div(256, bx), int64_t(65535)});
  }
  chunks = std::max<int64_t>(chunks, 1);
  const int64_t chunk_len = ceil_div(K, chunks);
  Tensor partial = chunks > 1 ? Tensor::empty({M * chunks}, DType::f64, out.device()) : Tensor();
  double* pp = chunks > 1 ? dptr<double>(partial) : nullptr;
  dispatch_sum(in.dtype(), [&](auto tag) {
    using scalar_t = decltype(tag);
    const scalar_t* ip = dptr<scalar_t>(in);
    scalar_t* op = dptr<scalar_t>(out);
    if (rows) {
      sum_rows_k<<<grid_for(M * chunks * 32), kThreads, 0, ctx.stream>>>(M, K, chunks, chunk_len, kept, red, ip, pp, op,
                                                                          scale);
    } else {
      const dim3 grid(grid_for(M), unsigned(chunks));
      sum_cols_k<<<grid, kThreads, 0, ctx.stream>>>(M, K, chunks, chunk_len, kept, red, ip, pp, op, scale);
    }
    STRATA_CUDA_CHECK_LAUNCH("sum");
    if (chunks > 1) {
      sum_finish_k<<<grid_for(M), kThreads, 0, ctx.stream>>>(M, chunks, pp, op, scale);
      STRATA_CUDA_CHECK_LAUNCH("sum");
    }
  });
}

void max_kernel(Tensor& values, Tensor& indices, const Tensor& in_, int64_t dim) {
  const Tensor in = ops::contiguous(in_);
  const int64_t K = in.shape()[size_t(dim)];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= in.shape()[size_t(d)];
  for (int64_t d = dim + 1; d < in.dim(); ++d) inner *= in.shape()[size_t(d)];
  if (outer * inner == 0) return;
  OpContext ctx(in);
  STRATA_DISPATCH_ALL16(in.dtype(), "amax", [&] {
    scalar_t* vp = dptr_or_null<scalar_t>(values);
    int64_t* ip = dptr_or_null<int64_t>(indices);
    if (inner == 1) {
      max_rows_k<<<grid_for(outer * 32), kThreads, 0, ctx.stream>>>(outer, K, dptr<scalar_t>(in), vp, ip);
    } else {
      max_cols_k<<<grid_for(outer * inner), kThreads, 0, ctx.stream>>>(outer, K, inner, dptr<scalar_t>(in), vp, ip);
    }
  });
  STRATA_CUDA_CHECK_LAUNCH("amax");
}

double sum_squares_kernel(const Tensor& in_) {
  if (in_.numel() == 0) return 0.0;
  const Tensor in = ops::contiguous(in_);
  OpContext ctx(in);
  const int64_t n = in.numel();
  const int64_t nb = std::min<int64_t>(ceil_div(n, kThreads * 4), 1024);  // fixed by n: deterministic
  Tensor partial = Tensor::empty({nb}, DType::f64, in.device());
  Tensor result = Tensor::empty({1}, DType::f64, in.device());
  STRATA_DISPATCH_FLOAT16(in.dtype(), "sum_squares", [&] {
    sum_squares_k<<<unsigned(nb), kThreads, 0, ctx.stream>>>(n, dptr<scalar_t>(in), dptr<double>(partial));
  });
  STRATA_CUDA_CHECK_LAUNCH("sum_squares");
  sum_partials_k<<<1, 1024, 0, ctx.stream>>>(nb, dptr<double>(partial), dptr<double>(result));
  STRATA_CUDA_CHECK_LAUNCH("sum_squares");
  return result.item<double>();
}

}  // namespace strata::cuda
