// The replaceable steps of a language model's forward (the head, the loss, and where the
// residual stream enters and leaves the blocks), so tensor parallelism can make a model
// vocabulary- and sequence-parallel without knowing its class (parallel/ sees only this).
#pragma once
#include <functional>
#include <string>

#include <strata/core/rng.h>
#include <strata/tensor/tensor.h>

namespace strata::nn {

/// Each hook is optional: an empty one leaves the model's own step in place.
struct LmHooks {
  /// The embeddings' sum (B, T, C) -> what the blocks see (a sequence shard under SP).
  std::function<Tensor(const Tensor& x)> enter_blocks;
  /// The final norm's output -> (B, T, C) again.
  std::function<Tensor(const Tensor& x)> leave_blocks;
  /// Features (B, T, C) and the head weight as the model holds it -> logits (B, T, V).
  std::function<Tensor(const Tensor& x, const Tensor& head_weight)> logits;
  /// Features (N, C), head weight, targets (N) -> mean cross-entropy over targets != ignore_index.
  std::function<Tensor(const Tensor& x, const Tensor& head_weight, const Tensor& targets, int64_t ignore_index)> loss;
  /// Context parallelism: the tokens (B, T) (and the targets) -> this rank's part of
  /// every sequence (B, T_local), applied before the embeddings.
  std::function<Tensor(const Tensor& idx)> shard_sequence;
  /// The global positions (T_local) i64 of this rank's T_local tokens, for the position
  /// embedding (empty: 0 .. T-1).
  std::function<Tensor(int64_t t_local)> positions;
};

/// Attention over a packed projection: qkv (B, T, 3*H*hd) -> (B, T, H*hd), causal. With
/// dropout_p > 0 the probabilities are dropped out with masks drawn from `gen` (the
/// module's attention-dropout generator) as the module's own attention draws them
/// (ops::dropout of the whole (B, H, T, T) probabilities: one reserve of B*H*T*T).
using AttentionFn = std::function<Tensor(const Tensor& qkv, int64_t head_dim, double dropout_p, Generator* gen)>;

/// A module whose attention core (softmax(q k^T / sqrt(hd), causal) v over its packed
/// q|k|v) can be replaced, e.g. by ring attention over a context-parallel group. An
/// empty function restores the module's own. Not thread-safe.
class ReplaceableAttention {
 public:
  virtual ~ReplaceableAttention() = default;
  virtual void set_attention_fn(AttentionFn fn) = 0;
  /// The attention probabilities' dropout rate (a replacement gets it and the generator).
  virtual double attention_dropout() const = 0;
};

/// A model (also an nn::Module) whose head and loss steps are LmHooks. Not thread-safe.
class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  /// Full name of the parameter the head multiplies by ("wte.weight" when tied).
  virtual std::string head_weight_name() const = 0;
  /// The head weight's module path ("wte" when tied, "lm_head" otherwise).
  std::string head_module() const {
    const std::string n = head_weight_name();
    return n.substr(0, n.rfind('.'));
  }
  virtual const LmHooks& lm_hooks() const = 0;
  virtual void set_lm_hooks(LmHooks h) = 0;
};

}  // namespace strata::nn
