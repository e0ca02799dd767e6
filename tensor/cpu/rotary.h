// CPU kernel for rotary position embeddings (RoPE) in the rotate-half layout.
#pragma once
#include <cstdint>

#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// x (B, T, H, hd) contiguous, positions (T) i64, inv_freq (hd/2) f64 -> y (B, T, H, hd).
/// Rotate-half (split halves) layout, as Hugging Face's LlamaForCausalLM: for i < hd/2 the
/// pair (x[i], x[i + hd/2]) turns by the angle a = positions[t] * inv_freq[i]:
///   y[i]        = x[i] cos a - x[i + hd/2] sin a
///   y[i + hd/2] = x[i + hd/2] cos a + x[i] sin a
/// (Meta's reference code pairs interleaved elements (x[2i], x[2i+1]) instead.) With
/// `inverse` the angle is -a: the rotation's transpose, which is its backward. Only heads
/// h < rotated turn; the others are copied (the v heads of a packed q|k|v).
void rotary_kernel(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& y, int64_t B, int64_t T,
                   int64_t H, int64_t hd, bool inverse, int64_t rotated);

}  // namespace strata::cpu
