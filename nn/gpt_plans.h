// The GPT's parallel plans, next to its module: the tensor-parallel plan (Megatron's
// blocks, a vocabulary-parallel head, sequence parallelism), the pipeline split by
// blocks, the limits tp, pp and cp must respect, and the sequence splits it supports.
#pragma once
#include <cstdint>
#include <vector>

#include <strata/nn/gpt.h>
#include <strata/nn/parallel_plan.h>

namespace strata::nn {

/// Per block attn.c_attn colwise by whole q|k|v heads, attn.c_proj rowwise, mlp.c_fc
/// colwise, mlp.c_proj rowwise, the attention dropout parallel_rng; wte (the tied head)
/// and an untied lm_head vocab_parallel; with `sequence_parallel` every LayerNorm
/// sequence_norm and the dropouts on the residual stream parallel_rng.
TpPlan gpt_tp_plan(const GPTConfig& cfg, bool sequence_parallel = false);

/// Blocks "h"; wte, wpe, drop on the first stage; ln_f and the head (wte itself when
/// tied, summed over the embedding group) on the last; a stage sends (B, T, n_embd)
/// activations in the model's parameter dtype. `layers` is parallel.pp_layers.
/// `seq_shards`: parallel.tp under sequence parallelism (a stage sends its sequence shard
/// (B, T/tp, n_embd)), else 1. The loss is GPT::stage_loss (vocabulary-parallel under
/// tp): the plan refers to `model`, which must outlive it. `cp`: parallel.cp; while
/// context parallelism is applied (the shard_sequence hook set) a stage sends this rank's
/// part of the sequences (B, T/cp, n_embd), and whole ones while it is suspended
/// (evaluation).
PipelinePlan gpt_pp_plan(const GPT& model, const std::vector<int64_t>& layers = {}, int64_t seq_shards = 1,
                         int64_t cp = 1);

/// Heads and vocabulary (tp divides them), blocks (at least pp) and block_size (2 cp divides it).
ModelLimits gpt_limits(const GPTConfig& cfg);

/// Sequence parallelism under tp and context parallelism (ring attention): both.
SequenceSplits gpt_sequence_splits();

}  // namespace strata::nn
