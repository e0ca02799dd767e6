// Launch plumbing shared by the .cu kernel files: typed device pointers, grid sizes
// for grid-stride loops, the device/stream of an op, and warp/block reductions.
// Included only by .cu files (nvcc).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include <strata/tensor/cuda/runtime.h>
#include <strata/tensor/tensor.h>

namespace strata::cuda {

inline constexpr int kThreads = 256;
inline constexpr int64_t kMaxBlocks = int64_t(1) << 20;

/// Blocks of `threads` for a grid-stride loop over n items (at least 1).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(std::clamp<int64_t>(b, 1, kMaxBlocks));
}

template <class T>
T* dptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}
/// dptr, or null for an undefined tensor (an optional weight, bias or gradient).
template <class T>
T* dptr_or_null(const Tensor& t) {
  return t.defined() ? dptr<T>(t) : nullptr;
}

/// One block per row: rows blocks, at least 1, at most kMaxBlocks (the kernels stride).
inline unsigned block_grid(int64_t rows) { return unsigned(std::clamp<int64_t>(rows, 1, kMaxBlocks)); }

/// The device guard and stream every kernel entry point opens for its output tensor.
struct OpContext {
  explicit OpContext(const Tensor& t) : device(t.device().index), guard(device), stream(current_stream(device)) {}
  int device;
  DeviceGuard guard;
  cudaStream_t stream;
};

/// Smallest power of two >= n, clamped to [lo, hi] (block sizes for row kernels).
inline int pow2_threads(int64_t n, int lo = 32, int hi = 1024) {
  int t = lo;
  while (t < hi && t < n) t *= 2;
  return t;
}

/// Index of this thread in a grid-stride loop and the loop stride.
__device__ __forceinline__ int64_t global_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a > b ? a : b; }
};

/// __shfl_xor_sync for any arithmetic T (types narrower than 32 bits go through int).
template <class T>
__device__ __forceinline__ T shfl_xor(T v, int lane_mask) {
  if constexpr (sizeof(T) < 4)
    return T(__shfl_xor_sync(0xffffffffu, int(v), lane_mask));
  else
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}

template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
  return v;
}

/// Reduces v over the block (blockDim.x a multiple of 32, at most 1024) and returns the
/// result to every thread. `smem` holds 32 T. Every thread of the block must call it.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T identity, T* smem) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) smem[wid] = v;
  __syncthreads();
  const int nw = int(blockDim.x) >> 5;
  v = lane < nw ? smem[lane] : identity;
  v = warp_reduce(v, op);
  return v;
}

/// Sums partial[0, n) with one block (blockDim.x a multiple of 32, at most 1024) in an order
/// fixed by n and the block size into out[0]: the last step of the deterministic
/// two-pass reductions (sum_squares and its multi-tensor form).
template <class T>
__global__ void sum_partials_k(int64_t n, const T* partial, T* out) {
  __shared__ T smem[32];
  T acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
  acc = block_reduce(acc, SumOp(), T(0), smem);
  if (threadIdx.x == 0) out[0] = acc;
}

}  // namespace strata::cuda
