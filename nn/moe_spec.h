// The mixture-of-experts layer as the layout planner reads it (shared by the GPT and the
// Llama descriptions, nn/gpt_spec.h and nn/llama_spec.h): its parameters as nn::MoE
// registers them, the active parameters and all-to-all volume, and what its forward keeps
// for the backward.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <strata/nn/model_spec.h>
#include <strata/nn/moe.h>

namespace strata::nn {

/// Appends the MoE layer at `path` ("h.3.mlp") of block `block`, in named_parameters()
/// order: router.weight (E, C); experts.w1 (E, H, C), experts.w2 (E, C, H) and with SwiGLU
/// experts.w3 (E, H, C), marked expert; with shared experts shared_experts.w1/w2[/w3] as
/// one expert of width shared_experts·H. None is tp-sharded (the TP plans skip the layer).
void add_moe_params(std::vector<ParamSpec>& out, const std::string& path, const MoEConfig& cfg, int64_t dim,
                    int64_t hidden, ExpertActivation act, int64_t block);

/// The MoE fields of `s` (counted by from_params, before set_decoder_lm_costs): E, top_k,
/// active_params = Ψ - expert_params·(E - top_k)/E, and a2a_per_sample = T·top_k·C.
void set_moe_costs(ModelSpec& s, const MoEConfig& cfg, int64_t embd, int64_t seq);

/// One MoE block's activations (f32, dropless: every token's top_k rows reach an expert).
struct MoEActivationInput {
  int64_t tokens = 1;   ///< N = b·T of the micro-batch (the whole sequence: no sequence parallelism with MoE)
  int64_t embd = 1;     ///< C
  int64_t experts = 1;  ///< E
  int64_t top_k = 1;
  int64_t hidden = 1;   ///< H, an expert's width
  int64_t shared_hidden = 0;  ///< shared_experts·H (0: none)
  bool swiglu = false;  ///< SwiGLU experts (Llama), else GELU (GPT)
  bool norm_topk = true;
  bool z_loss = false;
  int ep = 1;           ///< each rank holds experts / ep of the layer
};
/// What one MoE block keeps from its forward to its backward in place of the dense MLP's
/// activations (see moe_spec.cpp for the per-tensor sum; its input, the normed x, is the
/// family's).
int64_t moe_activation_bytes(const MoEActivationInput& in);
/// What one MoE block's backward adds at its largest: the expert hidden's two gradients
/// for the N·top_k rows and w1's weight gradient of this rank's E / ep experts.
int64_t moe_backward_transient_bytes(const MoEActivationInput& in);

/// A family's backward transient from its dense blocks' `dense` bytes: with in.last the
/// loss's gradient (N·V) when larger, and its MoE blocks' moe_backward_transient_bytes()
/// (all blocks MoE: that alone; some: the larger).
template <class In>
int64_t backward_transient_bytes(int64_t dense, const In& in) {
  if (in.last) dense = std::max(dense, in.batch * in.seq * in.vocab * 4);
  if (in.moe_layers == 0) return dense;
  const int64_t moe = moe_backward_transient_bytes(in.moe);
  return in.moe_layers == in.layers ? moe : std::max(dense, moe);
}

/// The layer's activation input for a micro-batch of `tokens` tokens of width `embd` (empty for
/// a dense model: cfg.experts 0).
MoEActivationInput moe_activation_input(const MoEConfig& cfg, int64_t tokens, int64_t embd, int64_t hidden,
                                        ExpertActivation act, int ep);

}  // namespace strata::nn
