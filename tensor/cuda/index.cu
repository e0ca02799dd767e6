// CUDA index kernels: index_select / gather (pure moves, by element size), index_add /
// scatter_add (atomic adds), embedding forward / backward (f16/bf16 gradients summed in
// an f32 scratch and rounded once), and the device-side index
// range check every one of them runs first (validate.h). As on the CPU the indexed
// operand's stride along `dim` is zeroed in the OffsetCalc and index * stride is added
// per element; the index operand itself is laid "along" dim (stride 0 elsewhere).
#include <cstring>
#include <limits>

#include <strata/tensor/cuda/indexing.h>
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/cuda/validate.h>
#include <strata/tensor/cuda/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {
namespace {

constexpr unsigned long long kNone = std::numeric_limits<unsigned long long>::max();

template <class I>
__global__ void find_bad_k(int64_t n, OffsetCalc<1> oc, const I* idx, int64_t bound, bool has_skip, int64_t skip,
                           unsigned long long* first) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[1];
    oc.get(i, off);
    const int64_t v = int64_t(idx[off[0]]);
    if ((!has_skip || v != skip) && (v < 0 || v >= bound)) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

// Adds for the dtypes of STRATA_DISPATCH_ALL; u8 goes through a CAS on its 32-bit word.
__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int32_t* p, int32_t v) { atomicAdd(reinterpret_cast<int*>(p), int(v)); }
__device__ __forceinline__ void atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}
__device__ __forceinline__ void atomic_add(uint8_t* p, uint8_t v) {
  auto* word = reinterpret_cast<unsigned int*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(3));
  const unsigned shift = unsigned(reinterpret_cast<uintptr_t>(p) & 3) * 8;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    const unsigned int byte = ((assumed >> shift) + v) & 0xffu;
    old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (byte << shift));
  } while (assumed != old);
}

// out[off0] = t[off1 + idx[off2] * tsd]  (index_select and gather)
template <class W, class I>
__global__ void select_k(int64_t n, OffsetCalc<3> oc, W* out, const W* t, const I* idx, int64_t tsd) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[3];
    oc.get(i, off);
    out[off[0]] = t[off[1] + int64_t(idx[off[2]]) * tsd];
  }
}

// out[off0 + idx[off2] * osd] += src[off1]  (index_add and scatter_add)
template <class T, class I>
__global__ void add_at_k(int64_t n, OffsetCalc<3> oc, T* out, const T* src, const I* idx, int64_t osd) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[3];
    oc.get(i, off);
    atomic_add(out + off[0] + int64_t(idx[off[2]]) * osd, src[off[1]]);
  }
}

template <class W, class I>
__global__ void embedding_k(int64_t n, int64_t D, const W* w, const I* idx, W* out) {
  for (int64_t i = global_index(); i < n * D; i += grid_stride()) {
    const int64_t r = i / D, c = i % D;
    out[i] = w[int64_t(idx[r]) * D + c];
  }
}

// dw[idx[r]] += dy[r] in A (the dw dtype, or an f32 scratch for f16/bf16 dy: S widened).
template <class S, class I, class A>
__global__ void embedding_bwd_k(int64_t n, int64_t D, const S* dy, const I* idx, A* dw) {
  for (int64_t i = global_index(); i < n * D; i += grid_stride()) {
    const int64_t r = i / D, c = i % D;
    atomic_add(dw + int64_t(idx[r]) * D + c, A(ld(dy[i])));
  }
}

// Calls f(W{}) with an unsigned type of dtype dt's element size.
template <class F>
void dispatch_width(DType dt, F&& f) {
  switch (element_size(dt)) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    default: return f(uint64_t{});
  }
}

Shape along(const Tensor& idx, int64_t dim, int64_t ndim) {
  Shape s(size_t(ndim), 0);
  s[size_t(dim)] = idx.strides()[0];
  return s;
}

Shape zero_dim(Shape s, int64_t dim) {
  s[size_t(dim)] = 0;
  return s;
}

void check_range(const Tensor& idx, int64_t n, const char* op, int64_t dim) {
  if (auto bad = find_bad_index(idx, n, std::nullopt, op))
    STRATA_THROW(Error, "[", op, "] index ", bad->value, " is out of range for dim ", dim, " of size ", n);
}

void check_embedding(const Tensor& idx, int64_t V) {
  if (auto bad = find_bad_index(idx, V, std::nullopt, "embedding"))
    STRATA_THROW(Error, "[embedding] index ", bad->value, " at position ", bad->position, " is out of range for ", V,
                 " embeddings");
}

}  // namespace

std::optional<BadIndex> find_bad_index(const Tensor& idx, int64_t bound, std::optional<int64_t> skip, const char* op) {
  const int64_t n = idx.numel();
  if (n == 0) return std::nullopt;
  OpContext ctx(idx);
  const auto oc = make_offset_calc<1>(idx.shape(), {idx.strides()}, op);
  Tensor first = Tensor::empty({1}, DType::i64, idx.device());
  auto* fp = dptr<unsigned long long>(first);
  STRATA_CUDA_CHECK(cudaMemsetAsync(fp, 0xff, sizeof(unsigned long long), ctx.stream), op);
  dispatch_index(idx, op, [&](auto tag) {
    using I = decltype(tag);
    find_bad_k<I><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, dptr<I>(idx), bound, skip.has_value(),
                                                            skip.value_or(0), fp);
  });
  STRATA_CUDA_CHECK_LAUNCH(op);
  unsigned long long pos = kNone;
  STRATA_CUDA_CHECK(cudaMemcpyAsync(&pos, fp, sizeof(pos), cudaMemcpyDeviceToHost, ctx.stream), op);
  STRATA_CUDA_CHECK(cudaStreamSynchronize(ctx.stream), op);
  if (pos == kNone) return std::nullopt;
  int64_t off[1];
  oc.get(int64_t(pos), off);
  int64_t value = 0;
  const size_t es = element_size(idx.dtype());
  const char* src = static_cast<const char*>(idx.raw_data()) + off[0] * int64_t(es);
  unsigned char raw[8] = {};
  STRATA_CUDA_CHECK(cudaMemcpyAsync(raw, src, es, cudaMemcpyDeviceToHost, ctx.stream), op);
  STRATA_CUDA_CHECK(cudaStreamSynchronize(ctx.stream), op);
  if (idx.dtype() == DType::i64) {
    std::memcpy(&value, raw, 8);
  } else {
    int32_t v32 = 0;
    std::memcpy(&v32, raw, 4);
    value = v32;
  }
  return BadIndex{int64_t(pos), value};
}

void index_select_kernel(Tensor& out, const Tensor& t, int64_t dim, const Tensor& idx) {
  dispatch_index(idx, "index_select", [&](auto itag) {
    using I = decltype(itag);
    check_range(idx, t.shape()[size_t(dim)], "index_select", dim);
    const int64_t n = out.numel();
    if (n == 0) return;
    OpContext ctx(out);
    const auto oc = make_offset_calc<3>(
        out.shape(), {out.strides(), zero_dim(t.strides(), dim), along(idx, dim, out.dim())}, "index_select");
    dispatch_width(t.dtype(), [&](auto wtag) {
      using W = decltype(wtag);
      select_k<W, I><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, dptr<W>(out), dptr<W>(t), dptr<I>(idx),
                                                               t.strides()[size_t(dim)]);
    });
    STRATA_CUDA_CHECK_LAUNCH("index_select");
  });
}

void gather_kernel(Tensor& out, const Tensor& t, int64_t dim, const Tensor& idx) {
  dispatch_index(idx, "gather", [&](auto itag) {
    using I = decltype(itag);
    check_range(idx, t.shape()[size_t(dim)], "gather", dim);
    const int64_t n = out.numel();
    if (n == 0) return;
    OpContext ctx(out);
    const auto oc =
        make_offset_calc<3>(idx.shape(), {out.strides(), zero_dim(t.strides(), dim), idx.strides()}, "gather");
    dispatch_width(t.dtype(), [&](auto wtag) {
      using W = decltype(wtag);
      select_k<W, I><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, dptr<W>(out), dptr<W>(t), dptr<I>(idx),
                                                               t.strides()[size_t(dim)]);
    });
    STRATA_CUDA_CHECK_LAUNCH("gather");
  });
}

void index_add_kernel(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src) {
  dispatch_index(idx, "index_add", [&](auto itag) {
    using I = decltype(itag);
    check_range(idx, out.shape()[size_t(dim)], "index_add", dim);
    const int64_t n = src.numel();
    if (n == 0) return;
    OpContext ctx(out);
    const auto oc = make_offset_calc<3>(
        src.shape(), {zero_dim(out.strides(), dim), src.strides(), along(idx, dim, src.dim())}, "index_add");
    STRATA_DISPATCH_ALL(out.dtype(), "index_add", [&] {
      add_at_k<scalar_t, I><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, dptr<scalar_t>(out), dptr<scalar_t>(src),
                                                                      dptr<I>(idx), out.strides()[size_t(dim)]);
    });
    STRATA_CUDA_CHECK_LAUNCH("index_add");
  });
}

void scatter_add_kernel(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src) {
  dispatch_index(idx, "scatter_add", [&](auto itag) {
    using I = decltype(itag);
    check_range(idx, out.shape()[size_t(dim)], "scatter_add", dim);
    const int64_t n = idx.numel();
    if (n == 0) return;
    OpContext ctx(out);
    const auto oc = make_offset_calc<3>(idx.shape(), {zero_dim(out.strides(), dim), src.strides(), idx.strides()},
                                        "scatter_add");
    STRATA_DISPATCH_ALL(out.dtype(), "scatter_add", [&] {
      add_at_k<scalar_t, I><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, dptr<scalar_t>(out), dptr<scalar_t>(src),
                                                                      dptr<I>(idx), out.strides()[size_t(dim)]);
    });
    STRATA_CUDA_CHECK_LAUNCH("scatter_add");
  });
}

void embedding_kernel(const Tensor& weight, const Tensor& idx, Tensor& out) {
  const int64_t V = weight.size(0), D = weight.size(1), n = idx.numel();
  dispatch_index(idx, "embedding", [&](auto itag) {
    using I = decltype(itag);
    check_embedding(idx, V);
    if (n * D == 0) return;
    OpContext ctx(out);
    dispatch_width(weight.dtype(), [&](auto wtag) {
      using W = decltype(wtag);
      embedding_k<W, I><<<grid_for(n * D), kThreads, 0, ctx.stream>>>(n, D, dptr<W>(weight), dptr<I>(idx),
                                                                       dptr<W>(out));
    });
    STRATA_CUDA_CHECK_LAUNCH("embedding");
  });
}

void embedding_backward_kernel(const Tensor& dy, const Tensor& idx, Tensor& dw) {
  const int64_t V = dw.size(0), D = dw.size(1), n = idx.numel();
  dispatch_index(idx, "embedding", [&](auto itag) {
    using I = decltype(itag);
    check_embedding(idx, V);
    if (V * D == 0) return;
    OpContext ctx(dw);
    STRATA_DISPATCH_FLOAT16(dw.dtype(), "embedding_backward", [&] {
      using A = acc_t<scalar_t>;
      // f16/bf16: the rows are summed in an f32 scratch of dw's shape and rounded into dw
      // once (the CPU sums each column block in f32 and rounds once too)
      Tensor acc = kIs16<scalar_t> ? Tensor::empty({V, D}, DType::f32, dw.device()) : dw;
      STRATA_CUDA_CHECK(cudaMemsetAsync(acc.raw_data(), 0, size_t(acc.nbytes()), ctx.stream), "embedding_backward");
      if (n * D > 0) {
        embedding_bwd_k<scalar_t, I, A><<<grid_for(n * D), kThreads, 0, ctx.stream>>>(n, D, dptr<scalar_t>(dy),
                                                                                      dptr<I>(idx), dptr<A>(acc));
        STRATA_CUDA_CHECK_LAUNCH("embedding_backward");
      }
      if constexpr (kIs16<scalar_t>) copy_kernel(dw, acc);  // round to nearest even
    });
  });
}

}  // namespace strata::cuda
