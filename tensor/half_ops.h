// Ops of the 16-bit model states regime (docs/precision.md) that ops.h's f32 entry points
// do not cover: the fused mixed-precision optimizer steps (f32 master weights and state,
// 16-bit parameters and gradients) and cross-entropy's backward into 16-bit logits.
#pragma once
#include <strata/tensor/ops.h>

namespace strata::ops {

/// Mixed precision: the f32 master weights `master` and f32 state m, v take the
/// Adam/AdamW step with `grad` (param16's dtype, widened per element, or f32); param16
/// (bf16/f16, the model's parameter) receives the new master rounded to nearest even in
/// the same pass. All contiguous, same shape. CPU and CUDA (one fused kernel each).
void adam_step_mixed_(Tensor& master, Tensor& param16, const Tensor& grad, Tensor& m, Tensor& v,
                      const AdamParams& p);
/// The same for SGD (buf f32; used only when momentum != 0).
void sgd_step_mixed_(Tensor& master, Tensor& param16, const Tensor& grad, Tensor& buf, const SgdParams& p);

/// cross_entropy_backward writing d logits in `grad_dtype`: bf16/f16 logits on the CPU
/// keep f32 probabilities (and an f32 loss, see ops::cross_entropy) and get a 16-bit
/// gradient; otherwise grad_dtype must be probs' dtype.
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& probs, const Tensor& target, int64_t ignore_index,
                              DType grad_dtype);

}  // namespace strata::ops
