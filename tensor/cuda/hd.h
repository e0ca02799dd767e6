// STRATA_HD marks the small helpers shared by CUDA kernels and host code (index math,
// Philox, dtype conversion, op formulas): __host__ __device__ under nvcc, plain inline
// in g++ builds, so the CPU tests exercise exactly the code the kernels run.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__ __forceinline__
#else
#define STRATA_HD inline
#endif

// `#pragma unroll` for device code only (host compilers warn about it).
#if defined(__CUDA_ARCH__)
#define STRATA_UNROLL _Pragma("unroll")
#else
#define STRATA_UNROLL
#endif

namespace strata::cuda::hd {

STRATA_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

STRATA_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

}  // namespace strata::cuda::hd
