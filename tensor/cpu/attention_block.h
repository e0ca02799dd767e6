// CPU kernels of blockwise causal attention (flash-attention's online softmax): one
// block of queries against one block of keys, merged into a running output and per-row
// log-sum-exp, so attention over keys that arrive block by block (ring attention over a
// context-parallel group) never holds the whole T x T score matrix.
#pragma once
#include <strata/tensor/attention_block.h>  // AttentionDropout
#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// Queries (B, Lq, H*hd) at global positions q_pos .. q_pos+Lq-1 against keys/values
/// (B, Lk, H*hd) at k_pos .. k_pos+Lk-1, causal on the global positions (key <= query),
/// scale 1/sqrt(hd). Merged into out (B, Lq, H*hd) and lse (B, H, Lq): rows start at
/// out 0 and lse -inf; after every key block has been merged, out is the softmax-
/// weighted sum and lse the log of the softmax denominator. q, k, v, out: views with a
/// unit last stride (any row and batch strides, e.g. slices of a packed q|k|v); lse
/// contiguous; one float dtype. Returns false (and changes nothing) when the block is
/// wholly masked (every key after every query). With drop.p > 0 the block's
/// probabilities are dropped out by their global (b, h, i, j) before they weigh v; lse
/// stays the undropped softmax's (dropout acts after the normalisation).
bool attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos, int64_t k_pos,
                             int64_t head_dim, Tensor& out, Tensor& lse, const AttentionDropout& drop);

/// delta (B, H, Lq) = sum over each head's hd columns of dout * out (the softmax
/// backward's row term); dout and out (B, Lq, H*hd) with a unit last stride.
void attention_block_delta(const Tensor& dout, const Tensor& out, int64_t head_dim, Tensor& delta);

/// The gradient of one block, added into dq (B, Lq, H*hd) and dk, dv (B, Lk, H*hd)
/// (views with a unit last stride): with P = exp(scale q k^T - lse) (the final softmax,
/// masked), dv += P^T dout, dS = P * (dout v^T - delta), dq += scale dS k, dk += scale
/// dS^T q. lse and delta from the forward's final values. Returns false (and changes
/// nothing) for a wholly masked block. With dropout (mask M: 0 or 1/(1-p), recomputed
/// from `drop`): dv += (P M)^T dout and dS = P * (M (dout v^T) - delta) (delta =
/// rowsum(dout * out) is still the softmax backward's row term: flash-attention's).
bool attention_block_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                              const Tensor& lse, const Tensor& delta, int64_t q_pos, int64_t k_pos, int64_t head_dim,
                              Tensor& dq, Tensor& dk, Tensor& dv, const AttentionDropout& drop);

}  // namespace strata::cpu
