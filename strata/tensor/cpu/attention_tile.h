// The register tile of the CPU attention kernels (attention.cpp): out (R x cols) =
// sum over l of A(r, l) * B(l, cols), with A read as broadcast scalars at any pair of
// strides (row-major, or transposed for dS^T q and P^T dy) and B a packed, zero-padded
// row-major block read as whole vectors. R x NV vector accumulators stay in registers for
// the whole l loop. Written with GCC vector extensions, so one source gives 16 f32 lanes
// (AVX-512), 8 (AVX2) or 4 (SSE2, any other target) depending on the vector size the
// caller instantiates it with; the fused multiply-add goes through intrinsics where the
// ISA has one (strata builds with -std=c++20, which leaves -ffp-contract off).
// Internal to tensor/cpu.
#pragma once
#include <cstdint>
#include <cstring>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define STRATA_ATTN_X86 1
// GCC 12's avx512fintrin.h starts masked intrinsics from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized reports inside the headers (GCC bug 105593)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#else
#define STRATA_ATTN_X86 0
#endif

// tile() is a default-target template that calls the wide fmadd overloads: GCC notes that
// such a call would pass vectors in a different ABI if it were not inlined. It always is:
// tile only runs flattened into the per-level functions (attention.cpp), built for the ISA.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace strata::cpu::attn {

/// kBytes-wide vector of T (GCC/clang vector extension): 64 = one zmm, 32 = one ymm.
template <class T, int kBytes>
struct VecOf {
  using type [[gnu::vector_size(kBytes)]] = T;
};
template <class T, int kBytes>
using Vec = typename VecOf<T, kBytes>::type;

// c + a * b, fused where the vector width has an FMA instruction (x86-64-v3 and up: each
// overload carries the target it needs, so it inlines only into callers built for it).
#if STRATA_ATTN_X86
[[gnu::target("avx512f")]] inline Vec<float, 64> fmadd(Vec<float, 64> a, Vec<float, 64> b,
                                                                             Vec<float, 64> c) {
  return _mm512_fmadd_ps(a, b, c);
}
[[gnu::target("avx512f")]] inline Vec<double, 64> fmadd(Vec<double, 64> a, Vec<double, 64> b,
                                                                              Vec<double, 64> c) {
  return _mm512_fmadd_pd(a, b, c);
}
[[gnu::target("avx2,fma")]] inline Vec<float, 32> fmadd(Vec<float, 32> a, Vec<float, 32> b,
                                                                              Vec<float, 32> c) {
  return _mm256_fmadd_ps(a, b, c);
}
[[gnu::target("avx2,fma")]] inline Vec<double, 32> fmadd(Vec<double, 32> a, Vec<double, 32> b,
                                                                               Vec<double, 32> c) {
  return _mm256_fmadd_pd(a, b, c);
}
#endif
template <class V>
inline V fmadd(V a, V b, V c) {  // 16-byte vectors (SSE2 has no FMA), other targets
  return c + a * b;
}

/// out[r * ldo + c] = sum_{l in [l0, l1)} a[r * ars + l * als] * b[l * ldb + c] for r < R,
/// c < ncols, where NV - 1 < ncols / lanes <= NV. b holds NV whole vectors from each of its
/// rows [l0, l1) (packed with zero padding by the caller); out gets exactly ncols columns.
template <class T, int kBytes, int R, int NV>
inline void tile(int64_t l0, int64_t l1, const T* a, int64_t ars, int64_t als, const T* b,
                                        int64_t ldb, T* out, int64_t ldo, int64_t ncols) {
  using V = Vec<T, kBytes>;
  constexpr int kLanes = kBytes / int(sizeof(T));
  V acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) acc[r][n] = V{};
  for (int64_t l = l0; l < l1; ++l) {
    V bv[NV];
    for (int n = 0; n < NV; ++n) std::memcpy(&bv[n], b + l * ldb + n * kLanes, sizeof(V));
    for (int r = 0; r < R; ++r) {
      const V av = a[r * ars + l * als] - V{};  // broadcast (x - 0 is x, folded)
      for (int n = 0; n < NV; ++n) acc[r][n] = fmadd(av, bv[n], acc[r][n]);
    }
  }
  if (ncols == NV * kLanes) {
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < NV; ++n) std::memcpy(out + r * ldo + n * kLanes, &acc[r][n], sizeof(V));
    return;
  }
  const int64_t full = ncols / kLanes, rest = ncols - full * kLanes;  // whole vectors, then a part of one
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) {  // constant n: acc stays in registers
      if (n < full) {
        std::memcpy(out + r * ldo + n * kLanes, &acc[r][n], sizeof(V));
      } else if (n == full && rest > 0) {
        T part[kLanes];
        std::memcpy(part, &acc[r][n], sizeof(V));
        std::memcpy(out + r * ldo + n * kLanes, part, size_t(rest) * sizeof(T));
      }
    }
}

}  // namespace strata::cpu::attn

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
