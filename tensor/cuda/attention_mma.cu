// Causal self-attention on tensor cores: FlashAttention-2's algorithm built from
// mma.sync m16n8k16 (16-bit inputs, f32 accumulation), for bf16 and f16 storage and head
// sizes 32, 64 and 128. The same op, layout and saved statistics as the warp-per-row
// kernels of attention.cu, which take every other call (attention_mma_plan.h says which).
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
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <type_traits>

#include <strata/tensor/cuda/attention_mma_plan.h>
#include <strata/tensor/cuda/attention_warp.h>  // Bf16, F16
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>

namespace strata::cuda {
namespace {

using namespace mma;
using attn::Bf16;
using attn::F16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct Dims {
  int64_t B, T, H;
};

// D (+=) A B for one m16n8k16 tile.
template <class S>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<S, Bf16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)d, (void)a, (void)b0, (void)b1;
  __trap();  // the host never picks these kernels below sm_80
#endif
}

// lo and hi rounded to nearest even into one register (lo in the low half).
template <class S>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  if constexpr (std::is_same_v<S, Bf16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

__device__ __forceinline__ uint32_t ld32(const uint16_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// Element offsets: part p (0 q, 1 k, 2 v) of token t, head h in the packed (B, T, 3 H D)
// projection; token t, head h in a (B, T, H D) tensor (y, dy).
template <int D>
__device__ __forceinline__ int64_t qkv_at(const Dims& s, int64_t b, int64_t t, int64_t h, int p) {
  return ((b * s.T + t) * 3 + p) * s.H * D + h * D;
}
template <int D>
__device__ __forceinline__ int64_t y_at(const Dims& s, int64_t b, int64_t t, int64_t h) {
  return (b * s.T + t) * s.H * D + h * D;
}

// Rows [r0, r0 + N) (element offset off(t) each, D elements) into dst[N][D + kPad];
// rows at or past T are zero. 16-byte loads and stores.
template <int D, int N, class Off>
__device__ __forceinline__ void stage_rows(uint16_t* dst, const uint16_t* src, int64_t r0, int64_t T, Off off) {
  constexpr int C8 = D / 8;
  for (int idx = threadIdx.x; idx < N * C8; idx += kBlockThreads) {
    const int r = idx / C8, c = idx % C8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + r < T) v = *reinterpret_cast<const uint4*>(src + off(r0 + r) + 8 * c);
    *reinterpret_cast<uint4*>(dst + r * int(smem_stride(D)) + 8 * c) = v;
  }
}

// The same rows transposed, dst[D][N + kPad]: a thread takes two rows' 8-element chunks
// and stores each column's pair as one 32-bit word (a warp's 32 words in distinct banks).
template <int D, int N, class Off>
__device__ __forceinline__ void stage_cols(uint16_t* dst, const uint16_t* src, int64_t r0, int64_t T, Off off) {
  constexpr int C8 = D / 8, P = N / 2, DS = int(smem_stride(N));
  for (int idx = threadIdx.x; idx < P * C8; idx += kBlockThreads) {
    const int p = idx % P, c = idx / P;
    const int64_t t0 = r0 + 2 * p;
    uint4 x = make_uint4(0, 0, 0, 0), y = make_uint4(0, 0, 0, 0);
    if (t0 < T) x = *reinterpret_cast<const uint4*>(src + off(t0) + 8 * c);
    if (t0 + 1 < T) y = *reinterpret_cast<const uint4*>(src + off(t0 + 1) + 8 * c);
    const uint32_t* a = reinterpret_cast<const uint32_t*>(&x);
    const uint32_t* b = reinterpret_cast<const uint32_t*>(&y);
#pragma unroll
    for (int e = 0; e < 4; ++e) {  // word e holds columns 2e (low) and 2e + 1 (high)
      uint16_t* col = dst + (8 * c + 2 * e) * DS + 2 * p;
      *reinterpret_cast<uint32_t*>(col) = (a[e] & 0xffffu) | (b[e] << 16);
      *reinterpret_cast<uint32_t*>(col + DS) = (a[e] >> 16) | (b[e] & 0xffff0000u);
    }
  }
}

// The A fragment of rows [m0, m0 + 16), columns [k0, k0 + 16) of a row-major tile.
__device__ __forceinline__ void frag_a(const uint16_t* tile, int stride, int m0, int k0, uint32_t (&a)[4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < 4; ++r) a[r] = ld32(tile + (m0 + frag_a_row(lane, r)) * stride + k0 + frag_a_col(lane, r, 0));
}
// The same from global memory: token rows row0 + [0, 16) at off(t), zero at or past T.
template <class Off>
__device__ __forceinline__ void frag_a_global(const uint16_t* src, Off off, int64_t row0, int64_t T, int k0,
                                              uint32_t (&a)[4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t t = row0 + frag_a_row(lane, r);
    a[r] = t < T ? ld32(src + off(t) + k0 + frag_a_col(lane, r, 0)) : 0u;
  }
}
// The B fragment B[k][n] = tile[n0 + n][k0 + k] (k in [0, 16), n in [0, 8)) of a tile whose
// rows are the product's n.
__device__ __forceinline__ void frag_b(const uint16_t* tile, int stride, int n0, int k0, uint32_t& b0, uint32_t& b1) {
  const int lane = threadIdx.x & 31;
  const uint16_t* p = tile + (n0 + frag_b_n(lane)) * stride + k0 + frag_b_k(lane, 0, 0);
  b0 = ld32(p);
  b1 = ld32(p + (frag_b_k(lane, 1, 0) - frag_b_k(lane, 0, 0)));
}
// Register r of the A fragment made of C tiles c[2 kk] and c[2 kk + 1], rounded to S.
template <class S, int N>
__device__ __forceinline__ void frag_a_from_c(const float (&c)[N][4], int kk, uint32_t (&a)[4]) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float(&tile)[4] = c[2 * kk + frag_a_from_c_tile(r)];
    a[r] = pack<S>(tile[frag_a_from_c_elem(r, 0)], tile[frag_a_from_c_elem(r, 1)]);
  }
}

// S[n] = A_rows B^T for NT tiles of 8 columns: A the warp's KK fragments, B rows n*8.. of a tile.
template <class S, int KK, int NT>
__device__ __forceinline__ void scores(const uint32_t (&a)[KK][4], const uint16_t* tile, int stride,
                                       float (&s)[NT][4]) {
#pragma unroll
  for (int n = 0; n < NT; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
      uint32_t b0, b1;
      frag_b(tile, stride, 8 * n, 16 * kk, b0, b1);
      mma16816<S>(s[n], a[kk], b0, b1);
    }
  }
}
// acc[nd] += P V for the warp's 16 rows: P the C tiles p (NT tiles of 8 columns), the
// other operand transposed in a tile of D rows (tile[d][column]).
template <class S, int NT, int ND>
__device__ __forceinline__ void accumulate(const float (&p)[NT][4], const uint16_t* tile_t, int stride,
                                           float (&acc)[ND][4]) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    uint32_t a[4];
    frag_a_from_c<S>(p, kk, a);
#pragma unroll
    for (int nd = 0; nd < ND; ++nd) {
      uint32_t b0, b1;
      frag_b(tile_t, stride, 8 * nd, 16 * kk, b0, b1);
      mma16816<S>(acc[nd], a, b0, b1);
    }
  }
}

// Stores acc * mul (the warp's 16 rows row0 + .., D columns) at dst + off(row), rows < T.
template <class S, int ND, class Off>
__device__ __forceinline__ void store_rows(const float (&acc)[ND][4], const float (&mul)[2], uint16_t* dst, Off off,
                                           int64_t row0, int64_t T) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t t = row0 + frag_c_row(lane, 2 * half);
    if (t >= T) continue;
    uint16_t* row = dst + off(t);
#pragma unroll
    for (int nd = 0; nd < ND; ++nd)
      *reinterpret_cast<uint32_t*>(row + 8 * nd + frag_c_col(lane, 0)) =
          pack<S>(acc[nd][2 * half] * mul[half], acc[nd][2 * half + 1] * mul[half]);
  }
}

template <class S, int D>
__global__ void __launch_bounds__(kBlockThreads) mma_fwd_k(Dims s, float scale_log2, const uint16_t* qkv, uint16_t* y,
                                                      float* lse) {
  extern __shared__ __align__(16) uint16_t smem[];
  constexpr int KS = int(smem_stride(D)), VS = int(smem_stride(kTile)), KK = D / 16, ND = D / 8, NT = kTile / 8;
  uint16_t* ks = smem;             // K rows    [kTile][KS]
  uint16_t* vt = ks + kTile * KS;  // V^T       [D][VS]
  const int64_t bh = blockIdx.x, b = bh / s.H, h = bh % s.H;
  const int64_t qt = int64_t(gridDim.y) - 1 - blockIdx.y;  // the longest rows first
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t r0 = qt * kTile + warp * kRowsPerWarp;
  const auto q_off = [&](int64_t t) { return qkv_at<D>(s, b, t, h, 0); };
  const auto k_off = [&](int64_t t) { return qkv_at<D>(s, b, t, h, 1); };
  const auto v_off = [&](int64_t t) { return qkv_at<D>(s, b, t, h, 2); };

  uint32_t qa[KK][4];
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) frag_a_global(qkv, q_off, r0, s.T, 16 * kk, qa[kk]);
  float o[ND][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g + 8; l this lane's part

  for (int64_t kt = 0; kt <= qt; ++kt) {
    __syncthreads();
    stage_rows<D, kTile>(ks, qkv, kt * kTile, s.T, k_off);
    stage_cols<D, kTile>(vt, qkv, kt * kTile, s.T, v_off);
    __syncthreads();
    float sc[NT][4];
    scores<S>(qa, ks, KS, sc);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = kt * kTile + 8 * n + frag_c_col(lane, e), row = r0 + frag_c_row(lane, e);
        sc[n][e] = key > row ? -INFINITY : sc[n][e] * scale_log2;
        mx[e >> 1] = fmaxf(mx[e >> 1], sc[n][e]);
      }
    // every row sees key kt * kTile (rows of this tile are at or past it): mx is finite
    float corr[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float mn = fmaxf(m[half], quad_max(mx[half]));
      corr[half] = exp2f(m[half] - mn);
      m[half] = mn;
      l[half] *= corr[half];
    }
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[n][e] = exp2f(sc[n][e] - m[e >> 1]);
        l[e >> 1] += sc[n][e];
      }
#pragma unroll
    for (int nd = 0; nd < ND; ++nd)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[nd][e] *= corr[e >> 1];
    accumulate<S>(sc, vt, VS, o);
  }

  float inv[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l[half] = quad_sum(l[half]);
    inv[half] = 1.f / l[half];
  }
  store_rows<S>(o, inv, y, [&](int64_t t) { return y_at<D>(s, b, t, h); }, r0, s.T);
  if ((lane & 3) == 0)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t t = r0 + frag_c_row(lane, 2 * half);
      if (t < s.T) lse[bh * s.T + t] = m[half] * kLn2 + logf(l[half]);
    }
}

// P (probabilities, masked to 0) and dP of a key tile for the warp's rows, from the
// staged K and V rows; lse2 the rows' log-sum-exp in base 2.
template <class S, int KK, int NT>
__device__ __forceinline__ void probs_and_dp(const uint32_t (&qa)[KK][4], const uint32_t (&ga)[KK][4],
                                             const uint16_t* ks, const uint16_t* vs, int stride, int64_t key0,
                                             int64_t row0, float scale_log2, const float (&lse2)[2], float (&p)[NT][4],
                                             float (&dp)[NT][4]) {
  const int lane = threadIdx.x & 31;
  scores<S>(qa, ks, stride, p);
  scores<S>(ga, vs, stride, dp);
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t key = key0 + 8 * n + frag_c_col(lane, e), row = row0 + frag_c_row(lane, e);
      p[n][e] = key > row ? 0.f : exp2f(p[n][e] * scale_log2 - lse2[e >> 1]);
    }
}

template <class S, int D>
__global__ void __launch_bounds__(kBlockThreads) mma_dq_k(Dims s, float scale, float scale_log2, const uint16_t* qkv,
                                                     const uint16_t* dy, const float* lse, float* delta,
                                                     uint16_t* dqkv) {
  extern __shared__ __align__(16) uint16_t smem[];
  constexpr int KS = int(smem_stride(D)), TS = int(smem_stride(kTile)), KK = D / 16, ND = D / 8, NT = kTile / 8;
  uint16_t* ks = smem;             // K rows [kTile][KS]
  uint16_t* vs = ks + kTile * KS;  // V rows [kTile][KS]
  uint16_t* kt_t = vs + kTile * KS;  // K^T  [D][TS]
  const int64_t bh = blockIdx.x, b = bh / s.H, h = bh % s.H;
  const int64_t qt = int64_t(gridDim.y) - 1 - blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t r0 = qt * kTile + warp * kRowsPerWarp;
  const auto q_off = [&](int64_t t) { return qkv_at<D>(s, b, t, h, 0); };
  const auto k_off = [&](int64_t t) { return qkv_at<D>(s, b, t, h, 1); };
  const auto v_off = [&](int64_t t) { return qkv_at<D>(s, b, t, h, 2); };
  const auto y_off = [&](int64_t t) { return y_at<D>(s, b, t, h); };

  uint32_t qa[KK][4], ga[KK][4];
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) {
    frag_a_global(qkv, q_off, r0, s.T, 16 * kk, qa[kk]);
    frag_a_global(dy, y_off, r0, s.T, 16 * kk, ga[kk]);
  }
  float lse2[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t t = r0 + frag_c_row(lane, 2 * half);
    lse2[half] = t < s.T ? lse[bh * s.T + t] * kLog2e : 0.f;
  }

  // D_i = sum_j p_ij dP_ij
  float dd[2] = {0.f, 0.f};
  for (int64_t kt = 0; kt <= qt; ++kt) {
    __syncthreads();
    stage_rows<D, kTile>(ks, qkv, kt * kTile, s.T, k_off);
    stage_rows<D, kTile>(vs, qkv, kt * kTile, s.T, v_off);
    __syncthreads();
    float p[NT][4], dp[NT][4];
    probs_and_dp<S>(qa, ga, ks, vs, KS, kt * kTile, r0, scale_log2, lse2, p, dp);
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dd[e >> 1] += p[n][e] * dp[n][e];
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    dd[half] = quad_sum(dd[half]);
    const int64_t t = r0 + frag_c_row(lane, 2 * half);
    if ((lane & 3) == 0 && t < s.T) delta[bh * s.T + t] = dd[half];
  }

  // dQ = scale sum_j P (dP - D) K
  float dq[ND][4] = {};
  for (int64_t kt = 0; kt <= qt; ++kt) {
    __syncthreads();
    stage_rows<D, kTile>(ks, qkv, kt * kTile, s.T, k_off);
    stage_rows<D, kTile>(vs, qkv, kt * kTile, s.T, v_off);
    stage_cols<D, kTile>(kt_t, qkv, kt * kTile, s.T, k_off);
    __syncthreads();
    float p[NT][4], dp[NT][4];
    probs_and_dp<S>(qa, ga, ks, vs, KS, kt * kTile, r0, scale_log2, lse2, p, dp);
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[n][e] = p[n][e] * (dp[n][e] - dd[e >> 1]);
    accumulate<S>(dp, kt_t, TS, dq);
  }
  const float mul[2] = {scale, scale};
  store_rows<S>(dq, mul, dqkv, q_off, r0, s.T);
}

template <class S, int D>
__global__ void __launch_bounds__(kBlockThreads) mma_dkv_k(Dims s, float scale, float scale_log2, const uint16_t* qkv,
                                                      const uint16_t* dy, const float* lse, const float* delta,
                                                      uint16_t* dqkv) {
  extern __shared__ __align__(16) uint16_t smem[];
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
  const int64_t bh = blockIdx.x, b = bh / s.H, h = bh % s.H;
  const int64_t kt = blockIdx.y;  // the first key tiles see the most rows
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t j0 = kt * kTile + warp * kRowsPerWarp;  // the warp's first key
  const auto q_off = [&](int64_t t) { return qkv_at<D>(s, b, t, h, 0); };
  const auto k_off = [&](int64_t t) { return qkv_at<D>(s, b, t, h, 1); };
  const auto v_off = [&](int64_t t) { return qkv_at<D>(s, b, t, h, 2); };
  const auto y_off = [&](int64_t t) { return y_at<D>(s, b, t, h); };

  stage_rows<D, kTile>(kown, qkv, kt * kTile, s.T, k_off);
  stage_rows<D, kTile>(vown, qkv, kt * kTile, s.T, v_off);
  float dk[ND][4] = {}, dv[ND][4] = {};
  for (int64_t q0 = kt * kTile; q0 < s.T; q0 += Q) {
    __syncthreads();
    stage_rows<D, Q>(qs, qkv, q0, s.T, q_off);
    stage_rows<D, Q>(gs, dy, q0, s.T, y_off);
    stage_cols<D, Q>(qt_t, qkv, q0, s.T, q_off);
    stage_cols<D, Q>(gt_t, dy, q0, s.T, y_off);
    for (int i = threadIdx.x; i < Q; i += kBlockThreads) {
      const int64_t t = q0 + i;
      lse_s[i] = t < s.T ? lse[bh * s.T + t] * kLog2e : INFINITY;  // rows past T: p = 0
      del_s[i] = t < s.T ? delta[bh * s.T + t] : 0.f;
    }
    __syncthreads();
    float pt[NQ][4] = {}, dst[NQ][4] = {};  // P^T and dP^T, then dS^T: keys x queries
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
      uint32_t ka[4], va[4];
      frag_a(kown, KS, warp * kRowsPerWarp, 16 * kk, ka);
      frag_a(vown, KS, warp * kRowsPerWarp, 16 * kk, va);
#pragma unroll
      for (int n = 0; n < NQ; ++n) {
        uint32_t b0, b1;
        frag_b(qs, KS, 8 * n, 16 * kk, b0, b1);
        mma16816<S>(pt[n], ka, b0, b1);
        frag_b(gs, KS, 8 * n, 16 * kk, b0, b1);
        mma16816<S>(dst[n], va, b0, b1);
      }
    }
#pragma unroll
    for (int n = 0; n < NQ; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = 8 * n + frag_c_col(lane, e);
        const int64_t key = j0 + frag_c_row(lane, e);
        const float p = q0 + qi < key ? 0.f : exp2f(pt[n][e] * scale_log2 - lse_s[qi]);
        pt[n][e] = p;
        dst[n][e] = p * (dst[n][e] - del_s[qi]);
      }
    accumulate<S>(pt, gt_t, QS, dv);
    accumulate<S>(dst, qt_t, QS, dk);
  }
  const float one[2] = {1.f, 1.f}, mul[2] = {scale, scale};
  store_rows<S>(dk, mul, dqkv, k_off, j0, s.T);
  store_rows<S>(dv, one, dqkv, v_off, j0, s.T);
}

// Launches kernel k on grid (B H, tiles) with `smem` bytes of dynamic shared memory
// (opting in past the default 48 KiB).
template <class K>
void launch(K k, const Dims& s, size_t smem, cudaStream_t stream, auto... args) {
  if (smem > size_t(48) * 1024)
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                      "causal_attention");
  const dim3 grid(unsigned(s.B * s.H), unsigned(tiles(s.T)));
  k<<<grid, kBlockThreads, smem, stream>>>(s, args...);
}

// Calls f.template operator()<S, D>() for the call's storage type and head size.
template <class F>
void dispatch_mma(DType dt, int64_t hd, F&& f) {
  auto by_hd = [&]<class S>() {
    switch (hd) {
      case 32: return f.template operator()<S, 32>();
      case 64: return f.template operator()<S, 64>();
      default: return f.template operator()<S, 128>();
    }
  };
  if (dt == DType::bf16) by_hd.template operator()<Bf16>();
  else by_hd.template operator()<F16>();
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0; }

bool takes(const Tensor& qkv, int64_t head_dim, bool aligned) {
  const AttentionChoice c = choose_attention(qkv.dtype(), head_dim, aligned, std::getenv("STRATA_CUDA_ATTENTION"));
  STRATA_CHECK(!c.bad_setting, "[causal_attention] ", c.reason);
  if (!c.tensor_cores) return false;
  int major = 0;
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, qkv.device().index),
                    "causal_attention");
  return major >= 8;
}

}  // namespace

bool mma_causal_attention(const Tensor& qkv, Tensor& y, Tensor& lse, int64_t head_dim) {
  if (!takes(qkv, head_dim, aligned16(qkv) && aligned16(y))) return false;
  const Dims s{qkv.size(0), qkv.size(1), qkv.size(2) / (3 * head_dim)};
  if (s.B * s.H * s.T == 0) return true;
  OpContext ctx(y);
  const float scale_log2 = float(kLog2e / std::sqrt(double(head_dim)));
  dispatch_mma(qkv.dtype(), head_dim, [&]<class S, int D>() {
    launch(mma_fwd_k<S, D>, s, forward_smem_bytes(D), ctx.stream, scale_log2,
           static_cast<const uint16_t*>(qkv.raw_data()), static_cast<uint16_t*>(y.raw_data()),
           static_cast<float*>(lse.raw_data()));
  });
  STRATA_CUDA_CHECK_LAUNCH("causal_attention");
  return true;
}

bool mma_causal_attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& lse, Tensor& dqkv,
                                   int64_t head_dim) {
  if (!takes(qkv, head_dim, aligned16(qkv) && aligned16(dy) && aligned16(dqkv))) return false;
  const Dims s{qkv.size(0), qkv.size(1), qkv.size(2) / (3 * head_dim)};
  if (s.B * s.H * s.T == 0) return true;
  OpContext ctx(dqkv);
  const float scale = float(1.0 / std::sqrt(double(head_dim))), scale_log2 = scale * kLog2e;
  Tensor delta = Tensor::empty(lse.shape(), DType::f32, lse.device());
  const auto* pq = static_cast<const uint16_t*>(qkv.raw_data());
  const auto* pg = static_cast<const uint16_t*>(dy.raw_data());
  const auto* pl = static_cast<const float*>(lse.raw_data());
  auto* pd = static_cast<float*>(delta.raw_data());
  auto* out = static_cast<uint16_t*>(dqkv.raw_data());
  dispatch_mma(qkv.dtype(), head_dim, [&]<class S, int D>() {
    launch(mma_dq_k<S, D>, s, dq_smem_bytes(D), ctx.stream, scale, scale_log2, pq, pg, pl, pd, out);
    STRATA_CUDA_CHECK_LAUNCH("causal_attention_backward");
    launch(mma_dkv_k<S, D>, s, dkv_smem_bytes(D), ctx.stream, scale, scale_log2, pq, pg, pl,
           static_cast<const float*>(pd), out);
  });
  STRATA_CUDA_CHECK_LAUNCH("causal_attention_backward");
  return true;
}

}  // namespace strata::cuda
