// CPU kernels for fused causal self-attention over a packed q|k|v projection: each
// (batch, head) pair is computed in register tiles over small packed copies of its q, k, v
// (attention.cpp), reading the packed layouts in place and writing y and d(q|k|v) into them
// (no head split/merge copies); only the causal lower triangle is computed, and only the
// rows' log-sum-exp is kept for the backward.
#pragma once
#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// qkv (B, T, (H + 2*Hkv)*hd) contiguous: q (H heads of hd) | k | v (Hkv heads each; Hkv
/// = kv_heads, H/Hkv query heads per key/value head; 0: Hkv = H) -> y (B, T, H*hd) and each
/// query row's log-sum-exp of its scaled scores, lse (B, H, T) (the CUDA kernel's), both
/// contiguous and preallocated. f32/f64.
void causal_attention_kernel(const Tensor& qkv, Tensor& y, Tensor& lse, int64_t head_dim, int64_t kv_heads);
/// dqkv (the shape of qkv) from dy (B, T, H*hd), the forward's qkv and lse (the
/// probabilities recomputed from them); all contiguous. A key/value head's gradient sums
/// its query heads' parts.
void causal_attention_backward_kernel(const Tensor& dy, const Tensor& qkv, const Tensor& lse, Tensor& dqkv,
                                      int64_t head_dim, int64_t kv_heads);

/// As causal_attention_kernel on q and k turned by the rotary embedding (rotary_kernel's
/// rotate-half form at positions (T) i64 with inv_freq (hd/2) f64), turned while each pair's
/// rows are packed: bit for bit causal_attention_kernel of rotary_kernel's output (q and k
/// heads turned, v as it is), without that tensor.
void causal_attention_rotary_kernel(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq, Tensor& y,
                                    Tensor& lse, int64_t head_dim, int64_t kv_heads);
/// Its backward: d(qkv as given), the q and k parts turned back (bit for bit rotary_kernel's
/// inverse of causal_attention_backward_kernel's gradient of the turned qkv).
void causal_attention_rotary_backward_kernel(const Tensor& dy, const Tensor& qkv, const Tensor& positions,
                                             const Tensor& inv_freq, const Tensor& lse, Tensor& dqkv,
                                             int64_t head_dim, int64_t kv_heads);

}  // namespace strata::cpu
