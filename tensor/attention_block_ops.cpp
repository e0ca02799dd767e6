// Device dispatch of the blockwise attention ops (tensor/attention_block.h).
#include <strata/tensor/attention_block.h>

#include <strata/tensor/cpu/attention_block.h>
#include <strata/tensor/dispatch.h>

namespace strata::ops {
namespace {

using BlockFwdFn = bool(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, int64_t, Tensor&, Tensor&,
                        const AttentionDropout&);
using BlockDeltaFn = void(const Tensor&, const Tensor&, int64_t, Tensor&);
using BlockBwdFn = bool(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        int64_t, int64_t, int64_t, Tensor&, Tensor&, Tensor&, const AttentionDropout&);
const KernelTable<BlockFwdFn> kBlockFwd{"attention_block_forward", {&cpu::attention_block_forward, nullptr}};
const KernelTable<BlockDeltaFn> kBlockDelta{"attention_block_delta", {&cpu::attention_block_delta, nullptr}};
const KernelTable<BlockBwdFn> kBlockBwd{"attention_block_backward", {&cpu::attention_block_backward, nullptr}};

}  // namespace

bool attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos, int64_t k_pos,
                             int64_t head_dim, Tensor& out, Tensor& lse, const AttentionDropout& drop) {
  return kBlockFwd(q.device())(q, k, v, q_pos, k_pos, head_dim, out, lse, drop);
}

void attention_block_delta(const Tensor& dout, const Tensor& out, int64_t head_dim, Tensor& delta) {
  kBlockDelta(out.device())(dout, out, head_dim, delta);
}

bool attention_block_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                              const Tensor& lse, const Tensor& delta, int64_t q_pos, int64_t k_pos, int64_t head_dim,
                              Tensor& dq, Tensor& dk, Tensor& dv, const AttentionDropout& drop) {
  return kBlockBwd(q.device())(q, k, v, dout, lse, delta, q_pos, k_pos, head_dim, dq, dk, dv, drop);
}

}  // namespace strata::ops
