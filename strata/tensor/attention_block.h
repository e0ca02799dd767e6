// Blockwise causal attention ops (the front end of tensor/cpu/attention_block.*): one
// query block against one key block at global positions, merged with the online softmax,
// and its backward. Dispatched by device; CPU kernels only so far (CUDA: an error naming
// the op). Used by ring attention (parallel/context_parallel).
#pragma once
#include <strata/tensor/tensor.h>

namespace strata::ops {

/// See cpu::attention_block_forward: q (B, Lq, H*hd) at positions q_pos.., k, v (B, Lk,
/// H*hd) at k_pos.., causal on the global positions; merged into out (B, Lq, H*hd) and
/// lse (B, H, Lq) in place. Returns false for a wholly masked block (nothing changed).
bool attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos, int64_t k_pos,
                             int64_t head_dim, Tensor& out, Tensor& lse);
/// delta (B, H, Lq) = per-head rowsum(dout * out), written in place.
void attention_block_delta(const Tensor& dout, const Tensor& out, int64_t head_dim, Tensor& delta);
/// One block's gradient added into dq, dk, dv (see cpu::attention_block_backward).
bool attention_block_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                              const Tensor& lse, const Tensor& delta, int64_t q_pos, int64_t k_pos, int64_t head_dim,
                              Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace strata::ops
