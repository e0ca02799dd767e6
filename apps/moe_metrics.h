// What the MoE layers' routers did, for metrics.jsonl: tokens per expert, dropped
// assignments and the auxiliary losses of the logged step, summed over every rank (each
// token counted once) and keyed by the block index of each MoE layer.
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include <strata/comm/process_group.h>
#include <strata/nn/moe.h>
#include <strata/nn/module.h>

namespace strata::apps {

class MoeMetrics {
 public:
  /// The MoE layers of a model of `n_layer` blocks under `moe` (none when it is dense).
  MoeMetrics(const nn::MoEConfig& moe, int64_t n_layer);
  bool enabled() const { return !layers_.empty(); }
  /// After each step: this step's stats of the MoE layers this rank holds (and clears them).
  void take(nn::Module& model);
  /// {"layers", "tokens", "dropped", "aux_loss", "z_loss"} of the last step taken, summed
  /// over `world` (tokens of tp ranks, which route the same tokens, counted once: `tp`);
  /// the losses are each layer's mean over micro-batches and replicas, summed over layers.
  /// Collective over `world`.
  nlohmann::json reduce(comm::ProcessGroup& world, int tp) const;

 private:
  std::vector<int64_t> layers_;  // block index of each MoE layer
  int64_t experts_ = 0;
  std::vector<double> local_;    // per layer: tokens[E], dropped, aux, z, holders
};

}  // namespace strata::apps
