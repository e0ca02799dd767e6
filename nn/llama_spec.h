// The Llama as the layout planner reads it, from its config alone: parameter names and
// shapes (tp-sharded ones marked by llama_tp_plan), the pipeline parts, FLOPs per sample,
// and the activations strata's autograd graph keeps.
#pragma once
#include <cstdint>

#include <strata/nn/llama.h>
#include <strata/nn/model_spec.h>
#include <strata/nn/moe_spec.h>

namespace strata::nn {

/// The stored activations of a Llama micro-batch that a rank keeps from a forward to its
/// backward (f32), as gpt_spec's GptActivationInput; see llama_activation_bytes() in
/// llama_spec.cpp for the per-tensor sum.
struct LlamaActivationInput {
  int64_t batch = 1, seq = 1, embd = 1, heads = 1, kv_heads = 1, hidden = 1, vocab = 1;
  int64_t layers = 1;       ///< blocks on this stage
  bool first = true;        ///< holds the embedding
  bool last = true;         ///< holds norm, the head and the loss
  int tp = 1;
  bool sequence_parallel = false;
  bool checkpoint = false;  ///< only each block's input is kept
  bool selective = false;   ///< q|k|v kept as projected; rotary and the attention core recomputed
  bool pipeline = false;    ///< the executor holds each in-flight micro-batch's stage output
  /// Of `layers`, the blocks whose feed_forward is the mixture of experts: each keeps
  /// `moe`'s moe_activation_bytes() instead of the SwiGLU's 3N·F/tp.
  int64_t moe_layers = 0;
  MoEActivationInput moe{};
};
int64_t llama_activation_bytes(const LlamaActivationInput& in);
/// What a backward recomputes and holds at a time: one block's activations (full) or one
/// block's packed q|k|v and probabilities (selective); 0 without recomputation.
int64_t llama_recompute_bytes(const LlamaActivationInput& in);
/// What one block's backward holds on top of the stored activations at its largest (the
/// residual stream's pending gradient and w1's weight gradient, or an MoE block's
/// moe_backward_transient_bytes() when larger; with `last`, the loss's gradient when
/// larger).
int64_t llama_backward_transient_bytes(const LlamaActivationInput& in);

/// tok_embeddings, layers.i.{attention_norm, attention.{wq,wk,wv,wo}, ffn_norm,
/// feed_forward.{w1,w2,w3}}, norm, and output when untied, in Llama's
/// named_parameters() order; per block 2·C·H·hd (q, o) + 2·C·Hkv·hd (k, v) + 3·C·F
/// (SwiGLU) + 2·C (RMSNorm); an MoE block's feed_forward is add_moe_params' (SwiGLU
/// experts of width moe.hidden or F). FLOPs (6N + 12·L·C·T)·T per sequence (PaLM's
/// estimate, N the active parameters). A
/// stage sends (B, T, C); tp all-reduces (B, T, C) twice per block each way, once for the
/// embedding and once for the head's input, and the loss's 3 of B·T values. tp_widths:
/// n_kv_head and F (whole key/value heads and MLP columns per tp rank).
ModelSpec llama_spec(const LlamaConfig& cfg);

}  // namespace strata::nn
