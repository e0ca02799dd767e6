// CPU kernels for a residual add fused with the LayerNorm that reads its result (a
// pre-LN transformer's residual stream: s = r + (y + b), then layer_norm(s)), forward and
// backward, over the rows of contiguous (rows, C) matrices.
#pragma once
#include <cstdint>

#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// y = s = r + (y + b) in place (b (C) or undefined, r (rows, C)), then
/// z = (s - mean) * rstd * w + lb per row (w/lb (C) may be undefined), one pass per row.
/// mean, rstd: (rows), f32 for f16/bf16 inputs, else the input's dtype. s and z are bit for
/// bit bias_residual_kernel's and layer_norm_kernel's (z and the statistics read the
/// rounded s).
void bias_residual_layer_norm_kernel(Tensor& y, const Tensor& b, const Tensor& r, const Tensor& w, const Tensor& lb,
                                     Tensor& z, Tensor& mean, Tensor& rstd, int64_t rows, int64_t C, double eps);

/// ds = layer_norm_backward's dx of (dz, s) + g, one pass per row; g (rows, C) the gradient
/// s received from its other consumers (undefined: none); ds may be g itself (written in
/// place). dw, db (C) each only when defined, as layer_norm_backward_kernel's (same blocks,
/// same order). Every value is bit for bit layer_norm_backward_kernel's, then one add
/// rounded as the engine's add_ of the two gradients.
void layer_norm_backward_add_kernel(const Tensor& dz, const Tensor& s, const Tensor& mean, const Tensor& rstd,
                                    const Tensor& w, const Tensor& g, Tensor& ds, Tensor& dw, Tensor& db,
                                    int64_t rows, int64_t C);

}  // namespace strata::cpu
