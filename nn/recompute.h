// Activation recomputation for model code: a function whose activations are not kept
// from the forward to the backward, recomputed when the backward reaches it. Dropout inside
// it draws the same masks again: the generators it uses are put back to their state at
// the forward for the recompute, and then where they were.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <strata/core/rng.h>
#include <strata/tensor/tensor.h>

namespace strata::nn {

/// How much of a block's activations the backward recomputes instead of keeping
/// (model.checkpoint_activations).
enum class Recompute {
  none,       ///< keep everything
  full,       ///< keep each block's input; recompute the whole block
  selective,  ///< keep the GEMM outputs; recompute the attention core (Megatron's selective)
};
/// "none" | "full" | "selective" (and true / false for full / none); ConfigError naming `key`.
Recompute parse_recompute(const std::string& s, const std::string& key);
const char* recompute_name(Recompute r);

/// fn(x) when grad mode is off; otherwise fn(x) whose intermediate tensors are freed after
/// the forward and recomputed in the backward (autograd checkpoint()), replaying the draws
/// of `gens`. fn must be deterministic given those generators.
Tensor recompute_in_backward(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                             std::vector<Generator*> gens);

}  // namespace strata::nn
