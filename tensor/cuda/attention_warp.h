// The warp-per-row building blocks of the CUDA attention kernels (the fused causal
// attention in attention.cu, the blockwise attention of ring attention in
// attention_block.cu): one warp holds one row of a head, its 32 lanes splitting the head
// dimension (hd <= 32 * kMaxPerLane, up to kMaxPerLane elements a lane), so a dot product
// is a warp reduction and a row's sums run in a fixed order (no atomics).
// Included only by .cu files (nvcc).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <strata/core/error.h>
#include <strata/tensor/cuda/convert.h>

namespace strata::cuda::attn {

inline constexpr int kWarpsPerBlock = 8;
inline constexpr int kMaxPerLane = 8;  // hd <= 32 * 8

// Storage type S, arithmetic type A (float for f32 and 16-bit storage, double for f64).
template <class S>
struct Acc {
  using type = float;
};
template <>
struct Acc<double> {
  using type = double;
};
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

template <class S, class A = typename Acc<S>::type>
__device__ __forceinline__ A ld(const S* p, int64_t i) {
  if constexpr (std::is_same_v<S, Bf16>) return bf16_bits_to_float(p[i].bits);
  else if constexpr (std::is_same_v<S, F16>) return half_bits_to_float(p[i].bits);
  else return A(p[i]);
}
template <class S, class A>
__device__ __forceinline__ void st(S* p, int64_t i, A v) {
  if constexpr (std::is_same_v<S, Bf16>) p[i].bits = float_to_bf16_bits(float(v));
  else if constexpr (std::is_same_v<S, F16>) p[i].bits = float_to_half_bits(float(v));
  else p[i] = S(v);
}

template <class A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float exp_a(float x) { return ::expf(x); }
__device__ __forceinline__ double exp_a(double x) { return ::exp(x); }
__device__ __forceinline__ float log_a(float x) { return ::logf(x); }
__device__ __forceinline__ double log_a(double x) { return ::log(x); }
__device__ __forceinline__ float log1p_a(float x) { return ::log1pf(x); }
__device__ __forceinline__ double log1p_a(double x) { return ::log1p(x); }

// The lane's elements of a row: x[e] = row[lane + 32 e] for the first `hd` elements.
template <class S, class A>
__device__ __forceinline__ void load_row(const S* base, int64_t off, int64_t hd, A (&x)[kMaxPerLane]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    x[e] = d < hd ? ld(base, off + d) : A(0);
  }
}
// x . row, the row read from memory (every lane gets the sum).
template <class S, class A>
__device__ __forceinline__ A dot_row(const S* base, int64_t off, int64_t hd, const A (&x)[kMaxPerLane]) {
  const int lane = threadIdx.x & 31;
  A acc = 0;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < hd) acc += x[e] * ld(base, off + d);
  }
  return warp_sum(acc);
}
// x . y of two rows held by the lanes (elements past hd are zero in both).
template <class A>
__device__ __forceinline__ A dot_regs(const A (&x)[kMaxPerLane], const A (&y)[kMaxPerLane]) {
  A acc = 0;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) acc += x[e] * y[e];
  return warp_sum(acc);
}

// Calls f.template operator()<S>() with S the kernels' storage type of dt.
template <class F>
void dispatch_storage(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::bf16: return f.template operator()<Bf16>();
    case DType::f16: return f.template operator()<F16>();
    default: STRATA_THROW(Error, "[", op, "] unsupported dtype ", dtype_name(dt), " on cuda");
  }
}

}  // namespace strata::cuda::attn
