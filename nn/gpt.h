// GPT-2 style decoder-only transformer (nanoGPT layout and parameter names):
// token + position embeddings, pre-LN blocks of causal self-attention and a GELU MLP,
// final LayerNorm and an lm head tied to the token embedding.
#pragma once
#include <memory>

#include <strata/nn/container.h>
#include <strata/nn/lm_hooks.h>
#include <strata/nn/moe.h>
#include <strata/nn/normalization.h>

namespace strata::nn {

struct GPTConfig {
  int64_t vocab = 256;
  int64_t block_size = 128;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
  bool tie_weights = true;  // lm head = wte.weight (not listed twice)
  bool bias = true;         // biases in Linear and LayerNorm
  bool checkpoint = false;  // recompute each block's activations in backward
  bool selective = false;   // recompute only the attention core in backward (Megatron's selective)
  MoEConfig moe{};          // experts > 0: the MLP of every moe.every-th block is a mixture of experts
};

/// Children c_attn (C -> 3C, fused q|k|v), c_proj (C -> C), attn_dropout, resid_dropout.
/// The head count is read from c_attn's output width (3 * heads * head_dim), so a
/// column-parallel c_attn holding a subset of the heads (q|k|v per rank) just works.
/// Its attention core can be replaced (ReplaceableAttention: context parallelism).
class CausalSelfAttention : public Module, public ReplaceableAttention {
 public:
  CausalSelfAttention(const GPTConfig& cfg, Generator& gen);
  /// x (B, T, C) -> (B, T, C)
  Tensor forward(const Tensor& x) override;
  /// residual + forward(x), residual (B, T, C): c_proj's bias and the residual are added
  /// in one pass after its GEMM (linear_residual) when c_proj is a plain Linear and
  /// resid_dropout does nothing (p = 0 or eval), neither with forward hooks.
  Tensor forward_add(const Tensor& x, const Tensor& residual);
  /// (s, ln(s)) with s = forward_add(x, residual): where forward_add fuses the residual, the
  /// LayerNorm ln runs in the same pass (linear_residual_layer_norm); else ln(s) is undefined
  /// and the caller applies ln itself.
  std::pair<Tensor, Tensor> forward_add_norm(const Tensor& x, const Tensor& residual, const LayerNorm& ln);
  std::string type_name() const override { return "CausalSelfAttention"; }
  int64_t head_dim() const { return head_dim_; }
  void set_attention_fn(AttentionFn fn) override { attention_fn_ = std::move(fn); }
  double attention_dropout() const override;

 private:
  Tensor forward_impl(const Tensor& x, const Tensor& residual);
  /// x (B, T, C) -> the attention's output y (B, T, Hl*hd) before c_proj.
  Tensor core_of(const Tensor& x);
  /// The attention core: qkv (B, T, 3*Hl*hd) -> y (B, T, Hl*hd), the replaced one if set.
  Tensor core(const Tensor& qkv);
  AttentionFn attention_fn_;
  /// (T, T) u8, 1 above the diagonal (future positions); cached for the last T.
  const Tensor& causal_mask(int64_t t);
  int64_t head_dim_;
  bool selective_;
  Tensor mask_;
};

/// Children c_fc (C -> 4C), gelu (tanh approx), c_proj (4C -> C), dropout.
class GPTMLP : public Module {
 public:
  GPTMLP(const GPTConfig& cfg, Generator& gen);
  Tensor forward(const Tensor& x) override;
  /// residual + forward(x), with c_proj's bias and the residual in one pass, as
  /// CausalSelfAttention::forward_add.
  Tensor forward_add(const Tensor& x, const Tensor& residual);
  /// (s, ln(s)) with s = forward_add(x, residual), ln in the same pass where the residual
  /// fuses (as CausalSelfAttention::forward_add_norm); else ln(s) undefined.
  std::pair<Tensor, Tensor> forward_add_norm(const Tensor& x, const Tensor& residual, const LayerNorm& ln);
  std::string type_name() const override { return "GPTMLP"; }

 private:
  Tensor forward_impl(const Tensor& x, const Tensor& residual);
  /// gelu(c_fc(x)), fused where the children are plain (linear_gelu).
  Tensor activation(const Tensor& x);
};

/// Pre-LN block: x + attn(ln_1(x)), then + mlp(ln_2(x)). Children ln_1, attn, ln_2, mlp
/// (a GPTMLP, or an MoE with GELU experts when cfg.moe.moe_block(index)).
class GPTBlock : public Module {
 public:
  GPTBlock(const GPTConfig& cfg, Generator& gen, int64_t index = 0);
  Tensor forward(const Tensor& x) override;
  /// (out, next(out)) with out = forward(x): ln_1(x) taken as given when ln_1_x is defined
  /// (the previous block made it), and with `next` (the LayerNorm after this block) applied
  /// in the MLP's residual pass where it fuses (linear_residual_layer_norm); next(out) is
  /// undefined where it does not, or without `next`.
  std::pair<Tensor, Tensor> forward_norm_next(const Tensor& x, const Tensor& ln_1_x, const LayerNorm* next);
  std::string type_name() const override { return "GPTBlock"; }
};

/// Children wte, wpe, drop, h (ModuleList of GPTBlock), ln_f, and lm_head when untied,
/// reached by name (child("h")), never by position.
/// Init (GPT-2): linears and embeddings N(0, 0.02), biases 0, residual projections
/// (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 n_layer)).
class GPT : public Module, public LanguageModel {
 public:
  GPT(const GPTConfig& cfg, Generator& gen);
  /// idx (B, T) i64 with T <= block_size -> logits (B, T, vocab)
  Tensor forward(const Tensor& idx) override;
  /// Mean next-token cross-entropy of forward(idx) against targets (B, T) i64. With the
  /// shard_sequence hook (context parallelism) forward and loss see this rank's part of
  /// each sequence only: logits (B, T_local, vocab), the mean over the local tokens.
  Tensor loss(const Tensor& idx, const Tensor& targets, int64_t ignore_index = -1);
  std::string type_name() const override { return "GPT"; }
  const GPTConfig& config() const { return cfg_; }
  /// Turns activation checkpointing of every block on or off.
  void set_checkpointing(bool on) { cfg_.checkpoint = on; }
  /// The block list, child "h": GPTBlocks named by their global index ("0" .. "n_layer-1",
  /// so parameters read "h.5.attn.c_attn.weight"). Forward runs them in registration order.
  /// Shared with the model; resolved at call time, so it sees replace_child("h", ...).
  std::shared_ptr<ModuleList> blocks() const;
  /// LanguageModel: the head multiplies by wte.weight (tied) or lm_head.weight; forward
  /// and loss run lm_hooks() where set (tensor parallelism installs them).
  std::string head_weight_name() const override { return cfg_.tie_weights ? "wte.weight" : "lm_head.weight"; }
  const LmHooks& lm_hooks() const override { return hooks_; }
  void set_lm_hooks(LmHooks h) override { hooks_ = std::move(h); }
  /// One pipeline stage: blocks h.begin .. h.(end-1) on `in`, after the embeddings when
  /// `first` (in: idx (B, T) i64) and followed by ln_f and the head when `last` (-> logits
  /// (B, T, vocab)); else (B, T, C) -> (B, T, C). Only the children the stage uses need to
  /// be present (a pipeline rank drops the others). The lm_hooks() apply as in forward():
  /// under sequence parallelism what passes between stages is this tp rank's sequence
  /// shard (B, T/tp, C); with a loss hook (vocabulary-parallel head) the last stage
  /// returns the features (B, T, C) instead of logits, and stage_loss() computes the loss
  /// from the vocabulary shards (the whole (B, T, vocab) never exists on a rank). Under
  /// context parallelism (shard_sequence / positions hooks) the first stage takes the
  /// whole tokens (B, T) and keeps this rank's part: stages pass (B, T/cp, C).
  Tensor forward_stage(const Tensor& in, int64_t begin, int64_t end, bool first, bool last);
  /// The mean next-token cross-entropy of the last stage's output (as GPT::loss; the
  /// whole targets (B, T), sharded by the shard_sequence hook like the tokens).
  Tensor stage_loss(const Tensor& last_out, const Tensor& targets) const;

 private:
  /// Embeddings, blocks and ln_f: idx (B, T) -> (B, T, C).
  Tensor features(const Tensor& idx);
  /// One block's forward, recomputed in backward when cfg_.checkpoint is on.
  Tensor run_block(const std::shared_ptr<Module>& blk, const Tensor& x);
  /// The blocks of h then ln_f, each block's MLP residual fused with the next LayerNorm where
  /// they are all plain (GPT::features).
  Tensor run_blocks(const ModuleList& h, Tensor x);
  GPTConfig cfg_;
  LmHooks hooks_;
};

}  // namespace strata::nn
