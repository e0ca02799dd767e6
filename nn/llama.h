// Llama decoder-only transformer (Llama 2/3 layout, torchtitan's parameter names): token
// embedding, pre-norm blocks of RMSNorm, grouped-query attention with rotary position
// embeddings and a SwiGLU MLP, a final RMSNorm and an lm head (untied by default). No
// biases and no dropout anywhere.
#pragma once
#include <functional>
#include <memory>
#include <optional>

#include <strata/nn/container.h>
#include <strata/nn/lm_hooks.h>
#include <strata/nn/moe.h>
#include <strata/nn/rotary.h>

namespace strata::nn {

struct LlamaConfig {
  int64_t vocab = 256;
  int64_t block_size = 128;  ///< the longest sequence (max positions)
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_kv_head = 0;  ///< key/value heads: 0 = n_head (MHA), 1 = MQA, else GQA (divides n_head)
  int64_t n_embd = 128;
  /// The SwiGLU hidden width F; 0: torchtitan's rule from ffn_dim_multiplier and multiple_of
  /// (see hidden_dim()).
  int64_t intermediate_size = 0;
  double ffn_dim_multiplier = 0;  ///< 0: unset
  int64_t multiple_of = 256;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling{};  ///< Llama 3.1's frequency rescaling
  bool tie_weights = false;  ///< head = tok_embeddings.weight (output absent)
  bool checkpoint = false;   ///< recompute each block's activations in backward
  bool selective = false;    ///< recompute rotary and the attention core in backward (keep the projections)
  MoEConfig moe{};           ///< experts > 0: every moe.every-th block's feed_forward is a mixture of experts

  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t head_dim() const { return n_embd / n_head; }
  /// intermediate_size when set, else: h = 4C, h = floor(2h/3), h = floor(ffn_dim_multiplier * h)
  /// when set, then rounded up to a multiple of multiple_of (torchtitan's FeedForward).
  int64_t hidden_dim() const;
  /// Error naming the field when a dimension is not positive or does not divide.
  void check() const;
};

/// The rotary state an attention module reads at forward time, shared with its model: the
/// frequencies and the positions hook of the model's LmHooks (context parallelism sets it
/// to the global positions of this rank's zigzag chunks).
struct RotaryPositions {
  Tensor inv_freq;                                      ///< (head_dim / 2) f64
  std::function<Tensor(int64_t t_local)> positions;     ///< empty: 0 .. T-1
  /// The positions (T) i64 of a (B, T, ...) activation's T tokens.
  Tensor at(int64_t t) const;
};

/// Children wq (C -> H*hd), wk, wv (C -> Hkv*hd), wo (H*hd -> C), no biases. The head
/// counts are read from wq's and wk's output widths (hd fixed), so column-parallel
/// projections holding a subset of the heads (tensor parallelism) just work. Its attention
/// core (over packed q|k|v) can be replaced (ReplaceableAttention: context parallelism).
class LlamaAttention : public Module, public ReplaceableAttention {
 public:
  LlamaAttention(const LlamaConfig& cfg, Generator& gen, std::shared_ptr<const RotaryPositions> rotary);
  /// x (B, T, C) -> (B, T, C)
  Tensor forward(const Tensor& x) override;
  /// residual + forward(x), residual (B, T, C): the residual is added in one pass after wo's
  /// GEMM (linear_residual) when wo is a plain bias-free Linear without forward hooks.
  Tensor forward_add(const Tensor& x, const Tensor& residual);
  std::string type_name() const override { return "LlamaAttention"; }
  int64_t head_dim() const { return head_dim_; }
  void set_attention_fn(AttentionFn fn) override { attention_fn_ = std::move(fn); }
  double attention_dropout() const override { return 0.0; }

 private:
  Tensor forward_impl(const Tensor& x, const Tensor& residual);
  /// q (B, T, H*hd), k, v (B, T, Hkv*hd) as projected -> y (B, T, H*hd): rotary, repeated
  /// key/value heads and the replaced attention core.
  Tensor core(const Tensor& q, const Tensor& k, const Tensor& v, int64_t h, int64_t hkv);
  /// The same from q|k|v packed as projected (B, T, (H + 2 Hkv)*hd), into the fused op.
  Tensor packed_core(const Tensor& raw, int64_t hkv);
  int64_t head_dim_;
  bool selective_;
  std::shared_ptr<const RotaryPositions> rotary_;
  AttentionFn attention_fn_;
};

/// SwiGLU MLP: w2(silu(w1(x)) * w3(x)); w1 the gate (C -> F), w3 the up (C -> F), w2 the
/// down projection (F -> C), no biases.
class LlamaFeedForward : public Module {
 public:
  LlamaFeedForward(const LlamaConfig& cfg, Generator& gen);
  Tensor forward(const Tensor& x) override;
  /// residual + forward(x), with the residual added after w2's GEMM as
  /// LlamaAttention::forward_add.
  Tensor forward_add(const Tensor& x, const Tensor& residual);
  std::string type_name() const override { return "LlamaFeedForward"; }
};

/// Pre-norm block: h = x + attention(attention_norm(x)), out = h + feed_forward(ffn_norm(h));
/// feed_forward is an MoE with SwiGLU experts when cfg.moe.moe_block(index).
class LlamaBlock : public Module {
 public:
  LlamaBlock(const LlamaConfig& cfg, Generator& gen, std::shared_ptr<const RotaryPositions> rotary,
             int64_t index = 0);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LlamaBlock"; }
};

/// Children tok_embeddings, layers (ModuleList of LlamaBlock), norm, and output when
/// untied, reached by name. Parameter names: tok_embeddings.weight,
/// layers.<i>.attention_norm.weight, layers.<i>.attention.{wq,wk,wv,wo}.weight,
/// layers.<i>.ffn_norm.weight, layers.<i>.feed_forward.{w1,w2,w3}.weight, norm.weight,
/// output.weight; linear weights (out, in).
/// Init (torchtitan / Hugging Face): linears and embeddings N(0, 0.02), RMSNorm weights
/// 1; the residual projections wo and w2 N(0, 0.02 / sqrt(2 n_layer)) as the GPT's.
class Llama : public Module, public LanguageModel {
 public:
  Llama(const LlamaConfig& cfg, Generator& gen);
  /// idx (B, T) i64 with T <= block_size -> logits (B, T, vocab)
  Tensor forward(const Tensor& idx) override;
  /// Mean next-token cross-entropy of forward(idx) against targets (B, T) i64 (with the
  /// shard_sequence hook, over this rank's part of each sequence, as GPT::loss).
  Tensor loss(const Tensor& idx, const Tensor& targets, int64_t ignore_index = -1);
  std::string type_name() const override { return "Llama"; }
  const LlamaConfig& config() const { return cfg_; }
  void set_checkpointing(bool on) { cfg_.checkpoint = on; }
  /// The block list, child "layers" (LlamaBlocks named "0" .. "n_layer-1").
  std::shared_ptr<ModuleList> blocks() const;
  std::string head_weight_name() const override {
    return cfg_.tie_weights ? "tok_embeddings.weight" : "output.weight";
  }
  const LmHooks& lm_hooks() const override { return hooks_; }
  /// Also hands the positions hook to the attention modules' rotary embedding.
  void set_lm_hooks(LmHooks h) override;
  /// One pipeline stage, as GPT::forward_stage: blocks layers.begin .. layers.(end-1),
  /// after the embedding when `first` (in: idx (B, T) i64), followed by norm and the head
  /// when `last` (features (B, T, C) instead of logits under a loss hook).
  Tensor forward_stage(const Tensor& in, int64_t begin, int64_t end, bool first, bool last);
  /// The mean next-token cross-entropy of the last stage's output (as GPT::stage_loss).
  Tensor stage_loss(const Tensor& last_out, const Tensor& targets) const;

 private:
  /// idx (B, T) -> the residual stream the blocks see (this rank's part under CP/SP).
  Tensor embed(const Tensor& idx);
  /// norm, then the leave_blocks hook: (B, T, C).
  Tensor finish(const Tensor& x);
  Tensor head(const Tensor& x);
  Tensor features(const Tensor& idx);
  Tensor run_block(const std::shared_ptr<Module>& blk, const Tensor& x);
  LlamaConfig cfg_;
  LmHooks hooks_;
  std::shared_ptr<RotaryPositions> rotary_;
};

}  // namespace strata::nn
