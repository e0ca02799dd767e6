// The Llama's parallel plans, next to its module: the tensor-parallel plan (Megatron's
// column/row split of attention and the SwiGLU MLP, a vocabulary-parallel head and
// embedding, sequence parallelism), the pipeline split by blocks, the limits tp, pp and
// cp must respect, and the sequence splits it supports.
#pragma once
#include <cstdint>
#include <vector>

#include <strata/nn/llama.h>
#include <strata/nn/parallel_plan.h>

namespace strata::nn {

/// Per block attention.wq, wk, wv colwise (whole query and key/value heads per rank:
/// tp must divide n_head and n_kv_head), attention.wo rowwise, feed_forward.w1 (gate) and
/// w3 (up) colwise, w2 rowwise; tok_embeddings (the tied head) and an untied output
/// vocab_parallel; with `sequence_parallel` every RMSNorm (attention_norm, ffn_norm,
/// norm) sequence_norm.
TpPlan llama_tp_plan(const LlamaConfig& cfg, bool sequence_parallel = false);

/// Blocks "layers"; tok_embeddings on the first stage; norm and the head (output, or
/// tok_embeddings again when tied, summed over the embedding group) on the last; a stage
/// sends (B, T/seq_shards, n_embd) (T/cp while context parallelism is applied) in the
/// model's parameter dtype. `layers` is parallel.pp_layers (uneven splits allowed). The
/// loss is Llama::stage_loss: the plan refers to `model`, which must outlive it.
PipelinePlan llama_pp_plan(const Llama& model, const std::vector<int64_t>& layers = {}, int64_t seq_shards = 1,
                           int64_t cp = 1);

/// Query heads and vocabulary (tp divides them), blocks (at least pp) and block_size
/// (2 cp divides it). The key/value heads and the MLP width are the family's tp_widths
/// (llama_spec) and its CLI check (apps/family_llama.cpp).
ModelLimits llama_limits(const LlamaConfig& cfg);

/// Sequence parallelism under tp and context parallelism (ring attention): both.
SequenceSplits llama_sequence_splits();

}  // namespace strata::nn
