// CUDA fused optimizer updates, the twins of tensor/cpu/optim.cpp: the step's scalars
// are folded on the host in double exactly as there, one thread per element. Also the
// multi-tensor forms (ops::adam_step_multi_, sgd_step_multi_, sum_squares_multi,
// mul_multi_): a whole parameter list in a few launches (tensor/multi_tensor_plan.h),
// each element updated by the same device function as the single-tensor kernel. The
// 16-bit model states' mixed steps (ops::adam_step_mixed_, sgd_step_mixed_) update the f32
// master and state with that function on the widened gradient and write the new master,
// rounded to nearest even, into the 16-bit parameter in the same pass; sum_squares_multi
// and mul_multi_ widen f16/bf16 gradients (widen.h).
#include <cmath>
#include <map>

#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/cuda/op_math.h>
#include <strata/tensor/cuda/widen.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/multi_tensor_plan.h>

namespace strata::cuda {
namespace {

template <class T>
struct AdamScalars {
  T b1, b2, omb1, omb2, step_size, inv_bc2_sqrt, eps, l2, decay;
};

template <class T>
__device__ __forceinline__ void adam_update(T& w, T g, T& m, T& v, const AdamScalars<T>& s) {
  const T gi = g + s.l2 * w;
  const T mi = s.b1 * m + s.omb1 * gi;
  const T vi = s.b2 * v + s.omb2 * gi * gi;
  m = mi;
  v = vi;
  w = w * s.decay - s.step_size * mi / (math::sqrt_(vi) * s.inv_bc2_sqrt + s.eps);
}

template <class T>
__global__ void adam_k(int64_t n, T* w, const T* g, T* m, T* v, AdamScalars<T> s) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) adam_update(w[i], g[i], m[i], v[i], s);
}

template <class T>
struct SgdScalars {
  T lr, wd, mom, damp;
  bool first, nesterov;
};

template <class T>
__device__ __forceinline__ void sgd_update(T& w, T g, T* buf, const SgdScalars<T>& s) {
  const T gi = g + s.wd * w;
  if (!buf) {
    w -= s.lr * gi;
    return;
  }
  const T bi = s.first ? gi : s.mom * *buf + s.damp * gi;
  *buf = bi;
  w -= s.lr * (s.nesterov ? gi + s.mom * bi : bi);
}

template <class T>
__global__ void sgd_k(int64_t n, T* w, const T* g, T* buf, SgdScalars<T> s) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) sgd_update(w[i], g[i], buf ? buf + i : nullptr, s);
}

// Mixed precision: f32 master w and state, gradient G (bf16/f16 widened, or f32), and the
// 16-bit parameter P = the new master rounded to nearest even.
template <class G, class P>
__global__ void adam_mixed_k(int64_t n, float* w, const G* g, float* m, float* v, P* out, AdamScalars<float> s) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    adam_update(w[i], float(ld(g[i])), m[i], v[i], s);
    out[i] = st<P>(w[i]);
  }
}

template <class G, class P>
__global__ void sgd_mixed_k(int64_t n, float* w, const G* g, float* buf, P* out, SgdScalars<float> s) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    sgd_update(w[i], float(ld(g[i])), buf ? buf + i : nullptr, s);
    out[i] = st<P>(w[i]);
  }
}

// ---- multi-tensor launches. The argument block carries the launch's tensor addresses
// (Depth lists of them) and each block's (slot, chunk): at most kMultiMaxBlocks blocks
// and kMultiMaxTensors<Depth> tensors, under the 4 KiB kernel parameter limit of older
// toolkits (PyTorch's multi_tensor_apply uses the same limits and chunk size).
constexpr int64_t kMultiChunk = 65536;
constexpr int kMultiMaxBlocks = 320;
template <int Depth>
constexpr int kMultiMaxTensors = Depth == 1 ? 110 : Depth == 2 ? 64 : Depth == 3 ? 48 : 36;

template <int Depth>
struct TensorListArgs {
  void* addr[Depth][kMultiMaxTensors<Depth>];
  int64_t numel[kMultiMaxTensors<Depth>];
  unsigned char slot[kMultiMaxBlocks];
  int chunk[kMultiMaxBlocks];
};
static_assert(sizeof(TensorListArgs<1>) <= 4000 && sizeof(TensorListArgs<4>) <= 4000);

// This block's chunk of tensor list d: its first element and its length.
template <class T, int Depth>
__device__ __forceinline__ T* chunk_of(const TensorListArgs<Depth>& a, int d, int64_t* n) {
  const int slot = a.slot[blockIdx.x];
  const int64_t start = int64_t(a.chunk[blockIdx.x]) * kMultiChunk;
  const int64_t left = a.numel[slot] - start;
  *n = left < kMultiChunk ? left : kMultiChunk;
  return static_cast<T*>(a.addr[d][slot]) + start;
}

template <class T>
__global__ void adam_multi_k(TensorListArgs<4> a, AdamScalars<T> s) {
  int64_t n;
  T* w = chunk_of<T>(a, 0, &n);
  const T* g = chunk_of<T>(a, 1, &n);
  T* m = chunk_of<T>(a, 2, &n);
  T* v = chunk_of<T>(a, 3, &n);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) adam_update(w[i], g[i], m[i], v[i], s);
}

template <class T, int Depth>
__global__ void sgd_multi_k(TensorListArgs<Depth> a, SgdScalars<T> s) {
  int64_t n;
  T* w = chunk_of<T>(a, 0, &n);
  const T* g = chunk_of<T>(a, 1, &n);
  T* buf = Depth == 3 ? chunk_of<T>(a, Depth - 1, &n) : nullptr;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sgd_update(w[i], g[i], buf ? buf + i : nullptr, s);
}

// S: the storage type (f16/bf16 scaled in f32 and rounded once, as mul_).
template <class S, class A = acc_t<S>>
__global__ void scale_multi_k(TensorListArgs<1> a, A f) {
  int64_t n;
  S* x = chunk_of<S>(a, 0, &n);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) x[i] = st<S>(A(ld(x[i]) * f));
}

// Each block's sum of squares (f64) into partial[first + blockIdx.x].
template <class S>
__global__ void sum_squares_multi_k(TensorListArgs<1> a, double* partial, int64_t first) {
  __shared__ double smem[32];
  int64_t n;
  const S* x = chunk_of<S>(a, 0, &n);
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double v = double(ld(x[i]));
    acc += v * v;
  }
  acc = block_reduce(acc, SumOp(), 0.0, smem);
  if (threadIdx.x == 0) partial[first + blockIdx.x] = acc;
}

// Runs launch(args, blocks, first_block) for every launch of the plan over `lists` (Depth
// lists of equal length; list 0 decides the sizes); first_block counts the blocks of the
// launches before (where a reduction writes its partial sums).
template <int Depth, class Launch>
void for_each_launch(const std::array<std::span<const Tensor>, Depth>& lists, Launch&& launch) {
  const std::span<const Tensor> lead = lists[0];
  std::vector<int64_t> numels(lead.size());
  for (size_t i = 0; i < lead.size(); ++i) numels[i] = lead[i].numel();
  int64_t first = 0;
  for (const auto& l : ::strata::detail::plan_multi_tensor(numels, kMultiMaxTensors<Depth>, kMultiMaxBlocks, kMultiChunk)) {
    TensorListArgs<Depth> args{};
    for (size_t t = 0; t < l.tensors.size(); ++t) {
      for (int d = 0; d < Depth; ++d) args.addr[d][t] = lists[size_t(d)][size_t(l.tensors[t])].raw_data();
      args.numel[t] = lead[size_t(l.tensors[t])].numel();
    }
    for (size_t b = 0; b < l.blocks.size(); ++b) {
      args.slot[b] = static_cast<unsigned char>(l.blocks[b].slot);
      args.chunk[b] = int(l.blocks[b].chunk);
    }
    launch(args, unsigned(l.blocks.size()), first);
    first += int64_t(l.blocks.size());
  }
}

// Runs f(dtype, indices) for each dtype among ts, with the indices of its entries in order.
template <class F>
void by_dtype(std::span<const Tensor> ts, F&& f) {
  std::map<DType, std::vector<size_t>> groups;
  for (size_t i = 0; i < ts.size(); ++i) groups[ts[i].dtype()].push_back(i);
  for (const auto& [dt, idx] : groups) f(dt, idx);
}

// The entries `idx` of list.
std::vector<Tensor> pick(std::span<const Tensor> list, const std::vector<size_t>& idx) {
  std::vector<Tensor> out;
  out.reserve(idx.size());
  for (size_t i : idx) out.push_back(list[i]);
  return out;
}

template <class T>
AdamScalars<T> adam_scalars(const ops::AdamParams& p) {
  const double bc1 = 1.0 - std::pow(p.beta1, double(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, double(p.step));
  return {T(p.beta1),
          T(p.beta2),
          T(1 - p.beta1),
          T(1 - p.beta2),
          T(p.lr / bc1),
          T(1.0 / std::sqrt(bc2)),
          T(p.eps),
          p.decoupled ? T(0) : T(p.weight_decay),
          p.decoupled ? T(1.0 - p.lr * p.weight_decay) : T(1)};
}

template <class T>
SgdScalars<T> sgd_scalars(const ops::SgdParams& p) {
  return {T(p.lr), T(p.weight_decay), T(p.momentum), T(1 - p.dampening), p.first_step, p.nesterov};
}

}  // namespace

void adam_kernel(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const ops::AdamParams& p) {
  const int64_t n = param.numel();
  if (n == 0) return;
  OpContext ctx(param);
  STRATA_DISPATCH_FLOAT(param.dtype(), "adam_step_", [&] {
    using T = scalar_t;
    adam_k<<<grid_for(n), kThreads, 0, ctx.stream>>>(n, dptr<T>(param), dptr<T>(grad), dptr<T>(m), dptr<T>(v),
                                                     adam_scalars<T>(p));
  });
  STRATA_CUDA_CHECK_LAUNCH("adam_step_");
}

void sgd_kernel(Tensor& param, const Tensor& grad, Tensor& buf, const ops::SgdParams& p) {
  const int64_t n = param.numel();
  if (n == 0) return;
  OpContext ctx(param);
  STRATA_DISPATCH_FLOAT(param.dtype(), "sgd_step_", [&] {
    using T = scalar_t;
    sgd_k<<<grid_for(n), kThreads, 0, ctx.stream>>>(n, dptr<T>(param), dptr<T>(grad),
                                                    p.momentum != 0 ? dptr<T>(buf) : nullptr, sgd_scalars<T>(p));
  });
  STRATA_CUDA_CHECK_LAUNCH("sgd_step_");
}

// Calls f(G{}, P{}) with the gradient's and the 16-bit parameter's storage types (the CPU
// kernel's combinations: grad bf16, f16 or f32; param16 bf16 or f16).
template <class F>
void with_mixed_types(const Tensor& grad, const Tensor& param16, const char* op, F&& f) {
  const auto on_param = [&](auto gtag) {
    switch (param16.dtype()) {
      case DType::bf16: return f(gtag, BFloat16{});
      case DType::f16: return f(gtag, Half{});
      default: STRATA_THROW(Error, "[", op, "] param16 must be bf16 or f16, got ", param16.str());
    }
  };
  switch (grad.dtype()) {
    case DType::bf16: return on_param(BFloat16{});
    case DType::f16: return on_param(Half{});
    case DType::f32: return on_param(float{});
    default: STRATA_THROW(Error, "[", op, "] grad must be bf16, f16 or f32, got ", grad.str());
  }
}

void adam_mixed_kernel(Tensor& master, Tensor& param16, const Tensor& grad, Tensor& m, Tensor& v,
                       const ops::AdamParams& p) {
  const int64_t n = master.numel();
  if (n == 0) return;
  OpContext ctx(master);
  with_mixed_types(grad, param16, "adam_step_mixed_", [&](auto gtag, auto ptag) {
    using G = decltype(gtag);
    using P = decltype(ptag);
    adam_mixed_k<G, P><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, dptr<float>(master), dptr<G>(grad),
                                                                  dptr<float>(m), dptr<float>(v), dptr<P>(param16),
                                                                  adam_scalars<float>(p));
  });
  STRATA_CUDA_CHECK_LAUNCH("adam_step_mixed_");
}

void sgd_mixed_kernel(Tensor& master, Tensor& param16, const Tensor& grad, Tensor& buf, const ops::SgdParams& p) {
  const int64_t n = master.numel();
  if (n == 0) return;
  OpContext ctx(master);
  with_mixed_types(grad, param16, "sgd_step_mixed_", [&](auto gtag, auto ptag) {
    using G = decltype(gtag);
    using P = decltype(ptag);
    sgd_mixed_k<G, P><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, dptr<float>(master), dptr<G>(grad),
                                                                 p.momentum != 0 ? dptr<float>(buf) : nullptr,
                                                                 dptr<P>(param16), sgd_scalars<float>(p));
  });
  STRATA_CUDA_CHECK_LAUNCH("sgd_step_mixed_");
}

void adam_multi_kernel(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> m,
                       std::span<Tensor> v, const ops::AdamParams& p) {
  OpContext ctx(params.front());
  by_dtype(params, [&](DType dt, const std::vector<size_t>& idx) {
    const std::vector<Tensor> lw = pick(params, idx), lg = pick(grads, idx), lm = pick(m, idx), lv = pick(v, idx);
    STRATA_DISPATCH_FLOAT(dt, "adam_step_multi_", [&] {
      using T = scalar_t;
      const AdamScalars<T> s = adam_scalars<T>(p);
      for_each_launch<4>({lw, lg, lm, lv}, [&](const TensorListArgs<4>& a, unsigned blocks, int64_t) {
        adam_multi_k<T><<<blocks, kThreads, 0, ctx.stream>>>(a, s);
        STRATA_CUDA_CHECK_LAUNCH("adam_step_multi_");
      });
    });
  });
}

void sgd_multi_kernel(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> bufs,
                      const ops::SgdParams& p) {
  OpContext ctx(params.front());
  by_dtype(params, [&](DType dt, const std::vector<size_t>& idx) {
    const std::vector<Tensor> lw = pick(params, idx), lg = pick(grads, idx);
    STRATA_DISPATCH_FLOAT(dt, "sgd_step_multi_", [&] {
      using T = scalar_t;
      const SgdScalars<T> s = sgd_scalars<T>(p);
      if (bufs.empty()) {
        for_each_launch<2>({lw, lg}, [&](const TensorListArgs<2>& a, unsigned blocks, int64_t) {
          sgd_multi_k<T, 2><<<blocks, kThreads, 0, ctx.stream>>>(a, s);
          STRATA_CUDA_CHECK_LAUNCH("sgd_step_multi_");
        });
      } else {
        const std::vector<Tensor> lb = pick(bufs, idx);
        for_each_launch<3>({lw, lg, lb}, [&](const TensorListArgs<3>& a, unsigned blocks, int64_t) {
          sgd_multi_k<T, 3><<<blocks, kThreads, 0, ctx.stream>>>(a, s);
          STRATA_CUDA_CHECK_LAUNCH("sgd_step_multi_");
        });
      }
    });
  });
}

double sum_squares_multi_kernel(std::span<const Tensor> ts) {
  OpContext ctx(ts.front());
  std::vector<int64_t> numels;
  for (const Tensor& t : ts) numels.push_back(t.numel());
  // One partial per block of every launch (per dtype group), then one fixed-order sum.
  int64_t total = 0;
  by_dtype(ts, [&](DType, const std::vector<size_t>& idx) {
    std::vector<int64_t> n;
    for (size_t i : idx) n.push_back(numels[i]);
    total += ::strata::detail::multi_tensor_blocks(
        ::strata::detail::plan_multi_tensor(n, kMultiMaxTensors<1>, kMultiMaxBlocks, kMultiChunk));
  });
  if (total == 0) return 0.0;
  Tensor partial = Tensor::empty({total}, DType::f64, ts.front().device());
  Tensor result = Tensor::empty({1}, DType::f64, ts.front().device());
  int64_t offset = 0;
  by_dtype(ts, [&](DType dt, const std::vector<size_t>& idx) {
    const std::vector<Tensor> l = pick(ts, idx);
    int64_t blocks_here = 0;
    STRATA_DISPATCH_FLOAT16(dt, "sum_squares_multi", [&] {
      for_each_launch<1>({l}, [&](const TensorListArgs<1>& a, unsigned blocks, int64_t first) {
        sum_squares_multi_k<scalar_t>
            <<<blocks, kThreads, 0, ctx.stream>>>(a, dptr<double>(partial), offset + first);
        STRATA_CUDA_CHECK_LAUNCH("sum_squares_multi");
        blocks_here = first + blocks;
      });
    });
    offset += blocks_here;
  });
  sum_partials_k<<<1, 1024, 0, ctx.stream>>>(total, dptr<double>(partial), dptr<double>(result));
  STRATA_CUDA_CHECK_LAUNCH("sum_squares_multi");
  return result.item<double>();
}

void mul_multi_kernel(std::span<Tensor> ts, double f) {
  OpContext ctx(ts.front());
  by_dtype(ts, [&](DType dt, const std::vector<size_t>& idx) {
    const std::vector<Tensor> l = pick(ts, idx);
    STRATA_DISPATCH_FLOAT16(dt, "mul_multi_", [&] {
      for_each_launch<1>({l}, [&](const TensorListArgs<1>& a, unsigned blocks, int64_t) {
        scale_multi_k<scalar_t><<<blocks, kThreads, 0, ctx.stream>>>(a, static_cast<acc_t<scalar_t>>(f));
        STRATA_CUDA_CHECK_LAUNCH("mul_multi_");
      });
    });
  });
}

}  // namespace strata::cuda
