// Tensor-parallel communication regions (Megatron-LM's mappings.py): the four autograd
// functions over the tp group from which column- and row-parallel layers are built.
#pragma once
#include <strata/comm/process_group.h>
#include <strata/tensor/tensor.h>

namespace strata::parallel {

/// Every function is collective over `tp` (each rank of the group calls it, in the same
/// order, in forward and in backward) and a plain identity / copy when tp.size() == 1.
/// Tensors live on tp.device(). The returned tensor is new (never an in-place change of x).

/// Forward: identity (x is already replicated on every tp rank). Backward: the gradient
/// is all-reduced (summed) over tp. Enters a tensor-parallel region (f in Megatron).
Tensor copy_to_tp(const Tensor& x, comm::ProcessGroup& tp);
/// Forward: x is all-reduced (summed) over tp. Backward: identity. Leaves a region (g).
Tensor reduce_from_tp(const Tensor& x, comm::ProcessGroup& tp);
/// Forward: this rank's chunk of the last dimension, x (..., C) -> (..., C / tp) (C must
/// divide). Backward: the chunks are gathered along the last dimension.
Tensor scatter_to_tp(const Tensor& x, comm::ProcessGroup& tp);
/// Forward: every rank's x (..., c) concatenated along the last dimension in rank order
/// -> (..., tp * c). Backward: this rank's chunk of the gradient.
Tensor gather_from_tp(const Tensor& x, comm::ProcessGroup& tp);

/// Sequence parallelism (Megatron-SP) on the (B, T, C) layout, along dimension 1:
/// forward gathers every rank's (B, T/tp, C) sequence shard into (B, T, C) in rank order;
/// backward reduce-scatters the gradient (sums over tp, keeps this rank's T/tp rows).
Tensor all_gather_seq(const Tensor& x, comm::ProcessGroup& tp);
/// Forward: this rank's (B, T/tp, C) rows of a replicated (B, T, C) (where the residual
/// stream enters the sequence-parallel region). Backward: the gradient shards are gathered.
Tensor scatter_to_seq(const Tensor& x, comm::ProcessGroup& tp);
/// Forward: (B, T, C) summed over tp, this rank keeping rows [rank T/tp, (rank+1) T/tp)
/// of dimension 1. Backward: the gradient shards are gathered. T must divide by tp.
Tensor reduce_scatter_seq(const Tensor& x, comm::ProcessGroup& tp);

/// The non-differentiable collectives the regions run. The process group's collectives
/// concatenate along the flat dimension 0, so a gather along `dim` gathers into a
/// (tp, ...) buffer and permutes the tp axis in front of `dim` (one copy), and a
/// reduce-scatter along `dim` first permutes the tp blocks of `dim` to the front (one
/// copy). New contiguous tensors; a copy at tp 1.
Tensor all_gather_dim(const Tensor& x, int64_t dim, comm::ProcessGroup& tp);
Tensor reduce_scatter_dim(const Tensor& x, int64_t dim, comm::ProcessGroup& tp);
/// This rank's chunk of dimension `dim` of x, contiguous (one copy).
Tensor dim_chunk(const Tensor& x, int64_t dim, comm::ProcessGroup& tp);

}  // namespace strata::parallel
