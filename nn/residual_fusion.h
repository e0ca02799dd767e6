// Where a transformer block may fuse its residual add into a sublayer's output projection
// (the projection's GEMM, then one pass residual + (y + b): autograd's linear_residual).
// Shared by the GPT and Llama blocks.
#pragma once
#include <memory>

#include <strata/autograd/autocast.h>
#include <strata/nn/module.h>

namespace strata::nn {

/// m as M where a block may call its forward_add (the residual joining the output
/// projection) instead of operator(): m is exactly an M, without forward hooks, and x is
/// f32/f64 outside autocast (where linear_residual fuses). Elsewhere the block adds the
/// residual itself after m returns, once m's locals are gone, so the forward's peak memory
/// is that of the unfused ops (CudaAutocast.GptForwardHoldsLessActivationMemoryInBf16).
template <class M>
M* residual_fusable(const std::shared_ptr<Module>& m, const Tensor& x) {
  const bool fuses_here = (x.dtype() == DType::f32 || x.dtype() == DType::f64) && !autocast_dtype();
  return m && fuses_here ? plain_module<M>(*m) : nullptr;
}

}  // namespace strata::nn
