// Tensor-parallel communication regions (Megatron-LM's mappings.py): the four autograd
// functions over the tp group from which column- and row-parallel layers are built.
#pragma once
#include "comm/process_group.h"
#include "tensor/tensor.h"

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

/// The non-differentiable gather along the last dimension that gather_from_tp runs:
/// the collectives concatenate along the flat dimension 0, so x (..., c) is gathered
/// into a (tp, ..., c) buffer and permuted to (..., tp, c), one copy, then viewed as
/// (..., tp * c).
Tensor all_gather_last_dim(const Tensor& x, comm::ProcessGroup& tp);
/// This rank's chunk of the last dimension of x, contiguous (one copy).
Tensor last_dim_chunk(const Tensor& x, comm::ProcessGroup& tp);

}  // namespace strata::parallel
