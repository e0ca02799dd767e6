// Fused causal self-attention on CUDA, forward and backward, FlashAttention-2's algorithm:
// the (T, T) scores and probabilities are never stored. The forward keeps, per query row,
// the running maximum and sum of the online softmax and saves the row's log-sum-exp; the
// backward recomputes each probability from q, k and the log-sum-exp.
//
// Layout as the CPU kernel's (tensor/cpu/attention.h): q, k, v read in place from the
// packed (B, T, 3 * H * hd) projection, y (B, T, H * hd); the saved statistics are the
// log-sum-exp (B, H, T) of the scaled scores (f32 for f32 and 16-bit inputs, f64 for f64).
//
// One warp per row: the lanes split the head dimension (hd <= 256: up to 8 elements a
// lane), a dot product is a warp reduction, and every warp walks its row's keys (forward,
// dq) or queries (dk, dv) in order, so results are deterministic: no atomics.
//   forward   row i:  s_j = scale q_i.k_j (j <= i), online softmax, y_i = sum_j p_ij v_j
//   delta     row i:  D_i = sum_{j<=i} p_ij dy_i.v_j  (= dy_i . y_i)
//   dq        row i:  dq_i = scale sum_{j<=i} p_ij (dy_i.v_j - D_i) k_j
//   dk, dv    row j:  dv_j = sum_{i>=j} p_ij dy_i,  dk_j = scale sum_{i>=j} p_ij (dy_i.v_j - D_i) q_i
// 16-bit inputs are read and written in 16 bits with f32 arithmetic (autocast's native path).
// 16-bit calls at head sizes 32, 64 and 128 go to the tensor-core kernels (attention_mma.cu).
#include <cmath>

#include <strata/tensor/cuda/attention_warp.h>
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {
namespace {

using namespace attn;  // the warp-per-row helpers (attention_warp.h)

// The problem's sizes and this warp's row: r = (b * H + h) * T + i.
struct Shape4 {
  int64_t B, T, H, hd;
  __host__ __device__ int64_t C() const { return H * hd; }
};

__device__ __forceinline__ bool warp_row(const Shape4& s, int64_t* b, int64_t* h, int64_t* i) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (r >= s.B * s.H * s.T) return false;
  *i = r % s.T;
  *h = (r / s.T) % s.H;
  *b = r / (s.T * s.H);
  return true;
}

// Element offset of part p (0 q, 1 k, 2 v) of token t of sequence b, head h, in qkv.
__device__ __forceinline__ int64_t qkv_at(const Shape4& s, int64_t b, int64_t t, int64_t h, int p) {
  return (b * s.T + t) * 3 * s.C() + p * s.C() + h * s.hd;
}

template <class S, class A = typename Acc<S>::type>
__global__ void attn_fwd_k(Shape4 s, A scale, const S* qkv, S* y, A* lse) {
  int64_t b, h, i;
  if (!warp_row(s, &b, &h, &i)) return;
  const int lane = threadIdx.x & 31;
  A q[kMaxPerLane], o[kMaxPerLane];
  load_row(qkv, qkv_at(s, b, i, h, 0), s.hd, q);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    q[e] *= scale;
    o[e] = 0;
  }
  A m = -INFINITY, l = 0;
  for (int64_t j = 0; j <= i; ++j) {
    const A sc = dot_row(qkv, qkv_at(s, b, j, h, 1), s.hd, q);
    const A m_new = sc > m ? sc : m;
    const A c = exp_a(m - m_new), p = exp_a(sc - m_new);
    l = l * c + p;
    const int64_t vo = qkv_at(s, b, j, h, 2);
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < s.hd) o[e] = o[e] * c + p * ld(qkv, vo + d);
    }
    m = m_new;
  }
  const int64_t yo = (b * s.T + i) * s.C() + h * s.hd;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < s.hd) st(y, yo + d, o[e] / l);
  }
  if (lane == 0) lse[(b * s.H + h) * s.T + i] = m + log_a(l);
}

// D_i = sum_{j<=i} p_ij (dy_i . v_j) (= dy_i . y_i, from the saved log-sum-exp, without y).
template <class S, class A = typename Acc<S>::type>
__global__ void attn_delta_k(Shape4 s, A scale, const S* qkv, const S* dy, const A* lse, A* delta) {
  int64_t b, h, i;
  if (!warp_row(s, &b, &h, &i)) return;
  A q[kMaxPerLane], g[kMaxPerLane];
  load_row(qkv, qkv_at(s, b, i, h, 0), s.hd, q);
  load_row(dy, (b * s.T + i) * s.C() + h * s.hd, s.hd, g);
  const int64_t row = (b * s.H + h) * s.T + i;
  const A li = lse[row];
  A dd = 0;
  for (int64_t j = 0; j <= i; ++j) {
    const A p = exp_a(scale * dot_row(qkv, qkv_at(s, b, j, h, 1), s.hd, q) - li);
    dd += p * dot_row(qkv, qkv_at(s, b, j, h, 2), s.hd, g);
  }
  if ((threadIdx.x & 31) == 0) delta[row] = dd;
}

template <class S, class A = typename Acc<S>::type>
__global__ void attn_dq_k(Shape4 s, A scale, const S* qkv, const S* dy, const A* lse, const A* delta, S* dqkv) {
  int64_t b, h, i;
  if (!warp_row(s, &b, &h, &i)) return;
  const int lane = threadIdx.x & 31;
  A q[kMaxPerLane], g[kMaxPerLane], dq[kMaxPerLane];
  load_row(qkv, qkv_at(s, b, i, h, 0), s.hd, q);
  load_row(dy, (b * s.T + i) * s.C() + h * s.hd, s.hd, g);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) dq[e] = 0;
  const int64_t row = (b * s.H + h) * s.T + i;
  const A li = lse[row], di = delta[row];
  for (int64_t j = 0; j <= i; ++j) {
    const int64_t ko = qkv_at(s, b, j, h, 1);
    const A p = exp_a(scale * dot_row(qkv, ko, s.hd, q) - li);
    const A ds = p * (dot_row(qkv, qkv_at(s, b, j, h, 2), s.hd, g) - di);
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < s.hd) dq[e] += ds * ld(qkv, ko + d);
    }
  }
  const int64_t out = qkv_at(s, b, i, h, 0);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < s.hd) st(dqkv, out + d, scale * dq[e]);
  }
}

template <class S, class A = typename Acc<S>::type>
__global__ void attn_dkv_k(Shape4 s, A scale, const S* qkv, const S* dy, const A* lse, const A* delta, S* dqkv) {
  int64_t b, h, j;
  if (!warp_row(s, &b, &h, &j)) return;
  const int lane = threadIdx.x & 31;
  A k[kMaxPerLane], v[kMaxPerLane], dk[kMaxPerLane], dv[kMaxPerLane];
  load_row(qkv, qkv_at(s, b, j, h, 1), s.hd, k);
  load_row(qkv, qkv_at(s, b, j, h, 2), s.hd, v);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) dk[e] = dv[e] = 0;
  for (int64_t i = j; i < s.T; ++i) {
    const int64_t qo = qkv_at(s, b, i, h, 0), go = (b * s.T + i) * s.C() + h * s.hd;
    const int64_t row = (b * s.H + h) * s.T + i;
    const A p = exp_a(scale * dot_row(qkv, qo, s.hd, k) - lse[row]);
    const A ds = p * (dot_row(dy, go, s.hd, v) - delta[row]);
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < s.hd) {
        dv[e] += p * ld(dy, go + d);
        dk[e] += ds * ld(qkv, qo + d);
      }
    }
  }
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < s.hd) {
      st(dqkv, qkv_at(s, b, j, h, 1) + d, scale * dk[e]);
      st(dqkv, qkv_at(s, b, j, h, 2) + d, dv[e]);
    }
  }
}

Shape4 shape_of(const Tensor& qkv, int64_t hd) {
  return {qkv.size(0), qkv.size(1), qkv.size(2) / (3 * hd), hd};
}

unsigned row_blocks(const Shape4& s) {
  return unsigned((s.B * s.H * s.T + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

int64_t attention_max_head_dim() { return 32 * kMaxPerLane; }

void causal_attention_kernel(const Tensor& qkv, Tensor& y, Tensor& lse, int64_t head_dim, int64_t kv_heads) {
  const Shape4 s = shape_of(qkv, head_dim);
  STRATA_CHECK(kv_heads == s.H, "[causal_attention] the CUDA kernel takes q|k|v of ", s.H, " heads each, got ",
               kv_heads, " key/value heads");
  if (s.B * s.H * s.T == 0 || mma_causal_attention(qkv, y, lse, head_dim)) return;
  STRATA_CHECK(head_dim <= attention_max_head_dim(), "[causal_attention] head_dim ", head_dim,
               " exceeds the CUDA kernel's ", attention_max_head_dim());
  OpContext ctx(y);
  dispatch_storage(qkv.dtype(), "causal_attention", [&]<class S>() {
    using A = typename Acc<S>::type;
    attn_fwd_k<S><<<row_blocks(s), 32 * kWarpsPerBlock, 0, ctx.stream>>>(
        s, A(1.0 / std::sqrt(double(head_dim))), static_cast<const S*>(qkv.raw_data()), static_cast<S*>(y.raw_data()),
        static_cast<A*>(lse.raw_data()));
  });
  STRATA_CUDA_CHECK_LAUNCH("causal_attention");
}

void causal_attention_backward_kernel(const Tensor& dy, const Tensor& qkv, const Tensor& lse, Tensor& dqkv,
                                      int64_t head_dim, int64_t kv_heads) {
  const Shape4 s = shape_of(qkv, head_dim);
  STRATA_CHECK(kv_heads == s.H, "[causal_attention_backward] the CUDA kernel takes q|k|v of ", s.H,
               " heads each, got ", kv_heads, " key/value heads");
  if (s.B * s.H * s.T == 0 || mma_causal_attention_backward(dy, qkv, lse, dqkv, head_dim)) return;
  OpContext ctx(dqkv);
  dispatch_storage(qkv.dtype(), "causal_attention_backward", [&]<class S>() {
    using A = typename Acc<S>::type;
    const A scale = A(1.0 / std::sqrt(double(head_dim)));
    Tensor delta = Tensor::empty(lse.shape(), lse.dtype(), lse.device());
    const auto* pq = static_cast<const S*>(qkv.raw_data());
    const auto* pg = static_cast<const S*>(dy.raw_data());
    auto* pd = static_cast<S*>(dqkv.raw_data());
    const auto* pl = static_cast<const A*>(lse.raw_data());
    auto* pdelta = static_cast<A*>(delta.raw_data());
    const unsigned blocks = row_blocks(s), threads = 32 * kWarpsPerBlock;
    attn_delta_k<S><<<blocks, threads, 0, ctx.stream>>>(s, scale, pq, pg, pl, pdelta);
    STRATA_CUDA_CHECK_LAUNCH("causal_attention_backward");
    attn_dq_k<S><<<blocks, threads, 0, ctx.stream>>>(s, scale, pq, pg, pl, pdelta, pd);
    STRATA_CUDA_CHECK_LAUNCH("causal_attention_backward");
    attn_dkv_k<S><<<blocks, threads, 0, ctx.stream>>>(s, scale, pq, pg, pl, pdelta, pd);
  });
  STRATA_CUDA_CHECK_LAUNCH("causal_attention_backward");
}

}  // namespace strata::cuda
