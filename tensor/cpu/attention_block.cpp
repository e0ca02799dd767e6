// Blockwise causal attention, one (batch, head) pair per iteration with the pairs split
// over the threads (OpenBLAS single-threaded meanwhile). Per pair, S = scale q k^T with
// row i seeing the keys j < m_i = clamp(q_pos + i - k_pos + 1, 0, Lk):
//   forward:  mx_i = max_j S_ij, p_ij = exp(S_ij - mx_i), l_i = sum_j p_ij, o = p v;
//             lse' = logaddexp(lse, mx + log l),
//             out' = out * exp(lse - lse') + o * exp(mx - lse')
//   backward: P = exp(S - lse) (the final softmax), dv += P^T dout,
//             dS = P * (dout v^T - delta), dq += scale dS k, dk += scale dS^T q
// Attention dropout (AttentionDropout): the mask M (0 or 1/(1-p)) of each (b, h, i, j) is
// recomputed from its global index; forward o = (p M) v with l the undropped sum,
// backward dv += (P M)^T dout, dS = P * (M (dout v^T) - delta).
#include <strata/tensor/cpu/attention_block.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include <strata/core/error.h>
#include <strata/core/rng.h>
#include <strata/tensor/cpu/blocks.h>
#include <strata/tensor/cpu/gemm.h>
#include <strata/tensor/cpu/softmax.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

// A (B, L, H*hd) view: element (b, i, h*hd + c) at data + b*bs + i*rs + h*hd + c.
template <class T>
struct Heads {
  T* data;
  int64_t bs, rs;
  T* at(int64_t b, int64_t h, int64_t hd) const { return data + b * bs + h * hd; }
};

template <class T>
Heads<T> heads_of(const Tensor& t, const char* what) {
  STRATA_CHECK(t.dim() == 3 && t.stride(2) == 1, "[attention_block] ", what, " must be (B, L, H*hd) with a unit last stride, got ",
               t.str());
  return {const_cast<T*>(t.data<T>()), t.stride(0), t.stride(1)};
}

struct Geometry {
  int64_t B, Lq, Lk, H, hd, i0;  // rows before i0 see no key of the block
  bool empty;
};

Geometry geometry(const Tensor& q, const Tensor& k, int64_t q_pos, int64_t k_pos, int64_t hd) {
  STRATA_CHECK(hd > 0 && q.size(2) % hd == 0 && k.size(2) == q.size(2) && k.size(0) == q.size(0),
               "[attention_block] q ", shape_str(q.shape()), " and k ", shape_str(k.shape()),
               " do not match (head_dim ", hd, ")");
  Geometry g{q.size(0), q.size(1), k.size(1), q.size(2) / hd, hd, std::max<int64_t>(0, k_pos - q_pos), false};
  g.empty = g.Lq == 0 || g.Lk == 0 || g.B == 0 || g.i0 >= g.Lq;
  return g;
}

// The attention dropout mask (see AttentionDropout): ops::dropout's draws of the whole
// (B, H, T, T) probability tensor, element by element from the global index.
struct DropMask {
  bool on = false;
  std::array<uint32_t, 2> key{};
  uint64_t base = 0, t = 0;
  uint32_t threshold = 0;
  double scale = 1;
  explicit DropMask(const AttentionDropout& d)
      : on(d.p > 0),
        key{uint32_t(d.seed), uint32_t(d.seed >> 32)},
        base(d.base),
        t(uint64_t(d.seq)),
        // as cpu::dropout_kernel: keep iff (word >> 8) >= ceil(float(p) * 2^24), scale 1/(1-p)
        threshold(uint32_t(std::ceil(double(float(d.p)) * 16777216.0))),
        scale(d.p < 1 ? 1.0 / (1.0 - d.p) : 0.0) {}
  // Element (b, h, query i, key j) of the whole tensor (global positions).
  uint64_t elem(int64_t b, int64_t heads, int64_t h, int64_t i, int64_t j) const {
    return (uint64_t(b * heads + h) * t + uint64_t(i)) * t + uint64_t(j);
  }
  // mult[j] = 0 or scale for elements e0 .. e0 + m - 1 (one Philox block per 4).
  template <class T>
  void row(uint64_t e0, int64_t m, T* mult) const {
    uint64_t have = ~uint64_t(0);
    std::array<uint32_t, 4> w{};
    const T keep = T(scale);
    for (int64_t j = 0; j < m; ++j) {
      const uint64_t e = e0 + uint64_t(j), c = base + e / 4;
      if (c != have) {
        w = philox4x32({uint32_t(c), uint32_t(c >> 32), 0, 0}, key);
        have = c;
      }
      mult[j] = (w[e % 4] >> 8) >= threshold ? keep : T(0);
    }
  }
};

// Keys row i of the block sees: [0, m_i).
inline int64_t visible(int64_t i, int64_t q_pos, int64_t k_pos, int64_t lk) {
  return std::clamp<int64_t>(q_pos + i - k_pos + 1, 0, lk);
}

template <class T>
void forward_impl(const Tensor& qt, const Tensor& kt, const Tensor& vt, int64_t q_pos, int64_t k_pos, const Geometry& g,
                  Tensor& outt, Tensor& lset, const DropMask& dm) {
  const DType dt = dtype_v<T>;
  const Heads<T> q = heads_of<T>(qt, "q"), k = heads_of<T>(kt, "k"), v = heads_of<T>(vt, "v"),
                 out = heads_of<T>(outt, "out");
  T* lse = lset.data<T>();
  const double scale = 1.0 / std::sqrt(double(g.hd));
  const int64_t rows = g.Lq - g.i0;  // rows [i0, Lq) see at least one key
  const int nt = block_threads(g.B * g.H);
  // scores, block output, two factors, a row's dropout multipliers
  const int64_t per_thread = rows * g.Lk + rows * g.hd + 2 * rows + (dm.on ? g.Lk : 0);
  std::vector<T> scratch(size_t(nt) * size_t(per_thread));
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for_blocks(g.B * g.H, nt, [&](int tid, int64_t bh0, int64_t bh1) {
    T* s = scratch.data() + tid * per_thread;  // (rows, Lk)
    T* o = s + rows * g.Lk;                    // (rows, hd)
    T* f_old = o + rows * g.hd;                // (rows): exp(lse - lse')
    T* f_blk = f_old + rows;                   // (rows): exp(mx - lse')
    T* mult = f_blk + rows;                    // (Lk): dropout (with dm.on)
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / g.H, h = bh % g.H;
      const T* qp = q.at(b, h, g.hd) + g.i0 * q.rs;
      gemm(dt, rows, g.Lk, g.hd, scale, {qp, q.rs, false}, {k.at(b, h, g.hd), k.rs, true}, 0.0, s, g.Lk);
      T* l = lse + bh * g.Lq + g.i0;
      for (int64_t r = 0; r < rows; ++r) {  // the scores become unnormalised probabilities
        T* row = s + r * g.Lk;
        const int64_t m = visible(g.i0 + r, q_pos, k_pos, g.Lk);
        T mx = row[0];
        for (int64_t j = 1; j < m; ++j) mx = row[j] > mx ? row[j] : mx;
        T sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < m; ++j) {
          const T e = vexp(row[j] - mx);
          row[j] = e;
          sum += e;
        }
        std::fill(row + m, row + g.Lk, T(0));
        if (dm.on) {  // after the (undropped) sum: dropout acts on the normalised probabilities
          dm.row(dm.elem(b, g.H, h, q_pos + g.i0 + r, k_pos), m, mult);
#pragma omp simd
          for (int64_t j = 0; j < m; ++j) row[j] *= mult[j];
        }
        const T blk = mx + std::log(sum), old = l[r];
        const T neu = old == kNegInf ? blk : std::max(old, blk) + std::log1p(std::exp(-std::abs(old - blk)));
        l[r] = neu;
        f_old[r] = old == kNegInf ? T(0) : std::exp(old - neu);
        f_blk[r] = std::exp(mx - neu);
      }
      gemm(dt, rows, g.hd, g.Lk, 1.0, {s, g.Lk, false}, {v.at(b, h, g.hd), v.rs, false}, 0.0, o, g.hd);
      T* op = out.at(b, h, g.hd) + g.i0 * out.rs;
      for (int64_t r = 0; r < rows; ++r) {
        T* dst = op + r * out.rs;
        const T* src = o + r * g.hd;
        const T a = f_old[r], c = f_blk[r];
#pragma omp simd
        for (int64_t j = 0; j < g.hd; ++j) dst[j] = a * dst[j] + c * src[j];
      }
    }
  });
}

template <class T>
void delta_impl(const Tensor& doutt, const Tensor& outt, int64_t hd, Tensor& deltat) {
  const Heads<T> dout = heads_of<T>(doutt, "dout"), out = heads_of<T>(outt, "out");
  const int64_t B = outt.size(0), L = outt.size(1), H = outt.size(2) / hd;
  T* delta = deltat.data<T>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        const T* x = dout.at(b, h, hd) + i * dout.rs;
        const T* y = out.at(b, h, hd) + i * out.rs;
        T s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < hd; ++j) s += x[j] * y[j];
        delta[(b * H + h) * L + i] = s;
      }
}

template <class T>
void backward_impl(const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& doutt, const Tensor& lset,
                   const Tensor& deltat, int64_t q_pos, int64_t k_pos, const Geometry& g, Tensor& dqt, Tensor& dkt,
                   Tensor& dvt, const DropMask& dm) {
  const DType dt = dtype_v<T>;
  const Heads<T> q = heads_of<T>(qt, "q"), k = heads_of<T>(kt, "k"), v = heads_of<T>(vt, "v"),
                 dout = heads_of<T>(doutt, "dout"), dq = heads_of<T>(dqt, "dq"), dk = heads_of<T>(dkt, "dk"),
                 dv = heads_of<T>(dvt, "dv");
  const T* lse = lset.data<T>();
  const T* delta = deltat.data<T>();
  const double scale = 1.0 / std::sqrt(double(g.hd));
  const int64_t rows = g.Lq - g.i0;
  const int nt = block_threads(g.B * g.H);
  const int64_t per_thread = 2 * rows * g.Lk + (dm.on ? g.Lk : 0);  // P and dP / dS (+ a row's dropout)
  std::vector<T> scratch(size_t(nt) * size_t(per_thread));
  for_blocks(g.B * g.H, nt, [&](int tid, int64_t bh0, int64_t bh1) {
    T* p = scratch.data() + tid * per_thread;  // (rows, Lk)
    T* ds = p + rows * g.Lk;                   // (rows, Lk)
    T* mult = ds + rows * g.Lk;                // (Lk): dropout (with dm.on)
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / g.H, h = bh % g.H;
      const T* qp = q.at(b, h, g.hd) + g.i0 * q.rs;
      const T* gp = dout.at(b, h, g.hd) + g.i0 * dout.rs;
      T* dqp = dq.at(b, h, g.hd) + g.i0 * dq.rs;
      const T* kp = k.at(b, h, g.hd);
      const T* vp = v.at(b, h, g.hd);
      const T* l = lse + bh * g.Lq + g.i0;
      const T* dl = delta + bh * g.Lq + g.i0;
      gemm(dt, rows, g.Lk, g.hd, scale, {qp, q.rs, false}, {kp, k.rs, true}, 0.0, p, g.Lk);      // S
      gemm(dt, rows, g.Lk, g.hd, 1.0, {gp, dout.rs, false}, {vp, v.rs, true}, 0.0, ds, g.Lk);   // dP = dout v^T
      for (int64_t r = 0; r < rows; ++r) {
        T* pr = p + r * g.Lk;
        T* dr = ds + r * g.Lk;
        const int64_t m = visible(g.i0 + r, q_pos, k_pos, g.Lk);
        const T li = l[r], di = dl[r];
        if (dm.on) {  // P M for dv; dS = P (M dP - delta)
          dm.row(dm.elem(b, g.H, h, q_pos + g.i0 + r, k_pos), m, mult);
#pragma omp simd
          for (int64_t j = 0; j < m; ++j) {
            const T e = vexp(pr[j] - li);
            pr[j] = e * mult[j];
            dr[j] = e * (dr[j] * mult[j] - di);
          }
        } else {
#pragma omp simd
          for (int64_t j = 0; j < m; ++j) {
            const T e = vexp(pr[j] - li);
            pr[j] = e;
            dr[j] = e * (dr[j] - di);
          }
        }
        std::fill(pr + m, pr + g.Lk, T(0));
        std::fill(dr + m, dr + g.Lk, T(0));
      }
      gemm(dt, g.Lk, g.hd, rows, 1.0, {p, g.Lk, true}, {gp, dout.rs, false}, 1.0, dv.at(b, h, g.hd), dv.rs);  // dv += P^T dout
      gemm(dt, rows, g.hd, g.Lk, scale, {ds, g.Lk, false}, {kp, k.rs, false}, 1.0, dqp, dq.rs);              // dq += scale dS k
      gemm(dt, g.Lk, g.hd, rows, scale, {ds, g.Lk, true}, {qp, q.rs, false}, 1.0, dk.at(b, h, g.hd), dk.rs);  // dk += scale dS^T q
    }
  });
}

void check_same_dtype(const char* op, std::initializer_list<const Tensor*> ts) {
  const DType d = (*ts.begin())->dtype();
  for (const Tensor* t : ts)
    STRATA_CHECK(t->dtype() == d && t->device().is_cpu(), "[", op, "] every tensor must be one float dtype on the CPU, got ",
                 t->str());
}

void check_drop(const AttentionDropout& d, const Geometry& g, int64_t q_pos, int64_t k_pos) {
  STRATA_CHECK(d.p >= 0 && d.p < 1 && (d.p == 0 || (q_pos >= 0 && k_pos >= 0 && q_pos + g.Lq <= d.seq && k_pos + g.Lk <= d.seq)),
               "[attention_block] attention dropout p ", d.p, " over a sequence of ", d.seq,
               " does not cover queries at ", q_pos, " and keys at ", k_pos);
}

}  // namespace

bool attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos, int64_t k_pos,
                             int64_t head_dim, Tensor& out, Tensor& lse, const AttentionDropout& drop) {
  check_same_dtype("attention_block_forward", {&q, &k, &v, &out, &lse});
  const Geometry g = geometry(q, k, q_pos, k_pos, head_dim);
  STRATA_CHECK(v.shape() == k.shape() && out.shape() == q.shape() && lse.is_contiguous() &&
                   lse.shape() == Shape({g.B, g.H, g.Lq}),
               "[attention_block_forward] v ", shape_str(v.shape()), ", out ", shape_str(out.shape()), ", lse ",
               shape_str(lse.shape()), " do not match q ", shape_str(q.shape()), " and k ", shape_str(k.shape()));
  check_drop(drop, g, q_pos, k_pos);
  if (g.empty) return false;
  STRATA_DISPATCH_FLOAT(q.dtype(), "attention_block_forward",
                        [&] { forward_impl<scalar_t>(q, k, v, q_pos, k_pos, g, out, lse, DropMask(drop)); });
  return true;
}

void attention_block_delta(const Tensor& dout, const Tensor& out, int64_t head_dim, Tensor& delta) {
  check_same_dtype("attention_block_delta", {&dout, &out, &delta});
  STRATA_CHECK(dout.shape() == out.shape() && out.dim() == 3 && out.size(2) % head_dim == 0 && delta.is_contiguous() &&
                   delta.numel() == out.size(0) * out.size(1) * (out.size(2) / head_dim),
               "[attention_block_delta] dout ", shape_str(dout.shape()), ", out ", shape_str(out.shape()), ", delta ",
               shape_str(delta.shape()), " do not match");
  STRATA_DISPATCH_FLOAT(out.dtype(), "attention_block_delta", [&] { delta_impl<scalar_t>(dout, out, head_dim, delta); });
}

bool attention_block_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                              const Tensor& lse, const Tensor& delta, int64_t q_pos, int64_t k_pos, int64_t head_dim,
                              Tensor& dq, Tensor& dk, Tensor& dv, const AttentionDropout& drop) {
  check_same_dtype("attention_block_backward", {&q, &k, &v, &dout, &lse, &delta, &dq, &dk, &dv});
  const Geometry g = geometry(q, k, q_pos, k_pos, head_dim);
  STRATA_CHECK(v.shape() == k.shape() && dout.shape() == q.shape() && dq.shape() == q.shape() && dk.shape() == k.shape() &&
                   dv.shape() == k.shape() && lse.is_contiguous() && delta.is_contiguous() &&
                   lse.numel() == g.B * g.H * g.Lq && delta.numel() == lse.numel(),
               "[attention_block_backward] shapes do not match q ", shape_str(q.shape()), " and k ", shape_str(k.shape()));
  check_drop(drop, g, q_pos, k_pos);
  if (g.empty) return false;
  STRATA_DISPATCH_FLOAT(q.dtype(), "attention_block_backward", [&] {
    backward_impl<scalar_t>(q, k, v, dout, lse, delta, q_pos, k_pos, g, dq, dk, dv, DropMask(drop));
  });
  return true;
}

}  // namespace strata::cpu
