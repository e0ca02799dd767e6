// Causal self-attention composed from the generic ops (batched matmul, masked_fill,
// softmax, strided copies): the kernel of ops::causal_attention on devices without a
// fused one (tensor/nn_ops.cpp registers it for CUDA), and a reference for the tests.
#pragma once
#include <strata/tensor/tensor.h>

namespace strata::ops::detail {

/// As the causal_attention kernels (tensor/cpu/attention.h): qkv (B, T, 3*H*hd) -> y
/// (B, T, H*hd) and probs (B, H, T, T), preallocated, on any one device.
void composed_causal_attention(const Tensor& qkv, Tensor& y, Tensor& probs, int64_t head_dim);
/// dqkv (B, T, 3*H*hd), preallocated, from dy (B, T, H*hd) contiguous, qkv and probs.
void composed_causal_attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& probs, Tensor& dqkv,
                                        int64_t head_dim);

}  // namespace strata::ops::detail
