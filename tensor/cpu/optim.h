// CPU kernels for the fused optimizer updates (one pass over param, grad, state).
#pragma once
#include <strata/tensor/ops.h>

namespace strata::cpu {

/// Adam / AdamW as torch.optim (bias-corrected, eps outside the sqrt). All contiguous, same shape.
void adam_kernel(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const ops::AdamParams& p);
/// SGD as torch.optim.SGD; buf is used only when momentum != 0.
void sgd_kernel(Tensor& param, const Tensor& grad, Tensor& buf, const ops::SgdParams& p);

/// Mixed precision: master (f32), m, v (f32) updated with grad (bf16/f16/f32, widened per
/// element); param16 (bf16/f16) = the new master rounded to nearest even, same pass.
void adam_mixed_kernel(Tensor& master, Tensor& param16, const Tensor& grad, Tensor& m, Tensor& v,
                       const ops::AdamParams& p);
/// The same for SGD (buf f32, used only when momentum != 0).
void sgd_mixed_kernel(Tensor& master, Tensor& param16, const Tensor& grad, Tensor& buf, const ops::SgdParams& p);

}  // namespace strata::cpu
