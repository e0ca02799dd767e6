// Training state <-> sharded checkpoints for every data-parallel layout: an unsharded
// model (one process, DDP, DataParallel's replica 0) writes everything whole from rank
// 0; ZeRO writes each rank's slices. Either loads into either, at any world size.
#pragma once
#include <vector>

#include <strata/nn/module.h>
#include <strata/optim/optimizer.h>
#include <strata/parallel/checkpoint/reader.h>
#include <strata/parallel/checkpoint/writer.h>
#include <strata/parallel/data/zero.h>

namespace strata::parallel {

/// Key of the optimizer scalars (Optimizer::state_dict().scalars) in the checkpoint meta.
inline constexpr const char* kOptimizerMetaKey = "optimizer";

/// DataError naming the checkpoint and tensor unless `ck` holds `name` with `shape` and a
/// dtype that loads into `dtype` (any floating dtype into any floating tensor: parameters
/// and optimizer state move between precisions).
void expect_floating(const TensorSource& ck, const std::string& name, const Shape& shape, DType dtype);
/// The optimizer scalars of the checkpoint's meta; DataError naming the checkpoint when it
/// was saved without optimizer state.
const nlohmann::json& optimizer_meta(const TensorSource& ck);

/// An unsharded model's pieces: on rank 0 every parameter and buffer whole, and (when
/// `opt` is given) every optimizer state tensor "<kind>.<param>" whole; nothing elsewhere.
std::vector<ShardPiece> replicated_pieces(const nn::Module& model, const optim::Optimizer* opt, int rank);

/// Loads parameters and buffers (and the optimizer, when `opt` is given, from the state
/// tensors and meta[kOptimizerMetaKey]) from a checkpoint of any layout into an unsharded
/// model. Every tensor is read and checked against the model first (DataError naming the
/// checkpoint and tensor: missing, wrong shape or dtype); nothing changes on error.
/// `agree_over`: the ranks that agree on the outcome of the reads before any rank changes
/// its model (none by default).
void load_replicated(const TensorSource& ck, nn::Module& model, optim::Optimizer* opt,
                     comm::ProcessGroup* agree_over = nullptr);

/// Loads a checkpoint of any layout into a ZeRO-wrapped model (collective; see
/// ZeroDataParallel::load_state). The same checks as load_replicated first.
/// `agree_over`: the ranks that agree on the outcome of the reads (none by default).
void load_zero(const TensorSource& ck, ZeroDataParallel& zero, bool with_optimizer,
               comm::ProcessGroup* agree_over = nullptr);

}  // namespace strata::parallel
