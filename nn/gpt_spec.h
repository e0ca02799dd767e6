// The GPT as the layout planner reads it, from its config alone: parameter names and
// shapes (tp-sharded ones marked by gpt_tp_plan), the pipeline parts, FLOPs per sample,
// and the activations strata's autograd graph keeps (docs/planner.md).
#pragma once
#include <cstdint>

#include <strata/nn/gpt.h>
#include <strata/nn/model_spec.h>
#include <strata/nn/moe_spec.h>

namespace strata::nn {

/// The stored activations of a GPT micro-batch that a pipeline rank keeps from a forward to
/// its backward, as strata's autograd graph holds them (f32, no activation checkpointing
/// unless `checkpoint`): see gpt_activation_bytes() in gpt_spec.cpp for the per-tensor sum.
struct GptActivationInput {
  int64_t batch = 1, seq = 1, embd = 1, heads = 1, vocab = 1;
  int64_t layers = 1;      ///< blocks on this stage
  bool first = true;       ///< holds the embeddings
  bool last = true;        ///< holds ln_f, the head and the loss
  int tp = 1;
  bool sequence_parallel = false;
  bool dropout = false;    ///< model.dropout > 0
  bool checkpoint = false; ///< model.checkpoint_activations full: only each block's input is kept
  bool selective = false;  ///< model.checkpoint_activations selective: the attention cores are not kept
  /// Under the pipeline executor, which holds each in-flight micro-batch's stage output
  /// until its backward: N·C more on a stage that sends its output on (last = false), the
  /// logits N·V/tp on the last stage.
  bool pipeline = false;
  /// Of `layers`, the blocks whose MLP is the mixture of experts: each keeps `moe`'s
  /// moe_activation_bytes() instead of the MLP's 8·N·C/tp (and its dropout mask).
  int64_t moe_layers = 0;
  MoEActivationInput moe{};
};
int64_t gpt_activation_bytes(const GptActivationInput& in);
/// What a backward recomputes and holds at a time under activation recomputation: one
/// block's activations (full) or one attention core's (selective); 0 without.
int64_t gpt_recompute_bytes(const GptActivationInput& in);
/// What one block's backward holds on top of the stored activations at its largest (the
/// residual stream's pending gradient and an MLP weight gradient, or an MoE block's
/// moe_backward_transient_bytes() when larger; with `last`, the loss's gradient when
/// larger); a rank's peak adds it once.
int64_t gpt_backward_transient_bytes(const GptActivationInput& in);

/// wte, wpe, h.i.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj} (an MoE
/// block's mlp: add_moe_params, GELU experts of width moe.hidden or 4C), ln_f, and
/// lm_head when untied, in GPT's named_parameters() order; tp-sharded as gpt_tp_plan(cfg)
/// splits them; wte, wpe on the first stage, ln_f and the head on the last (a tied wte
/// on both). FLOPs (6N + 12·L·C·T)·T per sequence (PaLM's estimate: N the active
/// parameters, all but the experts a token skips; the attention scores and values of T
/// positions). A stage sends (B, T, C); tp
/// all-reduces (B, T, C) twice per block each way, once for the embeddings and once for
/// the head's input, and the loss's 3 of B·T values. Activations: a rank's in-flight
/// micro-batches' gpt_activation_bytes() and one backward's transients.
ModelSpec gpt_spec(const GPTConfig& cfg);

}  // namespace strata::nn
