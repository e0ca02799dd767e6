// Fused causal self-attention on the CPU: one (batch, head) pair at a time, the pairs split
// over the threads, each pair computed in L1/L2 by register tiles (attention_tile.h) over
// small packed copies of its q, k, v (no BLAS: at T x T x hd = 64 x 64 x 32 a cblas call
// spent more time on its own setup and on cold strided operands than on the arithmetic).
// Per pair, with S = scale * q k^T and P = causal_softmax(S), scale = 1/sqrt(hd):
//   forward:  P = softmax_{j<=i}(scale * q k^T),  y = P v
//   backward: dP = dy v^T,  dS = P * (dP - rowsum(dP * P)),
//             dq = scale * dS k,  dk = scale * dS^T q,  dv = P^T dy
// Rows are taken R at a time: the R rows of scores are computed (only the column vectors
// that reach the diagonal; the blocks wholly above it are skipped), soft-maxed and
// multiplied into y while they sit in L1; only each row's log-sum-exp is stored. Backward
// recomputes the row block's scores and P = exp(S - lse), then dP -> dS -> dq, keeps dS
// and P in a padded (T, Tp) buffer, and then forms dk and dv column block by column block
// (rows i >= j only). (Storing P instead costs more than recomputing it: the backward's
// reads of the (B, H, T, T) tensor stall on memory however far ahead they are prefetched.) The SIMD width follows cpu::simd_level() (16 f32 lanes
// at x86-64-v4, 8 at v3, 4 at baseline): each level has its own entry functions, compiled
// for it as isa_dispatch.h compiles the other loops, and its own non-inlined tile functions.
#include <strata/tensor/cpu/attention.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include <strata/core/threads.h>
#include <strata/tensor/cpu/attention_tile.h>
#include <strata/tensor/cpu/blocks.h>
#include <strata/tensor/cpu/rotary.h>
#include <strata/tensor/dispatch.h>

// The vector helpers of attention_tile.h are instantiated at the end of this file, outside
// that header's -Wpsabi silence: the same note, for the same reason (always inlined into
// functions built for the vectors' ISA).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace strata::cpu {
namespace {

// H query heads, Hkv key/value heads (query head h reads key/value head h / (H/Hkv)).
struct Dims {
  int64_t B, T, H, Hkv, hd, C, W;  // C = H*hd (y width), W = (H + 2 Hkv)*hd (qkv width)
  int64_t rep() const { return H / Hkv; }
  // Offsets in a (B, T, W) q|k|v of sequence b's query head h and key/value head g.
  int64_t q_at(int64_t b, int64_t h) const { return b * T * W + h * hd; }
  int64_t k_at(int64_t b, int64_t g) const { return b * T * W + (H + g) * hd; }
  int64_t v_at(int64_t b, int64_t g) const { return b * T * W + (H + Hkv + g) * hd; }
};

Dims dims_of(const Tensor& qkv, int64_t head_dim, int64_t kv_heads) {
  const int64_t W = qkv.size(2), heads = W / head_dim;  // H + 2 Hkv
  const int64_t Hkv = kv_heads > 0 ? kv_heads : heads / 3, H = heads - 2 * Hkv;
  return {qkv.size(0), qkv.size(1), H, Hkv, head_dim, H * head_dim, W};
}

// The packed buffers' rows are padded to a whole number of 64-byte vectors (the widest
// level's), so every level reads whole vectors from them, aligned.
constexpr int64_t kAlign = 64;
template <class T>
constexpr int64_t padded(int64_t n) {
  constexpr int64_t l = kAlign / int64_t(sizeof(T));
  return (n + l - 1) / l * l;
}

template <class T>
struct TileArgs {
  int64_t l0, l1;
  const T* a;
  int64_t ars, als;
  const T* b;
  int64_t ldb;
  T* out;
  int64_t ldo, ncols;
  bool add = false;  // out += the product
};

// The tiles of each level, one non-inlined function per (dtype, rows, vectors), compiled
// for that level. kR x kNV accumulators: 16 of the 32 zmm registers at v4, 8 of the 16
// ymm / xmm ones below.
#if STRATA_CPU_DISPATCH
template <class T, int R, int NV>
[[gnu::target("arch=x86-64-v4"), gnu::noinline, gnu::flatten]] void tile_v4(const TileArgs<T>& t) {
  attn::tile<T, 64, R, NV>(t.l0, t.l1, t.a, t.ars, t.als, t.b, t.ldb, t.out, t.ldo, t.ncols, t.add);
}
template <class T, int R, int NV>
[[gnu::target("arch=x86-64-v3"), gnu::noinline, gnu::flatten]] void tile_v3(const TileArgs<T>& t) {
  attn::tile<T, 32, R, NV>(t.l0, t.l1, t.a, t.ars, t.als, t.b, t.ldb, t.out, t.ldo, t.ncols, t.add);
}
constexpr int kBaseBytes = 16;
#elif defined(__AVX512F__)
constexpr int kBaseBytes = 64;  // compiled for this ISA (-march=native): one level
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kBaseBytes = 32;
#else
constexpr int kBaseBytes = 16;
#endif
template <class T, int R, int NV>
[[gnu::noinline, gnu::flatten]] void tile_base(const TileArgs<T>& t) {
  attn::tile<T, kBaseBytes, R, NV>(t.l0, t.l1, t.a, t.ars, t.als, t.b, t.ldb, t.out, t.ldo, t.ncols, t.add);
}

// Row blocks of kR rows and tiles of kR x kNV accumulators, but for two products at v4:
// the backward's dk and dv (formed column block by column block after the row blocks) in
// tiles of kRCols = 8 rows x 2 vectors (the GPT T64 backward alone 700 -> 665-683 us, in
// its step 3.12 -> 3.06 ms), and the forward in row blocks of kRFwd = 8 rows, tiles of 8 x 2
// (alone 366 -> 330-340 us, in the step 1.45-1.52 -> 1.38-1.46 ms over two runs of
// alternating rounds). (Blocks of 8 in the backward as well ran it no faster; prefetching
// a whole 8-row block's lines in one burst ran the step's backward 3.1 -> 3.4 ms.) A column
// block of 8 must lie within the rows' valid columns, which end on whole vectors after
// blocks of kR rows: it needs vectors of at least 8 lanes.
struct LevelBase {
  static constexpr int kBytes = kBaseBytes, kR = 4, kNV = kBaseBytes == 64 ? 4 : 2, kRCols = 4, kRFwd = 4;
  template <class T, int R, int NV>
  static void tile(const TileArgs<T>& t) { tile_base<T, R, NV>(t); }
};
#if STRATA_CPU_DISPATCH
struct LevelV4 {
  static constexpr int kBytes = 64, kR = 4, kNV = 4, kRCols = 8, kRFwd = 8;
  template <class T, int R, int NV>
  static void tile(const TileArgs<T>& t) { tile_v4<T, R, NV>(t); }
};
struct LevelV3 {
  static constexpr int kBytes = 32, kR = 4, kNV = 2, kRCols = 4, kRFwd = 4;
  template <class T, int R, int NV>
  static void tile(const TileArgs<T>& t) { tile_v3<T, R, NV>(t); }
};
#endif

// The vectors per tile row for R rows: the level's kNV at its kR, 2 for the 8-row tiles
// (16 accumulators).
template <class L>
constexpr int narrow_nv(int R) {
  return R > L::kR ? 2 : L::kNV;
}
constexpr int kMaxRows = 8;  // the most rows of any level's forward blocks (its scratch)

template <class L, class T, int R, int NV>
inline void tile_n(int rows, int nv, const TileArgs<T>& t) {
  if constexpr (R > 1) {
    if (rows < R) return tile_n<L, T, R - 1, NV>(rows, nv, t);
  }
  if constexpr (NV > 1) {
    if (nv < NV) return tile_n<L, T, R, NV - 1>(rows, nv, t);
  }
  L::template tile<T, R, NV>(t);
}

// out (rows x ncols, rows <= R) = A (rows x [l0, l1)) B, in column chunks of NV vectors
// (R x NV accumulators; by default the level's kR x kNV).
template <class L, class T, int R = L::kR, int NV = L::kNV>
inline void product(int rows, const TileArgs<T>& t) {
  constexpr int64_t lanes = L::kBytes / int64_t(sizeof(T)), chunk = NV * lanes;
  for (int64_t c0 = 0; c0 < t.ncols; c0 += chunk) {
    TileArgs<T> c = t;
    c.b += c0;
    c.out += c0;
    c.ncols = std::min(chunk, t.ncols - c0);
    tile_n<L, T, R, NV>(rows, int((c.ncols + lanes - 1) / lanes), c);
  }
}

// dst (cols x ldd) = s * src^T for src (rows x cols) at row stride ld; columns [rows, ldd)
// of dst zero. Square blocks of whole vectors are transposed in registers (f32 at v3/v4;
// gathers otherwise), the ragged edges element by element.
template <int kBytes, class T>
inline void pack_transposed(const T* src, int64_t ld, int64_t rows, int64_t cols, T s, T* dst, int64_t ldd) {
  using V = attn::Vec<T, kBytes>;
  constexpr int64_t lanes = kBytes / int64_t(sizeof(T));
  int64_t r0 = 0, c0 = cols / lanes * lanes;
  if (ld * lanes <= (int64_t(1) << 31) - 1)  // the gathers' 32-bit offsets
    for (; r0 + lanes <= rows; r0 += lanes) {
      for (int64_t c = 0; c < c0; c += lanes)
        attn::transpose_block<V>(src + r0 * ld + c, ld, s, dst + c * ldd + r0, ldd);
      for (int64_t c = c0; c < cols; ++c)
        for (int64_t r = r0; r < r0 + lanes; ++r) dst[c * ldd + r] = s * src[r * ld + c];
    }
  for (int64_t r = r0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = s * src[r * ld + c];
  for (int64_t c = 0; c < cols; ++c) std::fill(dst + c * ldd + rows, dst + (c + 1) * ldd, T(0));
}

// dst (rows x ldd) = src (rows x cols at row stride ld); columns [cols, ldd) zero.
template <int kBytes, class T>
inline void pack_rows(const T* src, int64_t ld, int64_t rows, int64_t cols, T* dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r) attn::copy_pad<T, kBytes>(src + r * ld, cols, dst + r * ldd, ldd);
}

// Prefetches `rows` rows of `cols` elements at row stride ld into the cache. A head's
// q, k, v (and dy) are T rows of hd elements spread over the packed (B, T, 3C) tensor at a
// row stride of 3C: a stride the hardware prefetcher does not follow across pages, so
// without this each (batch, head) pair starts with ~T * 6 cold cache misses
// (docs/performance.md, "Prefetching the attention's strided rows"). Issued for the next
// pair while the current one computes, a row block at a time: a burst of the whole pair's
// ~6 T lines at once mostly misses its chance (the core tracks a few dozen misses).
// kWrite: rows about to be written (the next pair's output rows). Into L2, not L1 (locality
// 2, prefetcht1): the rows are read a pair later, and brought into L1 they pushed out the
// current pair's packed k^T, v and scores (GPT T64 B32 step on host B, one core, four
// alternating rounds: forward 2.38-2.51 -> 2.26-2.42 ms, backward 4.60-5.02 -> 4.42-4.75 ms).
template <bool kWrite = false, class T>
inline void prefetch_rows(const T* p, int64_t ld, int64_t rows, int64_t cols) {
  constexpr int64_t kLine = 64 / int64_t(sizeof(T));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += kLine) __builtin_prefetch(p + r * ld + c, kWrite ? 1 : 0, 2);
}

// dst (rows x ldd) = the rows of src (row stride ld) turned by the rotary embedding of their
// positions (table rows c, s: (rows, hd/2), RopeTable), as cpu::rotary_kernel computes them
// (rope_turn); columns [hd, ldd) zero.
template <class T>
inline void rope_rows(const T* src, int64_t ld, int64_t rows, int64_t hd, const T* c, const T* s, T* dst,
                      int64_t ldd) {
  const int64_t half = hd / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = src + r * ld;
    T* y = dst + r * ldd;
    const T* cr = c + r * half;
    const T* sr = s + r * half;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      rope_turn(x[i], x[i + half], cr[i], sr[i], y[i], y[i + half]);
    }
    std::fill(y + hd, y + ldd, T(0));
  }
}

// The rows of p (row stride ld) turned back in place: the inverse rotation, with the sines
// negated as rotary_kernel's inverse table holds them.
template <class T>
inline void unrope_rows(T* p, int64_t ld, int64_t rows, int64_t hd, const T* c, const T* s) {
  const int64_t half = hd / 2;
  for (int64_t r = 0; r < rows; ++r) {
    T* y = p + r * ld;
    const T* cr = c + r * half;
    const T* sr = s + r * half;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const T a = y[i], b = y[i + half];
      rope_turn(a, b, cr[i], -sr[i], y[i], y[i + half]);
    }
  }
}

// The rotary embedding's (T, hd/2) table where q and k turn in the kernel; null: they do not.
template <class T>
struct Rope {
  const T* cos = nullptr;
  const T* sin = nullptr;
};

// The next pair's q, k, v rows (null: none; k, v null when they are this pair's), which a
// pair prefetches a row block at a time while it computes.
template <class T>
struct NextRows {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  // Prefetches their rows [i, i + rows) at row stride ld (k and v where set).
  void prefetch(int64_t i, int64_t rows, int64_t ld, int64_t hd) const {
    prefetch_rows(q + i * ld, ld, rows, hd);
    if (k) {
      prefetch_rows(k + i * ld, ld, rows, hd);
      prefetch_rows(v + i * ld, ld, rows, hd);
    }
  }
};

template <class T>
struct FwdPair {
  const T* q;  // (T, hd) each, row stride ld: the query head and its key/value head
  const T* k;
  const T* v;
  int64_t ld;
  T* y;  // (T, hd), row stride ldy
  int64_t ldy;
  T* lse;  // (T): the rows' log-sum-exp
  int64_t n, hd;
  T scale;
  T* ws;         // fwd_scratch(n, hd) elements, 64-byte aligned
  bool kv_held;  // ws already holds k and v packed (the previous pair had the same ones)
  Rope<T> rope;          // q and k turn here where rope.cos is set
  NextRows<T> next;      // at row stride ld
  T* next_y = nullptr;   // the next pair's output rows, at ldy
};

template <class T>
int64_t fwd_scratch(int64_t n, int64_t hd, int rows) {
  return hd * padded<T>(n) + 3 * n * padded<T>(hd) + rows * padded<T>(n) + padded<T>(n);
}

template <class L, class T>
inline void forward_pair(const FwdPair<T>& a) {
  constexpr int64_t lanes = L::kBytes / int64_t(sizeof(T));
  const int64_t n = a.n, hd = a.hd, tp = padded<T>(n), hdp = padded<T>(hd);
  T* kt = a.ws;           // (hd, tp): scale * k^T
  T* vp = kt + hd * tp;   // (n, hdp): v
  T* qr = vp + n * hdp;   // (n, hdp): q turned, with the rotary embedding
  T* kr = qr + n * hdp;   // (n, hdp): k turned
  constexpr int R = L::kRFwd, NV = narrow_nv<L>(R);
  T* s = kr + n * hdp;    // (R, tp): the row block's scores, then probabilities
  T* mx = s + R * tp;     // (n): the rows' maxima, until lse_rows
  if (!a.kv_held) {
    if (a.rope.cos) {
      rope_rows(a.k, a.ld, n, hd, a.rope.cos, a.rope.sin, kr, hdp);
      pack_transposed<L::kBytes>(static_cast<const T*>(kr), hdp, n, hd, a.scale, kt, tp);
    } else {
      pack_transposed<L::kBytes>(a.k, a.ld, n, hd, a.scale, kt, tp);
    }
    pack_rows<L::kBytes>(a.v, a.ld, n, hd, vp, hdp);
  }
  const T* q = a.q;
  int64_t ldq = a.ld;
  if (a.rope.cos) {
    rope_rows(a.q, a.ld, n, hd, a.rope.cos, a.rope.sin, qr, hdp);
    q = qr;
    ldq = hdp;
  }
  // The next pair's rows, a part between each two steps of a block: first its k and v,
  // which it packs whole before its first block, then its q and output rows, which it
  // reaches block by block; 8 rows of two tensors a part. (Each block's rows of all four in
  // turn left the next pair's packing waiting on k and v: the GPT T64 step's forward
  // 1.9-2.2 -> 1.40-1.44 ms, 1.3 ms alone.)
  int64_t pf_kv = a.next.k ? 0 : n, pf_q = 0;
  const auto prefetch_next = [&] {
    if (!a.next.q) return;
    constexpr int64_t kPart = 8;
    if (pf_kv < n) {
      const int64_t part = std::min(kPart, n - pf_kv);
      prefetch_rows(a.next.k + pf_kv * a.ld, a.ld, part, hd);
      prefetch_rows(a.next.v + pf_kv * a.ld, a.ld, part, hd);
      pf_kv += part;
    } else if (pf_q < n) {
      const int64_t part = std::min(kPart, n - pf_q);
      prefetch_rows(a.next.q + pf_q * a.ld, a.ld, part, hd);
      prefetch_rows<true>(a.next_y + pf_q * a.ldy, a.ldy, part, hd);
      pf_q += part;
    }
  };
  for (int64_t i0 = 0; i0 < n; i0 += R) {
    const int rows = int(std::min<int64_t>(R, n - i0));
    const int64_t last = i0 + rows, m = (last + lanes - 1) / lanes * lanes;  // columns [0, m): to the diagonal
    product<L, T, R, NV>(rows, TileArgs<T>{0, hd, q + i0 * ldq, ldq, 1, kt, tp, s, tp, m});
    prefetch_next();
    if (rows == R)  // a constant row count: the rows' accumulators stay in registers
      attn::softmax_rows<T, L::kBytes, R>(s, tp, R, i0, m, a.lse + i0, mx + i0);
    else
      attn::softmax_rows<T, L::kBytes, R>(s, tp, rows, i0, m, a.lse + i0, mx + i0);
    product<L, T, R, NV>(rows, TileArgs<T>{0, last, s, tp, 1, vp, hdp, a.y + i0 * a.ldy, a.ldy, hd});  // y = P v
    prefetch_next();
  }
  attn::lse_rows<T, L::kBytes>(a.lse, mx, n);
}

template <class T>
struct BwdPair {
  const T* q;  // (T, hd) each, row stride ld
  const T* k;
  const T* v;
  int64_t ld;
  const T* g;  // dy (T, hd), row stride ldg
  int64_t ldg;
  const T* lse;  // (T): the forward's log-sum-exp of each row
  T* dq;         // (T, hd) each, row stride ld
  T* dk;
  T* dv;
  int64_t n, hd;
  T scale;
  T* ws;        // bwd_scratch(n, hd) elements, 64-byte aligned
  bool add_kv;  // a later query head of the group: ws already holds k and v packed, and
                // dk and dv += this head's part
  bool last_of_group = true;  // the group's last query head: dk is complete after it
  Rope<T> rope;          // q and k turn here, dq and dk back, where rope.cos is set
  NextRows<T> next;      // at row stride ld, and their gradients' rows:
  const T* next_g = nullptr;  // dy's at ldg
  T* next_dq = nullptr;
  T* next_dk = nullptr;
  T* next_dv = nullptr;
};

template <class T>
int64_t bwd_scratch(int64_t n, int64_t hd) {
  return 2 * hd * padded<T>(n) + 3 * n * padded<T>(hd) + 2 * n * padded<T>(n);
}

template <class L, class T>
inline void backward_pair(const BwdPair<T>& a) {
  constexpr int64_t lanes = L::kBytes / int64_t(sizeof(T));
  const int64_t n = a.n, hd = a.hd, tp = padded<T>(n), hdp = padded<T>(hd);
  T* kt = a.ws;          // (hd, tp): scale * k^T
  T* vt = kt + hd * tp;  // (hd, tp): v^T
  T* kp = vt + hd * tp;  // (n, hdp): k, q, dy
  T* qp = kp + n * hdp;
  T* gp = qp + n * hdp;
  T* pp = gp + n * hdp;  // (n, tp): P; row i valid on [0, m(i)) (zero from i + 1)
  T* ds = pp + n * tp;   // (n, tp): dP, then scale * dS
  if (!a.add_kv) {
    if (a.rope.cos) {  // k turned into kp, k^T from it
      rope_rows(a.k, a.ld, n, hd, a.rope.cos, a.rope.sin, kp, hdp);
      pack_transposed<L::kBytes>(static_cast<const T*>(kp), hdp, n, hd, a.scale, kt, tp);
    } else {
      pack_transposed<L::kBytes>(a.k, a.ld, n, hd, a.scale, kt, tp);
      pack_rows<L::kBytes>(a.k, a.ld, n, hd, kp, hdp);
    }
    pack_transposed<L::kBytes>(a.v, a.ld, n, hd, T(1), vt, tp);
  }
  if (a.rope.cos)
    rope_rows(a.q, a.ld, n, hd, a.rope.cos, a.rope.sin, qp, hdp);
  else
    pack_rows<L::kBytes>(a.q, a.ld, n, hd, qp, hdp);
  pack_rows<L::kBytes>(a.g, a.ldg, n, hd, gp, hdp);
  for (int64_t i0 = 0; i0 < n; i0 += L::kR) {
    const int rows = int(std::min<int64_t>(L::kR, n - i0));
    const int64_t last = i0 + rows, m = (last + lanes - 1) / lanes * lanes;
    T* p = pp + i0 * tp;
    T* d = ds + i0 * tp;
    product<L>(rows, TileArgs<T>{0, hd, qp + i0 * hdp, hdp, 1, kt, tp, p, tp, m});  // S = scale q k^T
    product<L>(rows, TileArgs<T>{0, hd, gp + i0 * hdp, hdp, 1, vt, tp, d, tp, m});  // dP = dy v^T
    if (rows == L::kR) {  // as in the forward
      attn::probs_from_lse_rows<T, L::kBytes, L::kR>(p, tp, L::kR, i0, m, a.lse + i0);
      attn::softmax_grad_rows<T, L::kBytes, L::kR>(p, d, tp, L::kR, m, a.scale);  // scale * dS (0 where P is)
    } else {
      attn::probs_from_lse_rows<T, L::kBytes, L::kR>(p, tp, rows, i0, m, a.lse + i0);
      attn::softmax_grad_rows<T, L::kBytes, L::kR>(p, d, tp, rows, m, a.scale);
    }
    product<L>(rows, TileArgs<T>{0, last, d, tp, 1, kp, hdp, a.dq + i0 * a.ld, a.ld, hd});  // dq
    if (a.next.q) {
      const int64_t at = i0 * a.ld;
      a.next.prefetch(i0, rows, a.ld, hd);
      prefetch_rows<true>(a.next_dq + at, a.ld, rows, hd);
      if (a.next.k) {
        prefetch_rows<true>(a.next_dk + at, a.ld, rows, hd);
        prefetch_rows<true>(a.next_dv + at, a.ld, rows, hd);
      }
      prefetch_rows(a.next_g + i0 * a.ldg, a.ldg, rows, hd);
    }
  }
  // dk = (scale dS)^T q and dv = P^T dy over the rows i >= j of each column block; the
  // blocks line up with the row blocks above, so row i >= j0 is valid at columns < j0 + kR
  constexpr int kRc = L::kRCols, kNVc = narrow_nv<L>(kRc);
  static_assert(kRc == L::kR || (kRc % L::kR == 0 && L::kBytes / int(sizeof(T)) % kRc == 0 && kRc * kNVc <= 16));
  for (int64_t j0 = 0; j0 < n; j0 += kRc) {
    const int rows = int(std::min<int64_t>(kRc, n - j0));
    product<L, T, kRc, kNVc>(rows, TileArgs<T>{j0, n, ds + j0, 1, tp, qp, hdp, a.dk + j0 * a.ld, a.ld, hd, a.add_kv});
    product<L, T, kRc, kNVc>(rows, TileArgs<T>{j0, n, pp + j0, 1, tp, gp, hdp, a.dv + j0 * a.ld, a.ld, hd, a.add_kv});
  }
  if (a.rope.cos) {  // the gradients of the turned q and k, turned back
    unrope_rows(a.dq, a.ld, n, hd, a.rope.cos, a.rope.sin);
    if (a.last_of_group) unrope_rows(a.dk, a.ld, n, hd, a.rope.cos, a.rope.sin);
  }
}

// The entry points per level: compiled for it, with everything but the tiles inlined.
template <class T>
using FwdFn = void (*)(const FwdPair<T>&);
template <class T>
using BwdFn = void (*)(const BwdPair<T>&);

template <class T>
[[gnu::flatten]] void forward_base(const FwdPair<T>& a) { forward_pair<LevelBase>(a); }
template <class T>
[[gnu::flatten]] void backward_base(const BwdPair<T>& a) { backward_pair<LevelBase>(a); }
#if STRATA_CPU_DISPATCH
template <class T>
[[gnu::target("arch=x86-64-v4"), gnu::flatten]] void forward_v4(const FwdPair<T>& a) { forward_pair<LevelV4>(a); }
template <class T>
[[gnu::target("arch=x86-64-v4"), gnu::flatten]] void backward_v4(const BwdPair<T>& a) { backward_pair<LevelV4>(a); }
template <class T>
[[gnu::target("arch=x86-64-v3"), gnu::flatten]] void forward_v3(const FwdPair<T>& a) { forward_pair<LevelV3>(a); }
template <class T>
[[gnu::target("arch=x86-64-v3"), gnu::flatten]] void backward_v3(const BwdPair<T>& a) { backward_pair<LevelV3>(a); }
#endif

template <class T>
FwdFn<T> forward_fn() {
#if STRATA_CPU_DISPATCH
  switch (simd_level()) {
    case SimdLevel::v4: return &forward_v4<T>;
    case SimdLevel::v3: return &forward_v3<T>;
    case SimdLevel::baseline: break;
  }
#endif
  return &forward_base<T>;
}
template <class T>
BwdFn<T> backward_fn() {
#if STRATA_CPU_DISPATCH
  switch (simd_level()) {
    case SimdLevel::v4: return &backward_v4<T>;
    case SimdLevel::v3: return &backward_v3<T>;
    case SimdLevel::baseline: break;
  }
#endif
  return &backward_base<T>;
}

// Per-thread scratch, each thread's part 64-byte aligned.
template <class T>
class Scratch {
 public:
  Scratch(int threads, int64_t per_thread)
      : stride_(padded<T>(per_thread)), buf_(size_t(threads * stride_ + kAlign / int64_t(sizeof(T)))) {}
  T* at(int tid) {
    void* p = buf_.data();
    size_t space = buf_.size() * sizeof(T);
    return static_cast<T*>(std::align(kAlign, sizeof(T), p, space)) + tid * stride_;
  }

 private:
  int64_t stride_;
  std::vector<T> buf_;
};

template <class T>
void forward_impl(const T* qkv, T* y, T* lse, const Dims& d, Rope<T> rope = {}) {
  const T scale = T(1.0 / std::sqrt(double(d.hd)));
  const int nt = block_threads(d.B * d.H);
  Scratch<T> scratch(nt, fwd_scratch<T>(d.T, d.hd, kMaxRows));
  const FwdFn<T> fn = forward_fn<T>();
  for_blocks(d.B * d.H, nt, [&](int tid, int64_t bh0, int64_t bh1) {
    T* ws = scratch.at(tid);
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H, g = h / d.rep();
      const bool kv_held = bh > bh0 && h % d.rep() != 0;  // this thread packed the group's k, v last
      FwdPair<T> p{qkv + d.q_at(b, h), qkv + d.k_at(b, g), qkv + d.v_at(b, g), d.W, y + b * d.T * d.C + h * d.hd,
                   d.C, lse + bh * d.T, d.T, d.hd, scale, ws, kv_held, rope, NextRows<T>{}};
      if (bh + 1 < bh1) {  // the next pair's q and output rows, and k, v when they change
        const int64_t nb = (bh + 1) / d.H, nh = (bh + 1) % d.H, ng = nh / d.rep();
        p.next.q = qkv + d.q_at(nb, nh);
        if (nh % d.rep() == 0) {
          p.next.k = qkv + d.k_at(nb, ng);
          p.next.v = qkv + d.v_at(nb, ng);
        }
        p.next_y = y + nb * d.T * d.C + nh * d.hd;
      }
      fn(p);
    }
  });
}

// The (batch, key/value head) groups are split over the threads: a group's query heads run
// in order on one thread, the first writing dk and dv and the others adding to them, so
// the sums do not depend on the thread count.
template <class T>
void backward_impl(const T* dy, const T* qkv, const T* lse, T* dqkv, const Dims& d, Rope<T> rope = {}) {
  const T scale = T(1.0 / std::sqrt(double(d.hd)));
  const int64_t rep = d.rep(), groups = d.B * d.Hkv;
  const int nt = block_threads(groups);
  Scratch<T> scratch(nt, bwd_scratch<T>(d.T, d.hd));
  const BwdFn<T> fn = backward_fn<T>();
  for_blocks(groups, nt, [&](int tid, int64_t bg0, int64_t bg1) {
    T* ws = scratch.at(tid);
    const int64_t bh0 = bg0 * rep, bh1 = bg1 * rep;  // the groups' pairs (b, h) are consecutive
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H, g = h / rep;
      BwdPair<T> p{qkv + d.q_at(b, h), qkv + d.k_at(b, g), qkv + d.v_at(b, g), d.W, dy + b * d.T * d.C + h * d.hd,
                   d.C, lse + bh * d.T, dqkv + d.q_at(b, h), dqkv + d.k_at(b, g),
                   dqkv + d.v_at(b, g), d.T, d.hd, scale, ws, h % rep != 0, h % rep == rep - 1, rope,
                   NextRows<T>{}};
      if (bh + 1 < bh1) {  // the next pair's q, dy and gradient rows, and k, v when they change
        const int64_t nb = (bh + 1) / d.H, nh = (bh + 1) % d.H, ng = nh / rep;
        p.next.q = qkv + d.q_at(nb, nh);
        p.next_dq = dqkv + d.q_at(nb, nh);
        if (nh % rep == 0) {
          p.next.k = qkv + d.k_at(nb, ng);
          p.next.v = qkv + d.v_at(nb, ng);
          p.next_dk = dqkv + d.k_at(nb, ng);
          p.next_dv = dqkv + d.v_at(nb, ng);
        }
        p.next_g = dy + nb * d.T * d.C + nh * d.hd;
      }
      fn(p);
    }
  });
}

}  // namespace

void causal_attention_kernel(const Tensor& qkv, Tensor& y, Tensor& lse, int64_t head_dim, int64_t kv_heads) {
  if (qkv.numel() == 0) return;
  const Dims d = dims_of(qkv, head_dim, kv_heads);
  STRATA_DISPATCH_FLOAT(qkv.dtype(), "causal_attention", [&] {
    forward_impl(qkv.data<scalar_t>(), y.data<scalar_t>(), lse.data<scalar_t>(), d);
  });
}

void causal_attention_backward_kernel(const Tensor& dy, const Tensor& qkv, const Tensor& lse, Tensor& dqkv,
                                      int64_t head_dim, int64_t kv_heads) {
  if (qkv.numel() == 0) return;
  const Dims d = dims_of(qkv, head_dim, kv_heads);
  STRATA_DISPATCH_FLOAT(qkv.dtype(), "causal_attention_backward", [&] {
    backward_impl(dy.data<scalar_t>(), qkv.data<scalar_t>(), lse.data<scalar_t>(), dqkv.data<scalar_t>(), d);
  });
}

void causal_attention_rotary_kernel(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq, Tensor& y,
                                    Tensor& lse, int64_t head_dim, int64_t kv_heads) {
  if (qkv.numel() == 0) return;
  const Dims d = dims_of(qkv, head_dim, kv_heads);
  STRATA_DISPATCH_FLOAT(qkv.dtype(), "causal_attention_rotary", [&] {
    const RopeTable<scalar_t>& table = rope_table<scalar_t>(positions.data<int64_t>(), inv_freq.data<double>(), d.T, d.hd / 2);
    forward_impl(qkv.data<scalar_t>(), y.data<scalar_t>(), lse.data<scalar_t>(), d,
                 Rope<scalar_t>{table.cos.data(), table.sin.data()});
  });
}

void causal_attention_rotary_backward_kernel(const Tensor& dy, const Tensor& qkv, const Tensor& positions,
                                             const Tensor& inv_freq, const Tensor& lse, Tensor& dqkv,
                                             int64_t head_dim, int64_t kv_heads) {
  if (qkv.numel() == 0) return;
  const Dims d = dims_of(qkv, head_dim, kv_heads);
  STRATA_DISPATCH_FLOAT(qkv.dtype(), "causal_attention_rotary_backward", [&] {
    const RopeTable<scalar_t>& table = rope_table<scalar_t>(positions.data<int64_t>(), inv_freq.data<double>(), d.T, d.hd / 2);
    backward_impl(dy.data<scalar_t>(), qkv.data<scalar_t>(), lse.data<scalar_t>(), dqkv.data<scalar_t>(), d,
                  Rope<scalar_t>{table.cos.data(), table.sin.data()});
  });
}

}  // namespace strata::cpu
