// Model FLOPs per training step and model-FLOPs utilisation (MFU), as llm.c and Megatron
// print them: the FLOPs the model needs (not what the kernels executed: recomputation
// under activation checkpointing is not counted) against a peak FLOP/s.
#pragma once
#include <cstdint>

#include "apps/config.h"
#include <strata/nn/module.h>

namespace strata::apps {

/// FLOPs of one training sample (forward + backward = 3 x forward, the usual convention),
/// from the description of `cfg`'s model family (nn::ModelSpec::flops_per_sample):
///   gpt, llama: per token 6N + 12·L·C·T (PaLM's estimate: N = all parameters, the attention
///        scores and values of T positions), times T tokens; with a mixture of experts N is
///        the active parameters (a token's top_k experts of each MoE layer, the router and the
///        shared experts: nn::ModelSpec::active_params);
///   mlp, cnn: the direct count, 2·in·out per linear layer and 2·Cin·Cout·K²·H·W per
///        convolution (3x3, padding 1, each block's output halved by pooling), times 3.
/// The whole model's count, also where this rank holds a tp or pipeline shard of it.
double train_flops_per_sample(const TrainConfig& cfg);

/// This machine's sustained f32 GEMM throughput (FLOP/s) through ops::matmul at the
/// current thread count: the best of five 1024³ products after a warm-up (~0.1 s).
double measured_gemm_flops();

}  // namespace strata::apps
