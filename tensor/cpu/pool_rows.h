// The rows of the unpadded 2x2 stride-2 max pool (first max on ties, NaN wins), as
// templates for the kernels that pool a plane inside their own SIMD-level loops: cpu/pool.cpp
// and the batch norm + ReLU + pool pass of cpu/norm.cpp.
#pragma once
#include <cstdint>
#include <type_traits>

#include <strata/tensor/cpu/act_avx512.h>
#include <strata/tensor/cpu/pool_avx512.h>

namespace strata::cpu {

// One output row of a 2x2 stride-2 unpadded max pool as vectorised selects: the
// same result as the general loop (first max on ties, NaN wins). r0 is input row
// 2*oh, i0 its flat index.
template <class T>
void max2x2_row(const T* r0, int64_t W, int64_t Wo, int64_t i0, T* y, int64_t* idx) {
  const T* r1 = r0 + W;
#pragma omp simd
  for (int64_t ow = 0; ow < Wo; ++ow) {
    const T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
    // x replaces the running max m when x > m, or x is NaN and m is not
    const bool tb = b > a || (b != b && a == a);
    const T m1 = tb ? b : a;
    const bool tc = c > m1 || (c != c && m1 == m1);
    const T m2 = tc ? c : m1;
    const bool td = d > m2 || (d != d && m2 == m2);
    y[ow] = td ? d : m2;
    idx[ow] = i0 + 2 * ow + (td ? W + 1 : (tc ? W : (tb ? 1 : 0)));
  }
}

// The same row for short rows (Wo below a vector's width, e.g. 14 or 7 in small CNNs):
// a vector loop there runs only its scalar remainder, which branches on every NaN
// test; this scalar form compiles to selects and is several times faster.
template <class T>
void max2x2_row_short(const T* r0, int64_t W, int64_t Wo, int64_t i0, T* y, int64_t* idx) {
  const T* r1 = r0 + W;
  for (int64_t ow = 0; ow < Wo; ++ow) {
    const T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
    int64_t k = 0;
    T m = a;
    if (!(a + b + c + d == a + b + c + d)) {  // a NaN (or +inf with -inf): the exact NaN rule
      if (b > m || (b != b && m == m)) m = b, k = 1;
      if (c > m || (c != c && m == m)) m = c, k = W;
      if (d > m || (d != d && m == m)) m = d, k = W + 1;
    } else {  // integer masks keep the compiler from branching on random comparisons
      int64_t t = -int64_t(b > m);
      k = (1 & t) | (k & ~t);
      m = b > m ? b : m;
      t = -int64_t(c > m);
      k = (W & t) | (k & ~t);
      m = c > m ? c : m;
      t = -int64_t(d > m);
      k = ((W + 1) & t) | (k & ~t);
      m = d > m ? d : m;
    }
    y[ow] = m;
    idx[ow] = i0 + 2 * ow + k;
  }
}

// One (H, W) plane (f32 or f64), H, W >= 2: y (H/2, W/2) and idx (flat into the plane);
// f32 planes up to 32 wide take the AVX-512 rows (pool_avx512.h) at x86-64-v4.
template <class T>
void max2x2_plane(const T* x, int64_t H, int64_t W, T* y, int64_t* idx) {
  const int64_t Ho = H / 2, Wo = W / 2;
  if constexpr (std::is_same_v<T, float>) {
    if (W <= 32 && avx512_rows()) return max2x2_plane_avx512(x, W, y, idx, Ho, Wo);  // a masked vector a row
  }
  for (int64_t oh = 0; oh < Ho; ++oh) {
    if (Wo < 16)
      max2x2_row_short(x + 2 * oh * W, W, Wo, 2 * oh * W, y + oh * Wo, idx + oh * Wo);
    else
      max2x2_row(x + 2 * oh * W, W, Wo, 2 * oh * W, y + oh * Wo, idx + oh * Wo);
  }
}

}  // namespace strata::cpu
