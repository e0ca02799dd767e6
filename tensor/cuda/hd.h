// STRATA_HD marks the small helpers shared by CUDA kernels and host code (index math,
// Philox, dtype conversion, op formulas): __host__ __device__ under nvcc, plain inline
// in g++ builds, so the CPU tests exercise exactly the code the kernels run.
#pragma once
#include <cstdint>
#include <cstring>

#include <strata/core/half_bits.h>  // STRATA_HD

// `#pragma unroll` for device code only (host compilers warn about it).
#if defined(__CUDA_ARCH__)
#define STRATA_UNROLL _Pragma("unroll")
#else
#define STRATA_UNROLL
#endif

namespace strata::cuda::hd {

using strata::hd::bits_float;
using strata::hd::float_bits;

}  // namespace strata::cuda::hd
