// Blockwise causal attention ops (the front end of tensor/cpu/attention_block.* and
// tensor/cuda/attention_block.cu): one query block against one key block at global
// positions, merged with the online softmax, and its backward. Dispatched by device (CPU
// and CUDA, f32 and f64). Used by ring attention (parallel/context/context_parallel).
#pragma once
#include <cstdint>

#include <strata/tensor/tensor.h>

namespace strata {

/// Dropout on attention probabilities, counter-based: element (b, h, i, j) of the whole
/// (B, H, T, T) probability tensor (global query i, global key j) is kept iff
/// (Philox word e % 4 of counter base + e / 4 under `seed`) >> 8 >= ceil(p 2^24), with
/// e = ((b H + h) T + i) T + j, and then scaled by 1 / (1 - p) -- exactly ops::dropout's
/// mask of that contiguous tensor drawn at `base` (Generator::reserve(B H T T)). So the
/// mask of an element is the same whether attention runs whole or as blocks on any rank.
/// p == 0: no dropout.
struct AttentionDropout {
  double p = 0;
  uint64_t seed = 0, base = 0;
  int64_t seq = 0;  ///< T, the whole sequence length (the probability tensor's last two dims)
};

}  // namespace strata

namespace strata::ops {

/// See cpu::attention_block_forward: q (B, Lq, H*hd) at positions q_pos.., k, v (B, Lk,
/// H*hd) at k_pos.., causal on the global positions; merged into out (B, Lq, H*hd) and
/// lse (B, H, Lq) in place. Returns false for a wholly masked block (nothing changed).
/// With drop.p > 0 the probabilities are dropped out as `drop` says (lse stays that of
/// the undropped softmax).
bool attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos, int64_t k_pos,
                             int64_t head_dim, Tensor& out, Tensor& lse, const AttentionDropout& drop = {});
/// delta (B, H, Lq) = per-head rowsum(dout * out), written in place.
void attention_block_delta(const Tensor& dout, const Tensor& out, int64_t head_dim, Tensor& delta);
/// One block's gradient added into dq, dk, dv (see cpu::attention_block_backward); the
/// forward's `drop` (its mask recomputed, never stored).
bool attention_block_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                              const Tensor& lse, const Tensor& delta, int64_t q_pos, int64_t k_pos, int64_t head_dim,
                              Tensor& dq, Tensor& dk, Tensor& dv, const AttentionDropout& drop = {});

}  // namespace strata::ops
