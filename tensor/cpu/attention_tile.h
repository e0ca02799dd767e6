// The vector building blocks of the CPU attention kernels (attention.cpp). The register
// tile: out (R x cols) = sum over l of A(r, l) * B(l, cols), with A read as broadcast
// scalars at any pair of strides (row-major, or transposed for dS^T q and P^T dy) and B a
// packed, zero-padded row-major block read as whole vectors; R x NV vector accumulators stay
// in registers for the whole l loop. And the row passes fused around it: the causal softmax
// of a block of rows (with its exp on whole vectors) and its log-sum-exp, the probabilities
// again from that log-sum-exp, and the softmax gradient of a block of rows. Written with GCC vector extensions, so one source gives 16
// f32 lanes (AVX-512), 8 (AVX2) or 4 (SSE2, any other target) depending on the vector size
// the caller instantiates it with; FMA, broadcast, gather, transposes and horizontal
// reductions go through intrinsics where the ISA has them (an explicit FMA does not depend
// on where GCC chooses to contract a multiply and an add, which it does in C++20 mode too,
// and GCC 12 builds some of these poorly from the generic forms). Internal to tensor/cpu.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

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
#include <strata/tensor/cpu/exp_avx512.h>
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
inline V fmadd(const V& a, const V& b, const V& c) {  // 16-byte vectors (SSE2 has no FMA), other targets
  return c + a * b;
}

template <class V, class T>
inline V load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <class T, class V>
inline void store(T* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}
// x in every lane: the set1 intrinsics where there are wide vectors (GCC 12 builds a
// 16-lane constructor of one value lane by lane otherwise).
#if STRATA_ATTN_X86
[[gnu::target("avx512f")]] inline Vec<float, 64> splat_to(float x, const Vec<float, 64>*) { return _mm512_set1_ps(x); }
[[gnu::target("avx512f")]] inline Vec<double, 64> splat_to(double x, const Vec<double, 64>*) {
  return _mm512_set1_pd(x);
}
[[gnu::target("avx")]] inline Vec<float, 32> splat_to(float x, const Vec<float, 32>*) { return _mm256_set1_ps(x); }
[[gnu::target("avx")]] inline Vec<double, 32> splat_to(double x, const Vec<double, 32>*) { return _mm256_set1_pd(x); }
#endif
template <class V, class T>
inline V splat_to(T x, const V*) {
  return x - V{};
}
template <class V, class T>
inline V splat(T x) {
  return splat_to(x, static_cast<const V*>(nullptr));
}

// p[0], p[stride], ..., one per lane (a column of a row-major block, for the transposed
// packing): the gather instructions on the wide vectors.
#if STRATA_ATTN_X86
[[gnu::target("avx512f")]] inline Vec<float, 64> gather_to(const float* p, int64_t stride, const Vec<float, 64>*) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                         _mm512_set1_epi32(int(stride)));
  return _mm512_i32gather_ps(idx, p, 4);
}
[[gnu::target("avx512f")]] inline Vec<double, 64> gather_to(const double* p, int64_t stride, const Vec<double, 64>*) {
  const __m256i idx = _mm256_mullo_epi32(_mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0), _mm256_set1_epi32(int(stride)));
  return _mm512_i32gather_pd(idx, p, 8);
}
[[gnu::target("avx2")]] inline Vec<float, 32> gather_to(const float* p, int64_t stride, const Vec<float, 32>*) {
  const __m256i idx = _mm256_mullo_epi32(_mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0), _mm256_set1_epi32(int(stride)));
  return _mm256_i32gather_ps(p, idx, 4);
}
[[gnu::target("avx2")]] inline Vec<double, 32> gather_to(const double* p, int64_t stride, const Vec<double, 32>*) {
  const __m128i idx = _mm_mullo_epi32(_mm_set_epi32(3, 2, 1, 0), _mm_set1_epi32(int(stride)));
  return _mm256_i32gather_pd(p, idx, 8);
}
#endif
template <class V, class T>
inline V gather_to(const T* p, int64_t stride, const V*) {
  V v;
  for (int i = 0; i < int(sizeof(V) / sizeof(T)); ++i) v[i] = p[i * stride];
  return v;
}
template <class V, class T>
inline V gather(const T* p, int64_t stride) {
  return gather_to(p, stride, static_cast<const V*>(nullptr));
}

/// dst[c * ldd + r] = s * src[r * ld + c] for r, c < lanes: one square block transposed
/// (and scaled), src rows and dst rows read and written as whole vectors. f32 on the wide
/// vectors transposes in registers (interleaves of lanes, pairs, then 128-bit quarters: 4
/// shuffle rounds over the block's vectors); other types gather each dst row.
#if STRATA_ATTN_X86
// Interleaves within each 128-bit block, of 32-bit lanes (a0 b0 a1 b1 / a2 b2 a3 b3) and of
// 64-bit pairs, at both widths.
[[gnu::target("avx512f")]] inline __m512 unpack_lo32(__m512 a, __m512 b) { return _mm512_unpacklo_ps(a, b); }
[[gnu::target("avx512f")]] inline __m512 unpack_hi32(__m512 a, __m512 b) { return _mm512_unpackhi_ps(a, b); }
[[gnu::target("avx512f")]] inline __m512 unpack_lo64(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
[[gnu::target("avx512f")]] inline __m512 unpack_hi64(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
[[gnu::target("avx")]] inline __m256 unpack_lo32(__m256 a, __m256 b) { return _mm256_unpacklo_ps(a, b); }
[[gnu::target("avx")]] inline __m256 unpack_hi32(__m256 a, __m256 b) { return _mm256_unpackhi_ps(a, b); }
[[gnu::target("avx")]] inline __m256 unpack_lo64(__m256 a, __m256 b) {
  return _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a), _mm256_castps_pd(b)));
}
[[gnu::target("avx")]] inline __m256 unpack_hi64(__m256 a, __m256 b) {
  return _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a), _mm256_castps_pd(b)));
}

/// The first two rounds of transposing N rows r of N f32 lanes: afterwards the 128-bit block
/// k of r[4i + j] holds column 4k + j of rows 4i .. 4i + 3. Inlined into the callers below.
template <class V, int N>
inline void transpose_in_blocks(V* r) {
  V t[N];
  for (int i = 0; i < N / 2; ++i) {
    t[2 * i] = unpack_lo32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = unpack_hi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < N / 4; ++i) {
    r[4 * i] = unpack_lo64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = unpack_hi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = unpack_lo64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = unpack_hi64(t[4 * i + 1], t[4 * i + 3]);
  }
}

[[gnu::target("avx512f")]] inline void transpose_to(const float* src, int64_t ld, float s, float* dst, int64_t ldd,
                                                    const Vec<float, 64>*) {
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ld);
  transpose_in_blocks<__m512, 16>(r);
  const __m512 sv = _mm512_set1_ps(s);
  for (int j = 0; j < 4; ++j) {  // dst row 4k + j: quarter k of r[j], r[4 + j], r[8 + j], r[12 + j]
    const __m512 x0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x44), x1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xEE);
    const __m512 x2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x44);
    const __m512 x3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xEE);
    _mm512_storeu_ps(dst + j * ldd, _mm512_mul_ps(sv, _mm512_shuffle_f32x4(x0, x2, 0x88)));
    _mm512_storeu_ps(dst + (4 + j) * ldd, _mm512_mul_ps(sv, _mm512_shuffle_f32x4(x0, x2, 0xDD)));
    _mm512_storeu_ps(dst + (8 + j) * ldd, _mm512_mul_ps(sv, _mm512_shuffle_f32x4(x1, x3, 0x88)));
    _mm512_storeu_ps(dst + (12 + j) * ldd, _mm512_mul_ps(sv, _mm512_shuffle_f32x4(x1, x3, 0xDD)));
  }
}
[[gnu::target("avx2")]] inline void transpose_to(const float* src, int64_t ld, float s, float* dst, int64_t ldd,
                                                 const Vec<float, 32>*) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld);
  transpose_in_blocks<__m256, 8>(r);
  const __m256 sv = _mm256_set1_ps(s);
  for (int j = 0; j < 4; ++j) {  // dst row 4k + j: half k of r[j], r[4 + j]
    _mm256_storeu_ps(dst + j * ldd, _mm256_mul_ps(sv, _mm256_permute2f128_ps(r[j], r[4 + j], 0x20)));
    _mm256_storeu_ps(dst + (4 + j) * ldd, _mm256_mul_ps(sv, _mm256_permute2f128_ps(r[j], r[4 + j], 0x31)));
  }
}
#endif
template <class V, class T>
inline void transpose_to(const T* src, int64_t ld, T s, T* dst, int64_t ldd, const V*) {
  const V sv = splat<V>(s);
  for (int c = 0; c < int(sizeof(V) / sizeof(T)); ++c) store(dst + c * ldd, sv * gather<V>(src + c, ld));
}
template <class V, class T>
inline void transpose_block(const T* src, int64_t ld, T s, T* dst, int64_t ldd) {
  transpose_to(src, ld, s, dst, ldd, static_cast<const V*>(nullptr));
}

// Horizontal max and sum of a vector's lanes: log-depth shuffles on the wide vectors.
#if STRATA_ATTN_X86
[[gnu::target("avx512f")]] inline float hmax(Vec<float, 64> v) { return _mm512_reduce_max_ps(v); }
[[gnu::target("avx512f")]] inline double hmax(Vec<double, 64> v) { return _mm512_reduce_max_pd(v); }
[[gnu::target("avx512f")]] inline float hsum(Vec<float, 64> v) { return _mm512_reduce_add_ps(v); }
[[gnu::target("avx512f")]] inline double hsum(Vec<double, 64> v) { return _mm512_reduce_add_pd(v); }
[[gnu::target("avx")]] inline float hmax(Vec<float, 32> v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}
[[gnu::target("avx")]] inline float hsum(Vec<float, 32> v) {
  __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_add_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_add_ss(m, _mm_shuffle_ps(m, m, 1)));
}
#endif
template <class V>
inline auto hmax(const V& v) {
  auto m = v[0];
  for (int i = 1; i < int(sizeof(V) / sizeof(m)); ++i) m = v[i] > m ? v[i] : m;
  return m;
}
template <class V>
inline auto hsum(const V& v) {
  auto s = v[0];
  for (int i = 1; i < int(sizeof(V) / sizeof(s)); ++i) s += v[i];
  return s;
}

/// out[r * ldo + c] = sum_{l in [l0, l1)} a[r * ars + l * als] * b[l * ldb + c] for r < R,
/// c < ncols, where NV - 1 < ncols / lanes <= NV. b holds NV whole vectors from each of its
/// rows [l0, l1) (packed with zero padding by the caller); out gets exactly ncols columns,
/// or has the sum added to it when `add`.
template <class T, int kBytes, int R, int NV>
inline void tile(int64_t l0, int64_t l1, const T* a, int64_t ars, int64_t als, const T* b, int64_t ldb, T* out,
                 int64_t ldo, int64_t ncols, bool add) {
  using V = Vec<T, kBytes>;
  constexpr int kLanes = kBytes / int(sizeof(T));
  V acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) acc[r][n] = V{};
  for (int64_t l = l0; l < l1; ++l) {
    V bv[NV];
    for (int n = 0; n < NV; ++n) bv[n] = load<V>(b + l * ldb + n * kLanes);
    for (int r = 0; r < R; ++r) {
      const V av = splat<V>(a[r * ars + l * als]);
      for (int n = 0; n < NV; ++n) acc[r][n] = fmadd(av, bv[n], acc[r][n]);
    }
  }
  const int64_t full = ncols / kLanes, rest = ncols - full * kLanes;  // whole vectors, then a part of one
  if (add)
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < NV; ++n) acc[r][n] += n < full ? load<V>(out + r * ldo + n * kLanes) : V{};
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) {  // constant n: acc stays in registers
      if (n < full) {
        store(out + r * ldo + n * kLanes, acc[r][n]);
      } else if (n == full && rest > 0) {
        const V v = acc[r][n];
        for (int e = 0; e < kLanes - 1; ++e)
          if (e < rest) out[r * ldo + n * kLanes + e] = add ? out[r * ldo + n * kLanes + e] + v[e] : v[e];
      }
    }
}

#if STRATA_ATTN_X86
/// exp_v's f32 steps on 16 lanes with the AVX-512 instructions that the generic vector code
/// spells in several: the clamps as vmaxps / vminps (which keep a NaN operand), the rounding
/// as vrndscaleps and the scaling by 2^n as vscalefps; the polynomial in Estrin's order
/// (exp_avx512.h), within an ulp of the generic steps' Horner order.
[[gnu::target("avx512f")]] inline Vec<float, 64> exp_avx512(Vec<float, 64> x) {
  return cpu::detail::exp_as_vexp_avx512(x);
}
#endif

/// exp per lane: for f32 the steps of cpu::vexp (softmax.h: Cephes' reduction and
/// polynomial, 0 below -86, inf above ln(FLT_MAX), NaN propagates), on whole vectors; for
/// f64 std::exp per lane (gradcheck precision).
template <class T, int kBytes>
inline Vec<T, kBytes> exp_v(const Vec<T, kBytes>& x) {
  using V = Vec<T, kBytes>;
#if STRATA_ATTN_X86
  if constexpr (sizeof(T) == 4 && kBytes == 64) return exp_avx512(x);
#endif
  if constexpr (sizeof(T) == 8) {
    V e;
    for (int i = 0; i < kBytes / 8; ++i) e[i] = std::exp(x[i]);
    return e;
  } else {
    using VI = Vec<int32_t, kBytes>;
    const V lo = splat<V>(-86.0f), hi = splat<V>(88.72283f), round = splat<V>(12582912.0f);  // 1.5 * 2^23
    V v = x < lo ? lo : x;
    v = v > hi ? hi : v;
    const V t = v * 1.44269504088896341f + round;
    const V n = t - round;                                // round(v / ln2)
    const VI ni = (VI)t - (VI)round;                      // the same, as int
    const V r = v - n * 0.693359375f + n * 2.12194440e-4f;  // v - n ln2, in two parts
    V p = splat<V>(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const V half_scale = (V)((ni + 126) << 23);  // 2^(n-1), n in [-124, 128]
    V e = p * half_scale * 2.0f;
    e = x < lo ? V{} : e;
    return x > hi ? splat<V>(__builtin_inff()) : e;
  }
}

/// dst[0, len) = src[0, c) then zeros, c <= len.
template <class T, int kBytes>
inline void copy_pad(const T* src, int64_t c, T* dst, int64_t len) {
  using V = Vec<T, kBytes>;
  constexpr int64_t kLanes = kBytes / int64_t(sizeof(T));
  int64_t j = 0;
  for (; j + kLanes <= c; j += kLanes) store(dst + j, load<V>(src + j));
  for (; j < c; ++j) dst[j] = src[j];
  for (; j < len && j % kLanes != 0; ++j) dst[j] = T(0);
  for (; j + kLanes <= len; j += kLanes) store(dst + j, V{});
  for (; j < len; ++j) dst[j] = T(0);
}

/// The rows i0 + r (r < rows <= R) of a block of scores s (row stride lds) -> probabilities
/// over [0, i0 + r], exactly 0 from there to m (a multiple of the lanes): -inf there first,
/// so the passes over [0, m) run on whole vectors, unmasked. The rows go through each pass
/// together (independent chains through the horizontal max, the sum and the division).
/// lse[r] = the row's log-sum-exp (max + log sum), what the backward recomputes them from.
template <class T, int kBytes, int R>
inline void softmax_rows(T* s, int64_t lds, int rows, int64_t i0, int64_t m, T* lse, T* mx_out) {
  using V = Vec<T, kBytes>;
  constexpr int64_t kLanes = kBytes / int64_t(sizeof(T));
  for (int r = 0; r < rows; ++r)
    for (int64_t j = i0 + r + 1; j < m; ++j) s[r * lds + j] = -__builtin_inf();
  V mv[R], sv[R];
  for (int r = 0; r < R; ++r) {
    mv[r] = r < rows ? load<V>(s + r * lds) : V{};
    sv[r] = V{};
  }
  for (int64_t j = kLanes; j < m; j += kLanes)
    for (int r = 0; r < R; ++r)
      if (r < rows) {
        const V x = load<V>(s + r * lds + j);
        mv[r] = x > mv[r] ? x : mv[r];
      }
  T mx[R] = {};
  for (int r = 0; r < R; ++r)
    if (r < rows) {
      mx[r] = hmax(mv[r]);
      mv[r] = splat<V>(mx[r]);
    }
  for (int64_t j = 0; j < m; j += kLanes)
    for (int r = 0; r < R; ++r)
      if (r < rows) {
        const V x = exp_v<T, kBytes>(load<V>(s + r * lds + j) - mv[r]);  // exp(-inf) = 0 above the diagonal
        store(s + r * lds + j, x);
        sv[r] += x;
      }
  for (int r = 0; r < R; ++r)
    if (r < rows) {
      const T sum = hsum(sv[r]);
      lse[r] = sum;  // the log-sum-exp mx + log(sum) once the pair's rows are done (lse_rows)
      mx_out[r] = mx[r];
      sv[r] = splat<V>(T(1) / sum);
    }
  for (int64_t j = 0; j < m; j += kLanes)
    for (int r = 0; r < R; ++r)
      if (r < rows) store(s + r * lds + j, load<V>(s + r * lds + j) * sv[r]);
}

/// lse[i] = mx[i] + log(lse[i]) for i < n: the log-sum-exp of rows whose softmax_rows left
/// their sums in lse and their maxima in mx. 16 f32 lanes at a time at AVX-512
/// (detail::log_avx512, a few ulp from std::log), std::log otherwise.
#if STRATA_ATTN_X86
[[gnu::target("avx512f")]] inline void lse16(float* lse, const float* mx) {
  _mm512_storeu_ps(lse, _mm512_add_ps(_mm512_loadu_ps(mx), detail::log_avx512(_mm512_loadu_ps(lse))));
}
#endif
template <class T, int kBytes>
inline void lse_rows(T* lse, const T* mx, int64_t n) {
  int64_t i = 0;
#if STRATA_ATTN_X86
  if constexpr (std::is_same_v<T, float> && kBytes == 64)
    for (; i + 16 <= n; i += 16) lse16(lse + i, mx + i);
#endif
  for (; i < n; ++i) lse[i] = mx[i] + std::log(lse[i]);
}

/// The rows i0 + r (r < rows <= R) of a block of scores s (row stride lds, columns [0, m))
/// -> their probabilities exp(s - lse[r]) over [0, i0 + r], exactly 0 from there to m.
template <class T, int kBytes, int R>
inline void probs_from_lse_rows(T* s, int64_t lds, int rows, int64_t i0, int64_t m, const T* lse) {
  using V = Vec<T, kBytes>;
  constexpr int64_t kLanes = kBytes / int64_t(sizeof(T));
  for (int r = 0; r < rows; ++r)
    for (int64_t j = i0 + r + 1; j < m; ++j) s[r * lds + j] = -__builtin_inf();
  V lv[R];
  for (int r = 0; r < R; ++r) lv[r] = r < rows ? splat<V>(lse[r]) : V{};
  for (int64_t j = 0; j < m; j += kLanes)
    for (int r = 0; r < R; ++r)
      if (r < rows) store(s + r * lds + j, exp_v<T, kBytes>(load<V>(s + r * lds + j) - lv[r]));
}

/// The rows r < rows <= R of a block of dP (d, row stride ldd, in place) -> scale * dS =
/// scale * P * (dP - sum(dP * P)) over [0, m), m a multiple of the lanes, P read from p
/// (the same row stride, zero above the diagonal). The rows go through each pass together.
template <class T, int kBytes, int R>
inline void softmax_grad_rows(const T* p, T* d, int64_t ldd, int rows, int64_t m, T scale) {
  using V = Vec<T, kBytes>;
  constexpr int64_t kLanes = kBytes / int64_t(sizeof(T));
  V sv[R];
  for (int r = 0; r < R; ++r) sv[r] = V{};
  for (int64_t j = 0; j < m; j += kLanes)
    for (int r = 0; r < R; ++r)
      if (r < rows) sv[r] += load<V>(d + r * ldd + j) * load<V>(p + r * ldd + j);
  const V sc = splat<V>(scale);
  for (int r = 0; r < R; ++r)
    if (r < rows) sv[r] = splat<V>(hsum(sv[r]));
  for (int64_t j = 0; j < m; j += kLanes)
    for (int r = 0; r < R; ++r)
      if (r < rows) store(d + r * ldd + j, sc * load<V>(p + r * ldd + j) * (load<V>(d + r * ldd + j) - sv[r]));
}

}  // namespace strata::cpu::attn

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
