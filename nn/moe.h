// Mixture of experts: a router picks top_k of `experts` feed-forward networks for every
// token, the tokens are sorted by expert and run through the experts as one grouped GEMM
// over variable-size groups (dropless) or groups cut at a capacity, and the expert
// outputs are summed back per token, weighted by their gates (Switch / GShard / Mixtral,
// DeepSeek-V3's sigmoid gating). Serves the GPT and the Llama family (model.moe).
//
// Routing groups are sequences: the capacity and the load-balancing loss are computed per
// sequence (GShard's groups), so neither depends on how a batch is split over data-parallel
// ranks, micro-batches or experts' ranks. The auxiliary losses never enter the returned
// loss: their gradients are injected into the backward at the layer's output (Megatron's
// MoEAuxLossAutoScaler), weighted by the AuxLossWeight in force, so they reach the router
// under pipeline stages too.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <strata/nn/module.h>

namespace strata::nn {

/// model.moe: the mixture-of-experts MLP and where it replaces the dense one.
struct MoEConfig {
  int64_t experts = 0;     ///< 0: dense model (no MoE)
  int64_t top_k = 2;       ///< experts per token
  int64_t every = 1;       ///< block i is MoE when (i + 1) % every == 0 (1: every block)
  std::string gate = "softmax";  ///< "softmax" (Switch, Mixtral) or "sigmoid" (DeepSeek-V3)
  bool norm_topk = true;   ///< the top_k gates divided by their sum (Mixtral; DeepSeek-V3 for sigmoid)
  double aux_loss_coef = 0.01;  ///< load-balancing loss E * sum_e f_e P_e per sequence (Switch/GShard)
  double z_loss_coef = 0.0;     ///< router z-loss: mean over tokens of logsumexp(logits)^2 (ST-MoE)
  int64_t shared_experts = 0;   ///< dense experts every token passes through (DeepSeek-MoE), 0: none
  /// > 0: each expert takes at most ceil(capacity_factor * T * top_k / experts) tokens of a
  /// sequence of T; the rest of its assignments are dropped (the token keeps its other
  /// experts and the residual). 0: dropless.
  double capacity_factor = 0.0;
  int64_t hidden = 0;           ///< expert hidden width; 0: the family's dense MLP width
  /// Under expert parallelism the shared experts run while the routed rows travel to their
  /// experts (Megatron-LM's --moe-shared-expert-overlap, off by default there too: on a
  /// 2-core host the exchange is too short to hide anything, docs/moe.md); false: after them.
  bool shared_expert_overlap = false;

  bool enabled() const { return experts > 0; }
  /// Whether block `i` (0-based) carries the MoE MLP.
  bool moe_block(int64_t i) const { return enabled() && (i + 1) % every == 0; }
  /// Error naming model.moe.<key> when a value is out of range.
  void check() const;
};

/// The experts' feed-forward: GELU (w2 gelu(w1 x), the GPT family's) or SwiGLU
/// (w2 (silu(w1 x) * w3 x), the Llama family's), no biases.
enum class ExpertActivation { gelu, swiglu };

/// Rows of x (M, K) in consecutive groups of counts[g] rows, group g multiplied by
/// w[g]^T (w (G, N, K)) -> (M, N): the grouped GEMM of variable-size groups (no padding).
/// Differentiable in x and w (groups without rows get a zero weight gradient).
Tensor grouped_linear(const Tensor& x, const Tensor& w, const std::vector<int64_t>& counts);

/// The experts' weights as stacked tensors: w1 (E, H, C), w2 (E, C, H) and, for SwiGLU,
/// w3 (E, H, C) (torchtitan's GroupedExperts). Expert parallelism keeps a slice of the
/// experts (rows of dim 0) on each rank through set_parameter.
class GroupedExperts : public Module {
 public:
  GroupedExperts(int64_t experts, int64_t dim, int64_t hidden, ExpertActivation act, double std, double out_std,
                 Generator& gen);
  /// xs (M, C) sorted by expert, counts[e] rows for each expert this module holds -> (M, C).
  Tensor forward_grouped(const Tensor& xs, const std::vector<int64_t>& counts);
  /// The experts this module holds now (dim 0 of w1).
  int64_t local_experts() const;
  ExpertActivation activation() const { return act_; }
  std::string type_name() const override { return "GroupedExperts"; }

 private:
  ExpertActivation act_;
};

/// What one MoE layer did since take_stats().
struct MoEStats {
  std::vector<int64_t> tokens;  ///< assignments kept per expert
  int64_t dropped = 0;          ///< assignments over capacity
  double aux_loss = 0;          ///< aux_loss_coef * the balance loss, summed over forwards
  double z_loss = 0;            ///< z_loss_coef * the z-loss, summed over forwards
  int64_t forwards = 0;         ///< forwards counted (with autograd on)
};

/// Rows sorted by global expert (counts[e] rows for expert e, every expert of the layer)
/// -> the experts' outputs in the same order. Expert parallelism replaces the layer's own
/// (which runs every expert here) with all-to-all dispatch and combine; it runs
/// `meanwhile` (the shared experts) while the rows are in flight to their experts.
using ExpertDispatch = std::function<Tensor(const Tensor& xs, const std::vector<int64_t>& counts,
                                            const std::function<void()>& meanwhile)>;

/// What the layout installs on an MoE layer (parallel/): empty members keep the layer's own.
struct MoEHooks {
  ExpertDispatch dispatch;
  /// Context parallelism: each sequence is split over `sequence_shards` ranks, and
  /// sum_over_sequence sums a (B, E) f64 per-sequence tensor over them.
  int sequence_shards = 1;
  std::function<Tensor(const Tensor&)> sum_over_sequence;
};

/// The mixture-of-experts MLP. Children: router (Linear C -> E, no bias), experts
/// (GroupedExperts), and shared_experts (GroupedExperts with one expert of width
/// shared_experts * hidden) when configured. Parameter names: <block>.<mlp>.router.weight,
/// <block>.<mlp>.experts.{w1,w2,w3}, <block>.<mlp>.shared_experts.{w1,w2,w3}.
class MoE : public Module {
 public:
  /// `std` initialises the router and w1/w3, `out_std` w2 (the family's residual init).
  MoE(const MoEConfig& cfg, int64_t dim, int64_t hidden, ExpertActivation act, double std, double out_std,
      Generator& gen);
  /// x (B, T, C) -> (B, T, C). Routing is decided on the host from the router scores
  /// (top_k by score, ties to the lower expert); with autograd on, the per-expert token
  /// counts, drops and auxiliary losses are added to the stats and the auxiliary losses'
  /// gradients injected at the output.
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MoE"; }
  const MoEConfig& config() const { return cfg_; }
  void set_hooks(MoEHooks h) { hooks_ = std::move(h); }
  const MoEHooks& hooks() const { return hooks_; }
  /// The stats since the last call (this rank's tokens), then cleared.
  MoEStats take_stats();

 private:
  MoEConfig cfg_;
  MoEHooks hooks_;
  MoEStats stats_;
};

/// RAII: the weight the auxiliary losses' gradients are injected with while it lives (the
/// factor the caller applies to the loss before backward: 1/accumulated micro-batches,
/// times a loss scaler's scale). Thread-local; default 1. Must cover the backward as well
/// as the forward when the forward is recomputed there.
class AuxLossWeight {
 public:
  explicit AuxLossWeight(double w);
  ~AuxLossWeight();
  AuxLossWeight(const AuxLossWeight&) = delete;
  AuxLossWeight& operator=(const AuxLossWeight&) = delete;
  static double current();

 private:
  double prev_;
};

/// Every MoE layer of `model` with its path (depth first).
std::vector<std::pair<std::string, MoE*>> moe_layers(Module& model);

}  // namespace strata::nn
