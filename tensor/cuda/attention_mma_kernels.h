// The blocks of the tensor-core causal attention (attention_mma.cu): one function per
// kernel, run by each of a block's kBlockThreads threads, written against a small
// SIMT interface P so that the very same code compiles for the GPU (nvcc: P is the CUDA
// thread, tensor/cuda/attention_mma.cu) and for a host emulation of a block's threads
// (tests/cuda/host/simt_emulator.h), which checks it on a machine without a GPU.
//
// P provides, for the calling thread of a block:
//   P::tid()                thread index in the block, 0 .. kBlockThreads - 1
//   P::sync()               __syncthreads()
//   P::shfl_xor(v, mask)    __shfl_xor_sync over the full warp
//   P::template mma<DT>(d, a, b0, b1)   d += A B, mma.sync m16n8k16 (A, B 16-bit DT, d f32)
//   P::template pack<DT>(lo, hi)        two floats rounded to DT, lo in the low half
//
// Tiles of 64 query rows or 64 keys a block, four warps of 16 rows each. A warp keeps its
// rows' operands as A fragments in registers; the other side of each product is staged in
// shared memory, row-major where its rows are the product's n (K for S = Q K^T) and
// transposed where they are its k (V for O = P V), so that every B fragment is two 32-bit
// loads from distinct banks. The scores a warp computes as C fragments go into the next
// product as A fragments without leaving its registers (attention_mma_plan.h).
//
//   forward  (a block per 64 query rows): S = Q K^T tile by tile up to the diagonal, the
//            online softmax in base 2 (the scale folded into log2 e), O += P V; the rows'
//            log-sum-exp (natural log, as the CPU kernel) saved.
//   dq       (a block per 64 query rows): a first sweep over the key tiles gives
//            D_i = sum_j p_ij dP_ij (dP = dO V^T), stored for dk/dv; a second gives
//            dS = P (dP - D) and dQ = scale dS K.
//   dk, dv   (a block per 64 keys): over the query tiles from the diagonal on, S^T = K Q^T
//            and dP^T = V dO^T, dV += P^T dO and dK += scale dS^T Q.
// Every sum runs in a fixed order (no atomics): the results are deterministic. P and dS
// are rounded to the storage type before their products, as in FlashAttention-2; the
// softmax, the statistics and every accumulator are f32.
#pragma once
#include <cmath>
#include <cstdint>

#include <strata/core/dtype.h>
#include <strata/tensor/cuda/attention_mma_plan.h>
#include <strata/tensor/cuda/hd.h>  // STRATA_UNROLL

#if defined(__CUDACC__)
#define STRATA_DEV __device__ __forceinline__
#else
#define STRATA_DEV inline
#endif

namespace strata::cuda::mma {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

/// One call's operands: q|k|v packed (B, T, 3 H D), dy and the output y (B, T, H D), the
/// rows' log-sum-exp and D (B, H, T) in f32; `out` is y (forward) or d(q|k|v) (backward).
struct MmaArgs {
  int64_t B = 0, T = 0, H = 0;
  float scale = 0, scale_log2 = 0;  // 1/sqrt(D), and times log2 e
  const uint16_t* qkv = nullptr;
  const uint16_t* dy = nullptr;
  uint16_t* out = nullptr;
  float* lse = nullptr;
  float* delta = nullptr;
};

/// 16 bytes, for the staging loads and stores.
struct alignas(16) U4 {
  uint32_t w[4];
};

STRATA_DEV uint32_t ld32(const uint16_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

template <class P>
STRATA_DEV float quad_sum(float v) {
  v += P::shfl_xor(v, 1);
  return v + P::shfl_xor(v, 2);
}
template <class P>
STRATA_DEV float quad_max(float v) {
  v = fmaxf(v, P::shfl_xor(v, 1));
  return fmaxf(v, P::shfl_xor(v, 2));
}

// Element offsets: part p (0 q, 1 k, 2 v) of token t, head h in the packed projection;
// token t, head h in a (B, T, H D) tensor (y, dy).
template <int D>
STRATA_DEV int64_t qkv_at(const MmaArgs& s, int64_t b, int64_t t, int64_t h, int p) {
  return ((b * s.T + t) * 3 + p) * s.H * D + h * D;
}
template <int D>
STRATA_DEV int64_t y_at(const MmaArgs& s, int64_t b, int64_t t, int64_t h) {
  return (b * s.T + t) * s.H * D + h * D;
}

// The element offset of token t's row of head h of sequence b: part p (0 q, 1 k, 2 v) of
// the packed projection, or (p = 3) of y or dy.
template <int D>
struct HeadRows {
  const MmaArgs* s;
  int64_t b, h;
  int p;
  STRATA_DEV int64_t operator()(int64_t t) const { return p < 3 ? qkv_at<D>(*s, b, t, h, p) : y_at<D>(*s, b, t, h); }
};

// Rows [r0, r0 + N) (element offset off(t) each, D elements) into dst[N][D + kPad];
// rows at or past T are zero. 16-byte loads and stores.
template <class P, int D, int N, class Off>
STRATA_DEV void stage_rows(uint16_t* dst, const uint16_t* src, int64_t r0, int64_t T, Off off) {
  constexpr int C8 = D / 8;
  for (int idx = P::tid(); idx < N * C8; idx += kBlockThreads) {
    const int r = idx / C8, c = idx % C8;
    U4 v{{0, 0, 0, 0}};
    if (r0 + r < T) v = *reinterpret_cast<const U4*>(src + off(r0 + r) + 8 * c);
    *reinterpret_cast<U4*>(dst + r * int(smem_stride(D)) + 8 * c) = v;
  }
}

// The same rows transposed, dst[D][N + kPad]: a thread takes two rows' 8-element chunks
// and stores each column's pair as one 32-bit word (a warp's 32 words in distinct banks).
template <class P, int D, int N, class Off>
STRATA_DEV void stage_cols(uint16_t* dst, const uint16_t* src, int64_t r0, int64_t T, Off off) {
  constexpr int C8 = D / 8, NP = N / 2, DS = int(smem_stride(N));
  for (int idx = P::tid(); idx < NP * C8; idx += kBlockThreads) {
    const int p = idx % NP, c = idx / NP;
    const int64_t t0 = r0 + 2 * p;
    U4 x{{0, 0, 0, 0}}, y{{0, 0, 0, 0}};
    if (t0 < T) x = *reinterpret_cast<const U4*>(src + off(t0) + 8 * c);
    if (t0 + 1 < T) y = *reinterpret_cast<const U4*>(src + off(t0 + 1) + 8 * c);
    STRATA_UNROLL
    for (int e = 0; e < 4; ++e) {  // word e holds columns 2e (low) and 2e + 1 (high)
      uint16_t* col = dst + (8 * c + 2 * e) * DS + 2 * p;
      *reinterpret_cast<uint32_t*>(col) = (x.w[e] & 0xffffu) | (y.w[e] << 16);
      *reinterpret_cast<uint32_t*>(col + DS) = (x.w[e] >> 16) | (y.w[e] & 0xffff0000u);
    }
  }
}

// The A fragment of rows [m0, m0 + 16), columns [k0, k0 + 16) of a row-major tile.
template <class P>
STRATA_DEV void frag_a_tile(const uint16_t* tile, int stride, int m0, int k0, uint32_t (&a)[4]) {
  const int lane = P::tid() & 31;
  STRATA_UNROLL
  for (int r = 0; r < 4; ++r) a[r] = ld32(tile + (m0 + frag_a_row(lane, r)) * stride + k0 + frag_a_col(lane, r, 0));
}
// The same from global memory: token rows row0 + [0, 16) at off(t), zero at or past T.
template <class P, class Off>
STRATA_DEV void frag_a_global(const uint16_t* src, Off off, int64_t row0, int64_t T, int k0, uint32_t (&a)[4]) {
  const int lane = P::tid() & 31;
  STRATA_UNROLL
  for (int r = 0; r < 4; ++r) {
    const int64_t t = row0 + frag_a_row(lane, r);
    a[r] = t < T ? ld32(src + off(t) + k0 + frag_a_col(lane, r, 0)) : 0u;
  }
}
// The B fragment B[k][n] = tile[n0 + n][k0 + k] (k in [0, 16), n in [0, 8)) of a tile whose
// rows are the product's n.
template <class P>
STRATA_DEV void frag_b_tile(const uint16_t* tile, int stride, int n0, int k0, uint32_t& b0, uint32_t& b1) {
  const int lane = P::tid() & 31;
  const uint16_t* p = tile + (n0 + frag_b_n(lane)) * stride + k0;
  b0 = ld32(p + frag_b_k(lane, 0, 0));
  b1 = ld32(p + frag_b_k(lane, 1, 0));
}
// The A fragment made of C tiles c[2 kk] and c[2 kk + 1], rounded to DT.
template <class P, DType DT, int N>
STRATA_DEV void frag_a_from_c(const float (&c)[N][4], int kk, uint32_t (&a)[4]) {
  STRATA_UNROLL
  for (int r = 0; r < 4; ++r) {
    const float(&tile)[4] = c[2 * kk + frag_a_from_c_tile(r)];
    a[r] = P::template pack<DT>(tile[frag_a_from_c_elem(r, 0)], tile[frag_a_from_c_elem(r, 1)]);
  }
}

// s[n] = A B for NT tiles of 8 columns: A the warp's KK fragments, B rows 8 n .. of a tile.
template <class P, DType DT, int KK, int NT>
STRATA_DEV void scores(const uint32_t (&a)[KK][4], const uint16_t* tile, int stride, float (&s)[NT][4]) {
  STRATA_UNROLL
  for (int n = 0; n < NT; ++n) {
    STRATA_UNROLL
    for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
    STRATA_UNROLL
    for (int kk = 0; kk < KK; ++kk) {
      uint32_t b0, b1;
      frag_b_tile<P>(tile, stride, 8 * n, 16 * kk, b0, b1);
      P::template mma<DT>(s[n], a[kk], b0, b1);
    }
  }
}
// acc[nd] += P V for the warp's 16 rows: P the C tiles p (NT tiles of 8 columns), the other
// operand transposed in a tile of D rows (tile[d][column]).
template <class P, DType DT, int NT, int ND>
STRATA_DEV void accumulate(const float (&p)[NT][4], const uint16_t* tile_t, int stride, float (&acc)[ND][4]) {
  STRATA_UNROLL
  for (int kk = 0; kk < NT / 2; ++kk) {
    uint32_t a[4];
    frag_a_from_c<P, DT>(p, kk, a);
    STRATA_UNROLL
    for (int nd = 0; nd < ND; ++nd) {
      uint32_t b0, b1;
      frag_b_tile<P>(tile_t, stride, 8 * nd, 16 * kk, b0, b1);
      P::template mma<DT>(acc[nd], a, b0, b1);
    }
  }
}

// Stores acc * mul (the warp's 16 rows row0 + .., 8 ND columns) at dst + off(row), rows < T.
template <class P, DType DT, int ND, class Off>
STRATA_DEV void store_rows(const float (&acc)[ND][4], const float (&mul)[2], uint16_t* dst, Off off, int64_t row0,
                           int64_t T) {
  const int lane = P::tid() & 31;
  STRATA_UNROLL
  for (int half = 0; half < 2; ++half) {
    const int64_t t = row0 + frag_c_row(lane, 2 * half);
    if (t >= T) continue;
    uint16_t* row = dst + off(t);
    STRATA_UNROLL
    for (int nd = 0; nd < ND; ++nd)
      *reinterpret_cast<uint32_t*>(row + 8 * nd + frag_c_col(lane, 0)) =
          P::template pack<DT>(acc[nd][2 * half] * mul[half], acc[nd][2 * half + 1] * mul[half]);
  }
}

/// The forward of query tile `qt` of (b, h) = bh: y and the rows' log-sum-exp.
/// smem: forward_smem_bytes(D).
template <class P, DType DT, int D>
STRATA_DEV void forward_block(const MmaArgs& s, int64_t bh, int64_t qt, uint16_t* smem) {
  constexpr int KS = int(smem_stride(D)), VS = int(smem_stride(kTile)), KK = D / 16, ND = D / 8, NT = kTile / 8;
  uint16_t* ks = smem;             // K rows [kTile][KS]
  uint16_t* vt = ks + kTile * KS;  // V^T    [D][VS]
  const int64_t b = bh / s.H, h = bh % s.H;
  const int warp = P::tid() / 32, lane = P::tid() & 31;
  const int64_t r0 = qt * kTile + warp * kRowsPerWarp;
  const HeadRows<D> q_off{&s, b, h, 0}, k_off{&s, b, h, 1}, v_off{&s, b, h, 2};

  uint32_t qa[KK][4];
  STRATA_UNROLL
  for (int kk = 0; kk < KK; ++kk) frag_a_global<P>(s.qkv, q_off, r0, s.T, 16 * kk, qa[kk]);
  float o[ND][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g + 8; l this lane's part

  for (int64_t kt = 0; kt <= qt; ++kt) {
    P::sync();
    stage_rows<P, D, kTile>(ks, s.qkv, kt * kTile, s.T, k_off);
    stage_cols<P, D, kTile>(vt, s.qkv, kt * kTile, s.T, v_off);
    P::sync();
    float sc[NT][4];
    scores<P, DT>(qa, ks, KS, sc);
    float mx[2] = {-INFINITY, -INFINITY};
    STRATA_UNROLL
    for (int n = 0; n < NT; ++n) {
      STRATA_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int64_t key = kt * kTile + 8 * n + frag_c_col(lane, e), row = r0 + frag_c_row(lane, e);
        sc[n][e] = key > row ? -INFINITY : sc[n][e] * s.scale_log2;
        mx[e >> 1] = fmaxf(mx[e >> 1], sc[n][e]);
      }
    }
    // every row of this tile sees key kt * kTile: the row maxima are finite
    float corr[2];
    STRATA_UNROLL
    for (int half = 0; half < 2; ++half) {
      const float mn = fmaxf(m[half], quad_max<P>(mx[half]));
      corr[half] = exp2f(m[half] - mn);
      m[half] = mn;
      l[half] *= corr[half];
    }
    STRATA_UNROLL
    for (int n = 0; n < NT; ++n) {
      STRATA_UNROLL
      for (int e = 0; e < 4; ++e) {
        sc[n][e] = exp2f(sc[n][e] - m[e >> 1]);
        l[e >> 1] += sc[n][e];
      }
    }
    STRATA_UNROLL
    for (int nd = 0; nd < ND; ++nd) {
      STRATA_UNROLL
      for (int e = 0; e < 4; ++e) o[nd][e] *= corr[e >> 1];
    }
    accumulate<P, DT>(sc, vt, VS, o);
  }

  float inv[2];
  STRATA_UNROLL
  for (int half = 0; half < 2; ++half) {
    l[half] = quad_sum<P>(l[half]);
    inv[half] = 1.f / l[half];
  }
  store_rows<P, DT>(o, inv, s.out, HeadRows<D>{&s, b, h, 3}, r0, s.T);
  if ((lane & 3) == 0) {
    STRATA_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int64_t t = r0 + frag_c_row(lane, 2 * half);
      if (t < s.T) s.lse[bh * s.T + t] = m[half] * kLn2 + logf(l[half]);
    }
  }
}

// P (probabilities, masked to 0) and dP of a key tile for the warp's rows, from the staged
// K and V rows; lse2 the rows' log-sum-exp in base 2.
template <class P, DType DT, int KK, int NT>
STRATA_DEV void probs_and_dp(const uint32_t (&qa)[KK][4], const uint32_t (&ga)[KK][4], const uint16_t* ks,
                             const uint16_t* vs, int stride, int64_t key0, int64_t row0, float scale_log2,
                             const float (&lse2)[2], float (&p)[NT][4], float (&dp)[NT][4]) {
  const int lane = P::tid() & 31;
  scores<P, DT>(qa, ks, stride, p);
  scores<P, DT>(ga, vs, stride, dp);
  STRATA_UNROLL
  for (int n = 0; n < NT; ++n) {
    STRATA_UNROLL
    for (int e = 0; e < 4; ++e) {
      const int64_t key = key0 + 8 * n + frag_c_col(lane, e), row = row0 + frag_c_row(lane, e);
      p[n][e] = key > row ? 0.f : exp2f(p[n][e] * scale_log2 - lse2[e >> 1]);
    }
  }
}

/// dq of query tile `qt`, and the rows' D for dkv_block. smem: dq_smem_bytes(D).
template <class P, DType DT, int D>
STRATA_DEV void dq_block(const MmaArgs& s, int64_t bh, int64_t qt, uint16_t* smem) {
  constexpr int KS = int(smem_stride(D)), TS = int(smem_stride(kTile)), KK = D / 16, ND = D / 8, NT = kTile / 8;
  uint16_t* ks = smem;               // K rows [kTile][KS]
  uint16_t* vs = ks + kTile * KS;    // V rows [kTile][KS]
  uint16_t* kt_t = vs + kTile * KS;  // K^T    [D][TS]
  const int64_t b = bh / s.H, h = bh % s.H;
  const int warp = P::tid() / 32, lane = P::tid() & 31;
  const int64_t r0 = qt * kTile + warp * kRowsPerWarp;
  const HeadRows<D> q_off{&s, b, h, 0}, k_off{&s, b, h, 1}, v_off{&s, b, h, 2}, y_off{&s, b, h, 3};

  uint32_t qa[KK][4], ga[KK][4];
  STRATA_UNROLL
  for (int kk = 0; kk < KK; ++kk) {
    frag_a_global<P>(s.qkv, q_off, r0, s.T, 16 * kk, qa[kk]);
    frag_a_global<P>(s.dy, y_off, r0, s.T, 16 * kk, ga[kk]);
  }
  float lse2[2];
  STRATA_UNROLL
  for (int half = 0; half < 2; ++half) {
    const int64_t t = r0 + frag_c_row(lane, 2 * half);
    lse2[half] = t < s.T ? s.lse[bh * s.T + t] * kLog2e : 0.f;
  }

  // Key tile kt staged (K and V rows, and K^T for dQ), and the warp's P and dP of it.
  float p[NT][4], dp[NT][4];
  const auto key_tile = [&](int64_t kt, bool k_transposed) {
    P::sync();
    stage_rows<P, D, kTile>(ks, s.qkv, kt * kTile, s.T, k_off);
    stage_rows<P, D, kTile>(vs, s.qkv, kt * kTile, s.T, v_off);
    if (k_transposed) stage_cols<P, D, kTile>(kt_t, s.qkv, kt * kTile, s.T, k_off);
    P::sync();
    probs_and_dp<P, DT>(qa, ga, ks, vs, KS, kt * kTile, r0, s.scale_log2, lse2, p, dp);
  };

  // D_i = sum_j p_ij dP_ij
  float dd[2] = {0.f, 0.f};
  for (int64_t kt = 0; kt <= qt; ++kt) {
    key_tile(kt, false);
    STRATA_UNROLL
    for (int n = 0; n < NT; ++n) {
      STRATA_UNROLL
      for (int e = 0; e < 4; ++e) dd[e >> 1] += p[n][e] * dp[n][e];
    }
  }
  STRATA_UNROLL
  for (int half = 0; half < 2; ++half) {
    dd[half] = quad_sum<P>(dd[half]);
    const int64_t t = r0 + frag_c_row(lane, 2 * half);
    if ((lane & 3) == 0 && t < s.T) s.delta[bh * s.T + t] = dd[half];
  }

  // dQ = scale sum_j P (dP - D) K
  float dq[ND][4] = {};
  for (int64_t kt = 0; kt <= qt; ++kt) {
    key_tile(kt, true);
    STRATA_UNROLL
    for (int n = 0; n < NT; ++n) {
      STRATA_UNROLL
      for (int e = 0; e < 4; ++e) dp[n][e] = p[n][e] * (dp[n][e] - dd[e >> 1]);
    }
    accumulate<P, DT>(dp, kt_t, TS, dq);
  }
  const float mul[2] = {s.scale, s.scale};
  store_rows<P, DT>(dq, mul, s.out, q_off, r0, s.T);
}

/// dk and dv of key tile `kt` (after dq_block has stored every row's D). smem:
/// dkv_smem_bytes(D).
template <class P, DType DT, int D>
STRATA_DEV void dkv_block(const MmaArgs& s, int64_t bh, int64_t kt, uint16_t* smem) {
  constexpr int Q = dkv_query_tile(D), KS = int(smem_stride(D)), QS = int(smem_stride(Q)), KK = D / 16,
                ND = D / 8, NQ = Q / 8;
  uint16_t* kown = smem;               // the block's K rows [kTile][KS]
  uint16_t* vown = kown + kTile * KS;  // its V rows        [kTile][KS]
  uint16_t* qs = vown + kTile * KS;    // Q rows            [Q][KS]
  uint16_t* gs = qs + Q * KS;          // dO rows           [Q][KS]
  uint16_t* qt_t = gs + Q * KS;        // Q^T               [D][QS]
  uint16_t* gt_t = qt_t + D * QS;      // dO^T              [D][QS]
  float* lse_s = reinterpret_cast<float*>(gt_t + D * QS);  // [Q], base 2
  float* del_s = lse_s + Q;                                // [Q]
  const int64_t b = bh / s.H, h = bh % s.H;
  const int warp = P::tid() / 32, lane = P::tid() & 31;
  const int64_t j0 = kt * kTile + warp * kRowsPerWarp;  // the warp's first key
  const HeadRows<D> q_off{&s, b, h, 0}, k_off{&s, b, h, 1}, v_off{&s, b, h, 2}, y_off{&s, b, h, 3};

  stage_rows<P, D, kTile>(kown, s.qkv, kt * kTile, s.T, k_off);
  stage_rows<P, D, kTile>(vown, s.qkv, kt * kTile, s.T, v_off);
  float dk[ND][4] = {}, dv[ND][4] = {};
  for (int64_t q0 = kt * kTile; q0 < s.T; q0 += Q) {
    P::sync();
    stage_rows<P, D, Q>(qs, s.qkv, q0, s.T, q_off);
    stage_rows<P, D, Q>(gs, s.dy, q0, s.T, y_off);
    stage_cols<P, D, Q>(qt_t, s.qkv, q0, s.T, q_off);
    stage_cols<P, D, Q>(gt_t, s.dy, q0, s.T, y_off);
    for (int i = P::tid(); i < Q; i += kBlockThreads) {
      const int64_t t = q0 + i;
      lse_s[i] = t < s.T ? s.lse[bh * s.T + t] * kLog2e : INFINITY;  // rows past T: p = 0
      del_s[i] = t < s.T ? s.delta[bh * s.T + t] : 0.f;
    }
    P::sync();
    float pt[NQ][4] = {}, dst[NQ][4] = {};  // P^T and dP^T, then dS^T: keys x queries
    STRATA_UNROLL
    for (int kk = 0; kk < KK; ++kk) {
      uint32_t ka[4], va[4];
      frag_a_tile<P>(kown, KS, warp * kRowsPerWarp, 16 * kk, ka);
      frag_a_tile<P>(vown, KS, warp * kRowsPerWarp, 16 * kk, va);
      STRATA_UNROLL
      for (int n = 0; n < NQ; ++n) {
        uint32_t b0, b1;
        frag_b_tile<P>(qs, KS, 8 * n, 16 * kk, b0, b1);
        P::template mma<DT>(pt[n], ka, b0, b1);
        frag_b_tile<P>(gs, KS, 8 * n, 16 * kk, b0, b1);
        P::template mma<DT>(dst[n], va, b0, b1);
      }
    }
    STRATA_UNROLL
    for (int n = 0; n < NQ; ++n) {
      STRATA_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int qi = 8 * n + frag_c_col(lane, e);
        const int64_t key = j0 + frag_c_row(lane, e);
        const float p = q0 + qi < key ? 0.f : exp2f(pt[n][e] * s.scale_log2 - lse_s[qi]);
        pt[n][e] = p;
        dst[n][e] = p * (dst[n][e] - del_s[qi]);
      }
    }
    accumulate<P, DT>(pt, gt_t, QS, dv);
    accumulate<P, DT>(dst, qt_t, QS, dk);
  }
  const float one[2] = {1.f, 1.f}, mul[2] = {s.scale, s.scale};
  store_rows<P, DT>(dk, mul, s.out, k_off, j0, s.T);
  store_rows<P, DT>(dv, one, s.out, v_off, j0, s.T);
}

}  // namespace strata::cuda::mma
