// Tensor-parallel shards in checkpoints: every rank's pieces are translated from its
// shard's coordinates into flat ranges of the global tensor (global names and shapes),
// and loads read each rank's shard back from a checkpoint of any layout.
#pragma once
#include <utility>
#include <vector>

#include <strata/nn/module.h>
#include <strata/optim/optimizer.h>
#include <strata/parallel/checkpoint/reader.h>
#include <strata/parallel/checkpoint/writer.h>
#include <strata/parallel/tensor/plan.h>
#include <strata/parallel/data/zero.h>

namespace strata::parallel {

/// The sharded parameter a checkpoint tensor belongs to: the parameter itself or its
/// optimizer state "<kind>.<param>"; nullptr when it is replicated over tp.
const TpShardedParam* tp_sharded_of(const TpLayout& layout, const std::string& name);

/// The runs [begin, end) of the global tensor that elements [b, e) of rank `rank`'s
/// flattened shard occupy, in order (a shard is rows of chunk * post contiguous elements).
std::vector<std::pair<int64_t, int64_t>> tp_global_runs(const TpShardedParam& p, int rank, int n, int64_t b,
                                                        int64_t e);

/// Pieces of the tp shard's model (flat ranges in shard coordinates, as replicated_pieces
/// or ZeroDataParallel::state_pieces give them) as pieces of the global tensors: sharded
/// ones split into their global runs on every tp rank, replicated ones kept on tp rank 0
/// only (they are equal on every tp rank).
std::vector<ShardPiece> tp_global_pieces(const std::vector<ShardPiece>& local, const TpLayout& layout);

/// Elements [b, e) of this rank's shard of `name` read from a checkpoint of any layout
/// (for a replicated tensor, of the tensor itself). DataError naming the checkpoint and
/// tensor when the checkpoint's tensor does not have `local`'s global shape.
Tensor tp_read(const TensorSource& ck, const TpLayout& layout, const std::string& name, const Shape& local,
               DType dtype, int64_t b, int64_t e);

/// Loads this tp rank's shard of every parameter and buffer (and of the optimizer state
/// when `opt` is given) into a model sharded by apply_tp and not ZeRO-wrapped. Everything
/// is read and checked before anything changes.
/// `agree_over`: the ranks that agree on the outcome of the reads before any rank changes
/// its model (none by default).
void load_tp(const TensorSource& ck, nn::Module& model, optim::Optimizer* opt, const TpLayout& layout,
             comm::ProcessGroup* agree_over = nullptr);
/// The same for a ZeRO-wrapped tp shard (every rank reads its dp slices of its tp shard).
/// `agree_over`: the ranks that agree on the outcome of the reads (none by default).
void load_tp_zero(const TensorSource& ck, ZeroDataParallel& zero, bool with_optimizer, const TpLayout& layout,
                  comm::ProcessGroup* agree_over = nullptr);

}  // namespace strata::parallel
