// Blockwise causal attention on CUDA: the kernels of ops::attention_block_forward /
// _delta / _backward (tensor/attention_block.h), with the CPU kernels' contract
// (tensor/cpu/attention_block.h): q (B, Lq, H*hd) at global positions q_pos.., k, v
// (B, Lk, H*hd) at k_pos.., causal on the global positions, views with a unit last
// stride (any batch and row strides), lse and delta contiguous (B, H, Lq), f32 or f64.
//
// The fused attention's scheme (attention_warp.h): one warp per row, the lanes splitting
// the head dimension, each warp walking its keys (forward, dq) or queries (dk, dv) in
// order and owning the rows it writes, so results are deterministic (no atomics) and
// accumulating into dq, dk, dv races with nothing. Row i sees keys [0, m_i),
// m_i = clamp(q_pos + i - k_pos + 1, 0, Lk) (attention_block_plan.h).
//   forward  row i: s_j = scale q_i.k_j, online softmax: mx, l = sum_j exp(s_j - mx),
//                   o = sum_j exp(s_j - mx) M_ij v_j;  lse' = logaddexp(lse, mx + log l),
//                   out' = out exp(lse - lse') + o exp(mx - lse')
//   delta    row i: D_i = dout_i . out_i
//   dq       row i: dq_i += scale sum_j P_ij (M_ij dout_i.v_j - D_i) k_j,  P = exp(s - lse)
//   dk, dv   key j: dv_j += sum_{i sees j} P_ij M_ij dout_i,
//                   dk_j += scale sum_{i sees j} P_ij (M_ij dout_i.v_j - D_i) q_i
// M is the attention-dropout multiplier (0 or 1/(1-p), from the global (b, h, i, j)),
// 1 without dropout.
#include <cmath>

#include <strata/tensor/cuda/attention_block_plan.h>
#include <strata/tensor/cuda/attention_warp.h>
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {
namespace {

using namespace attn;

// A (B, L, H*hd) view with a unit last stride: (b, row i, head h) starts at b*bs + i*rs + h*hd.
struct Rows {
  int64_t bs, rs;
};
Rows rows_of(const Tensor& t, const char* op, const char* what) {
  STRATA_CHECK(t.dim() == 3 && t.stride(2) == 1, "[", op, "] ", what,
               " must be (B, L, H*hd) with a unit last stride, got ", t.str());
  return {t.stride(0), t.stride(1)};
}
__device__ __forceinline__ int64_t at(Rows r, int64_t b, int64_t i, int64_t h, int64_t hd) {
  return b * r.bs + i * r.rs + h * hd;
}

// One block's sizes and positions.
struct Geo {
  int64_t B, Lq, Lk, H, hd, q_pos, k_pos, i0, rows;
};

// This warp's index in the grid (one warp per row).
__device__ __forceinline__ int64_t warp_id() { return int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; }

// The dropout multiplier of key j for a row walking keys in order: one Philox block per
// four consecutive elements (every lane computes the same words).
template <class T>
struct RowDrop {
  BlockDropout d;
  T keep;
  uint64_t e0, have = ~uint64_t(0);
  PhiloxWords w{};
  __device__ __forceinline__ T mult(int64_t j) {
    const uint64_t e = e0 + uint64_t(j), c = d.base + e / 4;
    if (c != have) {
      w = philox_block(d.seed, c);
      have = c;
    }
    return (philox_word(w, e % 4) >> 8) >= d.threshold ? keep : T(0);
  }
};

template <class T>
__global__ void block_fwd_k(Geo g, T scale, const T* q, Rows qr, const T* k, Rows kr, const T* v, Rows vr, T* out,
                            Rows orr, T* lse, BlockDropout dm) {
  const int64_t w = warp_id();
  if (w >= g.B * g.H * g.rows) return;
  const int64_t i = g.i0 + w % g.rows, bh = w / g.rows, h = bh % g.H, b = bh / g.H;
  const int lane = threadIdx.x & 31;
  T x[kMaxPerLane], o[kMaxPerLane];
  load_row(q, at(qr, b, i, h, g.hd), g.hd, x);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    x[e] *= scale;
    o[e] = 0;
  }
  const int64_t m = block_visible_keys(i, g.q_pos, g.k_pos, g.Lk);  // >= 1: i >= i0
  RowDrop<T> rd{dm, T(dm.keep), dm.on ? block_dropout_element(dm, b, g.H, h, g.q_pos + i, g.k_pos) : 0};
  T mx = -INFINITY, l = 0;
  for (int64_t j = 0; j < m; ++j) {
    const T s = dot_row(k, at(kr, b, j, h, g.hd), g.hd, x);
    const T mn = s > mx ? s : mx;
    const T c = exp_a(mx - mn), p = exp_a(s - mn);
    l = l * c + p;  // the undropped normaliser: dropout acts after the softmax
    const T pv = dm.on ? p * rd.mult(j) : p;
    const int64_t vo = at(vr, b, j, h, g.hd);
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < g.hd) o[e] = o[e] * c + pv * ld(v, vo + d);
    }
    mx = mn;
  }
  // Merge with the running row: lse' = logaddexp(lse, blk), blk = mx + log l.
  const int64_t row = bh * g.Lq + i;
  const T old = lse[row], blk = mx + log_a(l);
  const T hi = old > blk ? old : blk, gap = old > blk ? old - blk : blk - old;
  const T neu = old == -INFINITY ? blk : hi + log1p_a(exp_a(-gap));
  const T f_old = old == -INFINITY ? T(0) : exp_a(old - neu), f_blk = exp_a(mx - neu);
  const int64_t oo = at(orr, b, i, h, g.hd);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < g.hd) out[oo + d] = f_old * out[oo + d] + f_blk * o[e];
  }
  __syncwarp();  // every lane has read the old lse
  if (lane == 0) lse[row] = neu;
}

template <class T>
__global__ void block_delta_k(int64_t rows_total, int64_t L, int64_t H, int64_t hd, const T* dout, Rows gr,
                              const T* out, Rows orr, T* delta) {
  const int64_t w = warp_id();
  if (w >= rows_total) return;
  const int64_t i = w % L, bh = w / L, h = bh % H, b = bh / H;
  T x[kMaxPerLane];
  load_row(dout, at(gr, b, i, h, hd), hd, x);
  const T s = dot_row(out, at(orr, b, i, h, hd), hd, x);
  if ((threadIdx.x & 31) == 0) delta[w] = s;  // w = (b H + h) L + i
}

template <class T>
__global__ void block_dq_k(Geo g, T scale, const T* q, Rows qr, const T* k, Rows kr, const T* v, Rows vr,
                           const T* dout, Rows gr, const T* lse, const T* delta, T* dq, Rows dqr, BlockDropout dm) {
  const int64_t w = warp_id();
  if (w >= g.B * g.H * g.rows) return;
  const int64_t i = g.i0 + w % g.rows, bh = w / g.rows, h = bh % g.H, b = bh / g.H;
  const int lane = threadIdx.x & 31;
  T x[kMaxPerLane], gd[kMaxPerLane], kk[kMaxPerLane], acc[kMaxPerLane];
  load_row(q, at(qr, b, i, h, g.hd), g.hd, x);
  load_row(dout, at(gr, b, i, h, g.hd), g.hd, gd);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) acc[e] = 0;
  const int64_t row = bh * g.Lq + i, m = block_visible_keys(i, g.q_pos, g.k_pos, g.Lk);
  const T li = lse[row], di = delta[row];
  RowDrop<T> rd{dm, T(dm.keep), dm.on ? block_dropout_element(dm, b, g.H, h, g.q_pos + i, g.k_pos) : 0};
  for (int64_t j = 0; j < m; ++j) {
    load_row(k, at(kr, b, j, h, g.hd), g.hd, kk);
    const T p = exp_a(scale * dot_regs(x, kk) - li);
    const T dp = dot_row(v, at(vr, b, j, h, g.hd), g.hd, gd);
    const T ds = dm.on ? p * (dp * rd.mult(j) - di) : p * (dp - di);
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) acc[e] += ds * kk[e];
  }
  const int64_t oo = at(dqr, b, i, h, g.hd);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < g.hd) dq[oo + d] += scale * acc[e];
  }
}

template <class T>
__global__ void block_dkv_k(Geo g, T scale, const T* q, Rows qr, const T* k, Rows kr, const T* v, Rows vr,
                            const T* dout, Rows gr, const T* lse, const T* delta, T* dk, Rows dkr, T* dv, Rows dvr,
                            BlockDropout dm) {
  const int64_t w = warp_id();
  if (w >= g.B * g.H * g.Lk) return;
  const int64_t j = w % g.Lk, bh = w / g.Lk, h = bh % g.H, b = bh / g.H;
  const int64_t first = block_first_query(j, g.q_pos, g.k_pos);
  if (first >= g.Lq) return;  // no query row of the block sees key j
  const int lane = threadIdx.x & 31;
  T kk[kMaxPerLane], vv[kMaxPerLane], x[kMaxPerLane], gd[kMaxPerLane], ak[kMaxPerLane], av[kMaxPerLane];
  load_row(k, at(kr, b, j, h, g.hd), g.hd, kk);
  load_row(v, at(vr, b, j, h, g.hd), g.hd, vv);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) ak[e] = av[e] = 0;
  const T keep = T(dm.keep);
  for (int64_t i = first; i < g.Lq; ++i) {
    const int64_t row = bh * g.Lq + i;
    load_row(q, at(qr, b, i, h, g.hd), g.hd, x);
    load_row(dout, at(gr, b, i, h, g.hd), g.hd, gd);
    const T p = exp_a(scale * dot_regs(x, kk) - lse[row]);
    const T dp = dot_regs(gd, vv);
    T pm = p, ds = p * (dp - delta[row]);
    if (dm.on) {
      const T mult = block_dropout_kept(dm, block_dropout_element(dm, b, g.H, h, g.q_pos + i, g.k_pos + j)) ? keep : T(0);
      pm = p * mult;
      ds = p * (dp * mult - delta[row]);
    }
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
      av[e] += pm * gd[e];
      ak[e] += ds * x[e];
    }
  }
  const int64_t ko = at(dkr, b, j, h, g.hd), vo = at(dvr, b, j, h, g.hd);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < g.hd) {
      dk[ko + d] += scale * ak[e];
      dv[vo + d] += av[e];
    }
  }
}

// Every tensor one float dtype (f32 or f64) on one CUDA device.
void check_tensors(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor& t0 = **ts.begin();
  for (const Tensor* t : ts)
    STRATA_CHECK(t->dtype() == t0.dtype() && t->device() == t0.device() && t->device().type == DeviceType::CUDA &&
                     (t->dtype() == DType::f32 || t->dtype() == DType::f64),
                 "[", op, "] every tensor must be f32 or f64 on one CUDA device, got ", t->str(), " beside ",
                 t0.str());
}

Geo geometry(const char* op, const Tensor& q, const Tensor& k, int64_t q_pos, int64_t k_pos, int64_t hd) {
  STRATA_CHECK(q.dim() == 3 && k.dim() == 3 && hd > 0 && q.size(2) % hd == 0 && k.size(2) == q.size(2) &&
                   k.size(0) == q.size(0),
               "[", op, "] q ", shape_str(q.shape()), " and k ", shape_str(k.shape()), " do not match (head_dim ", hd,
               ")");
  STRATA_CHECK(hd <= attention_max_head_dim(), "[", op, "] head_dim ", hd, " exceeds the CUDA kernel's ",
               attention_max_head_dim());
  const int64_t B = q.size(0), Lq = q.size(1), Lk = k.size(1), H = q.size(2) / hd;
  const AttentionBlockPlan p = attention_block_plan(B, H, Lq, Lk, q_pos, k_pos);
  return {B, Lq, Lk, H, hd, q_pos, k_pos, p.i0, p.rows};
}

void check_drop(const char* op, const AttentionDropout& d, const Geo& g) {
  STRATA_CHECK(d.p >= 0 && d.p < 1 &&
                   (d.p == 0 || (g.q_pos >= 0 && g.k_pos >= 0 && g.q_pos + g.Lq <= d.seq && g.k_pos + g.Lk <= d.seq)),
               "[", op, "] attention dropout p ", d.p, " over a sequence of ", d.seq, " does not cover queries at ",
               g.q_pos, " and keys at ", g.k_pos);
}

constexpr unsigned kBlockThreads = 32 * kWarpsPerBlock;

}  // namespace

bool attention_block_forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos, int64_t k_pos,
                                    int64_t head_dim, Tensor& out, Tensor& lse, const AttentionDropout& drop) {
  constexpr const char* kOp = "attention_block_forward";
  check_tensors(kOp, {&q, &k, &v, &out, &lse});
  const Geo g = geometry(kOp, q, k, q_pos, k_pos, head_dim);
  STRATA_CHECK(v.shape() == k.shape() && out.shape() == q.shape() && lse.is_contiguous() &&
                   lse.shape() == Shape({g.B, g.H, g.Lq}),
               "[", kOp, "] v ", shape_str(v.shape()), ", out ", shape_str(out.shape()), ", lse ",
               shape_str(lse.shape()), " do not match q ", shape_str(q.shape()), " and k ", shape_str(k.shape()));
  check_drop(kOp, drop, g);
  const AttentionBlockPlan plan = attention_block_plan(g.B, g.H, g.Lq, g.Lk, q_pos, k_pos);
  if (plan.empty) return false;
  const Rows qr = rows_of(q, kOp, "q"), kr = rows_of(k, kOp, "k"), vr = rows_of(v, kOp, "v"),
             orr = rows_of(out, kOp, "out");
  const BlockDropout dm = block_dropout_of(drop);
  OpContext ctx(out);
  STRATA_DISPATCH_FLOAT(q.dtype(), kOp, [&] {
    using T = scalar_t;
    block_fwd_k<T><<<attention_block_grid(plan.query_warps, kWarpsPerBlock), kBlockThreads, 0, ctx.stream>>>(
        g, T(1.0 / std::sqrt(double(head_dim))), dptr<const T>(q), qr, dptr<const T>(k), kr, dptr<const T>(v), vr,
        dptr<T>(out), orr, dptr<T>(lse), dm);
  });
  STRATA_CUDA_CHECK_LAUNCH(kOp);
  return true;
}

void attention_block_delta_kernel(const Tensor& dout, const Tensor& out, int64_t head_dim, Tensor& delta) {
  constexpr const char* kOp = "attention_block_delta";
  check_tensors(kOp, {&dout, &out, &delta});
  STRATA_CHECK(dout.shape() == out.shape() && out.dim() == 3 && head_dim > 0 && out.size(2) % head_dim == 0 &&
                   delta.is_contiguous() && delta.numel() == out.size(0) * out.size(1) * (out.size(2) / head_dim),
               "[", kOp, "] dout ", shape_str(dout.shape()), ", out ", shape_str(out.shape()), ", delta ",
               shape_str(delta.shape()), " do not match");
  STRATA_CHECK(head_dim <= attention_max_head_dim(), "[", kOp, "] head_dim ", head_dim, " exceeds the CUDA kernel's ",
               attention_max_head_dim());
  const int64_t L = out.size(1), H = out.size(2) / head_dim;
  const AttentionBlockPlan plan = attention_block_plan(out.size(0), H, L, 1, 0, 0);
  if (plan.delta_warps == 0) return;
  const Rows gr = rows_of(dout, kOp, "dout"), orr = rows_of(out, kOp, "out");
  OpContext ctx(delta);
  STRATA_DISPATCH_FLOAT(out.dtype(), kOp, [&] {
    using T = scalar_t;
    block_delta_k<T><<<attention_block_grid(plan.delta_warps, kWarpsPerBlock), kBlockThreads, 0, ctx.stream>>>(
        plan.delta_warps, L, H, head_dim, dptr<const T>(dout), gr, dptr<const T>(out), orr, dptr<T>(delta));
  });
  STRATA_CUDA_CHECK_LAUNCH(kOp);
}

bool attention_block_backward_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                                     const Tensor& lse, const Tensor& delta, int64_t q_pos, int64_t k_pos,
                                     int64_t head_dim, Tensor& dq, Tensor& dk, Tensor& dv,
                                     const AttentionDropout& drop) {
  constexpr const char* kOp = "attention_block_backward";
  check_tensors(kOp, {&q, &k, &v, &dout, &lse, &delta, &dq, &dk, &dv});
  const Geo g = geometry(kOp, q, k, q_pos, k_pos, head_dim);
  STRATA_CHECK(v.shape() == k.shape() && dout.shape() == q.shape() && dq.shape() == q.shape() &&
                   dk.shape() == k.shape() && dv.shape() == k.shape() && lse.is_contiguous() && delta.is_contiguous() &&
                   lse.numel() == g.B * g.H * g.Lq && delta.numel() == lse.numel(),
               "[", kOp, "] shapes do not match q ", shape_str(q.shape()), " and k ", shape_str(k.shape()));
  check_drop(kOp, drop, g);
  const AttentionBlockPlan plan = attention_block_plan(g.B, g.H, g.Lq, g.Lk, q_pos, k_pos);
  if (plan.empty) return false;
  const Rows qr = rows_of(q, kOp, "q"), kr = rows_of(k, kOp, "k"), vr = rows_of(v, kOp, "v"),
             gr = rows_of(dout, kOp, "dout"), dqr = rows_of(dq, kOp, "dq"), dkr = rows_of(dk, kOp, "dk"),
             dvr = rows_of(dv, kOp, "dv");
  const BlockDropout dm = block_dropout_of(drop);
  OpContext ctx(dq);
  // dq, then dk and dv, one after the other on the stream.
  STRATA_DISPATCH_FLOAT(q.dtype(), kOp, [&] {
    using T = scalar_t;
    const T scale = T(1.0 / std::sqrt(double(head_dim)));
    const T *pq = dptr<const T>(q), *pk = dptr<const T>(k), *pv = dptr<const T>(v), *pg = dptr<const T>(dout),
            *pl = dptr<const T>(lse), *pd = dptr<const T>(delta);
    block_dq_k<T><<<attention_block_grid(plan.query_warps, kWarpsPerBlock), kBlockThreads, 0, ctx.stream>>>(
        g, scale, pq, qr, pk, kr, pv, vr, pg, gr, pl, pd, dptr<T>(dq), dqr, dm);
    STRATA_CUDA_CHECK_LAUNCH(kOp);
    block_dkv_k<T><<<attention_block_grid(plan.key_warps, kWarpsPerBlock), kBlockThreads, 0, ctx.stream>>>(
        g, scale, pq, qr, pk, kr, pv, vr, pg, gr, pl, pd, dptr<T>(dk), dkr, dptr<T>(dv), dvr, dm);
  });
  STRATA_CUDA_CHECK_LAUNCH(kOp);
  return true;
}

}  // namespace strata::cuda
