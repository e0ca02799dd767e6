// The launch plan of the CUDA blockwise attention kernels (attention_block.cu) and the
// index math they share with the CPU kernel (tensor/cpu/attention_block.cpp): which keys
// of a block a query row sees, which query rows see a key, how many warps each kernel
// runs, and the attention-dropout multiplier of one (b, h, query, key). Host-testable
// (STRATA_HD), so the CPU tests check exactly what the kernels compute.
#pragma once
#include <cstdint>

#include <strata/tensor/attention_block.h>  // AttentionDropout
#include <strata/tensor/cuda/hd.h>
#include <strata/tensor/cuda/philox.h>

namespace strata::cuda {

/// Keys [0, m) of a block that query row i sees (causal on the global positions, key <=
/// query): m = clamp(q_pos + i - k_pos + 1, 0, lk), the CPU kernel's `visible`.
STRATA_HD int64_t block_visible_keys(int64_t i, int64_t q_pos, int64_t k_pos, int64_t lk) {
  const int64_t m = q_pos + i - k_pos + 1;
  return m < 0 ? 0 : (m > lk ? lk : m);
}

/// The first query row that sees key j (every later row sees it too): max(0, j + k_pos -
/// q_pos). Key j is seen by no row when this is >= lq.
STRATA_HD int64_t block_first_query(int64_t j, int64_t q_pos, int64_t k_pos) {
  const int64_t i = j + k_pos - q_pos;
  return i < 0 ? 0 : i;
}

/// One block's kernels: rows before i0 see no key (left alone); the forward and the dq
/// kernel run one warp per (b, h, row in [i0, lq)), the delta kernel one per (b, h, row),
/// the dk/dv kernel one per (b, h, key). Nothing else is allocated (no workspace): each
/// warp keeps its row in registers.
struct AttentionBlockPlan {
  int64_t i0 = 0, rows = 0;  ///< the rows [i0, i0 + rows) that see at least one key
  int64_t query_warps = 0;   ///< B * H * rows
  int64_t delta_warps = 0;   ///< B * H * lq
  int64_t key_warps = 0;     ///< B * H * lk
  bool empty = true;         ///< wholly masked or a zero size: nothing to compute, nothing changed
};

inline AttentionBlockPlan attention_block_plan(int64_t B, int64_t H, int64_t lq, int64_t lk, int64_t q_pos,
                                               int64_t k_pos) {
  AttentionBlockPlan p;
  p.i0 = k_pos > q_pos ? k_pos - q_pos : 0;
  p.empty = B == 0 || H == 0 || lq == 0 || lk == 0 || p.i0 >= lq;
  p.delta_warps = B * H * lq;
  if (p.empty) return p;
  p.rows = lq - p.i0;
  p.query_warps = B * H * p.rows;
  p.key_warps = B * H * lk;
  return p;
}

/// Thread blocks of `warps_per_block` warps for `warps` warps (at least 1).
inline unsigned attention_block_grid(int64_t warps, int warps_per_block) {
  const int64_t b = (warps + warps_per_block - 1) / warps_per_block;
  return unsigned(b < 1 ? 1 : b);
}

/// AttentionDropout as the kernels take it: Philox key `seed`, counter `base`, the
/// whole sequence length `seq`, the keep threshold of dropout_threshold(p) and the kept
/// elements' multiplier 1 / (1 - p). on == false: no dropout.
struct BlockDropout {
  bool on = false;
  uint64_t seed = 0, base = 0, seq = 0;
  uint32_t threshold = 0;
  double keep = 1;
};

inline BlockDropout block_dropout_of(const AttentionDropout& a) {
  BlockDropout d;
  d.on = a.p > 0;
  d.seed = a.seed;
  d.base = a.base;
  d.seq = uint64_t(a.seq);
  d.threshold = dropout_threshold(a.p);
  d.keep = a.p < 1 ? 1.0 / (1.0 - a.p) : 0.0;  // as the CPU kernel's DropMask
  return d;
}

/// Index e of element (b, h, global query qi, global key kj) of the whole (B, H, T, T)
/// probability tensor: ((b H + h) T + qi) T + kj.
STRATA_HD uint64_t block_dropout_element(const BlockDropout& d, int64_t b, int64_t heads, int64_t h, int64_t qi,
                                         int64_t kj) {
  return (uint64_t(b * heads + h) * d.seq + uint64_t(qi)) * d.seq + uint64_t(kj);
}

/// Word k (0..3) of a Philox block, selected without indexing (a kernel's words then stay
/// in registers).
STRATA_HD uint32_t philox_word(const PhiloxWords& w, uint64_t k) {
  return k == 0 ? w.w[0] : k == 1 ? w.w[1] : k == 2 ? w.w[2] : w.w[3];
}

/// Whether element e is kept: Philox word e % 4 of counter base + e / 4, (word >> 8) >=
/// threshold (ops::dropout's mask of the whole tensor).
STRATA_HD bool block_dropout_kept(const BlockDropout& d, uint64_t e) {
  return (philox_word(philox_block(d.seed, d.base + e / 4), e % 4) >> 8) >= d.threshold;
}

}  // namespace strata::cuda
