// Expert parallelism: each MoE layer's experts sharded over an ep group of consecutive dp
// ranks, the tokens sent to their experts' ranks and back by all-to-all (torchtitan's and
// Megatron-LM's expert parallel, ep carved out of dp). The experts' gradients meet over the
// ranks that hold the same experts (the edp group: dp / ep ranks, x cp), the rest of the
// model's over all dp ranks as before: ExpertSync wraps the layout's gradient sync and owns
// the experts' optimizer.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/nn/module.h>
#include <strata/nn/moe.h>
#include <strata/parallel/data/grad_sync.h>

namespace strata::parallel {

/// One expert weight apply_ep sharded: rows [rank * local, (rank + 1) * local) of dim 0.
struct EpShardedParam {
  std::string name;
  Shape global_shape;  ///< (E, ...)
};

/// What apply_ep did.
struct EpLayout {
  std::shared_ptr<comm::ProcessGroup> ep;   ///< the all-to-all group (ep ranks)
  std::shared_ptr<comm::ProcessGroup> edp;  ///< ranks holding the same experts (dp / ep, x cp)
  int replicas = 1;                         ///< the ranks gradients are averaged over (dp x cp)
  std::vector<EpShardedParam> sharded;
  /// The entry of an expert weight, or of its optimizer state "<kind>.<name>"; else nullptr.
  const EpShardedParam* find(const std::string& name) const;
};

/// Rows of x (sum(send_rows), C): send_rows[j] consecutive rows to rank j of `group`;
/// returns the rows received (sum(recv_rows), C), recv_rows[j] from rank j, in rank
/// order. Differentiable (the backward sends the gradients back the same way). Collective
/// over `group`; both sides must agree on the counts.
Tensor all_to_all_rows(const Tensor& x, const std::vector<int64_t>& send_rows, const std::vector<int64_t>& recv_rows,
                       comm::ProcessGroup& group);

/// Collective over `replica` (the dp ranks, or dp x cp): broadcasts replica rank 0's
/// experts, keeps this rank's experts / ep of every MoE layer and installs the all-to-all
/// dispatch on it. `dp` is the mesh's dp group: the ep group is ep consecutive dp ranks
/// (dp rank d in group d / ep at position d % ep); `replica` ranks are d * cp + c.
EpLayout apply_ep(nn::Module& model, comm::ProcessGroup& dp, comm::ProcessGroup& replica, int ep, int cp);

/// RAII: every MoE layer's experts are taken out of the model tree while it lives (and put
/// back after), so a gradient sync built meanwhile (DDP, ZeRO) neither broadcasts, buckets,
/// shards nor steps them, and a load of the rest sees the rest only.
class ExpertsDetached {
 public:
  explicit ExpertsDetached(nn::Module& model);
  ~ExpertsDetached();
  ExpertsDetached(const ExpertsDetached&) = delete;
  ExpertsDetached& operator=(const ExpertsDetached&) = delete;

 private:
  nn::Module& model_;
  std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>> experts_;
};

/// RAII: while alive every expert weight is whole on this rank (all-gathered over ep) and
/// the MoE layers run every expert here, so one rank evaluates alone; the shards and the
/// dispatch are put back at destruction (changes to the whole weights are not kept).
/// Collective over ep.
class EpWholeExperts {
 public:
  EpWholeExperts(nn::Module& model, const EpLayout& layout);
  ~EpWholeExperts();
  EpWholeExperts(const EpWholeExperts&) = delete;
  EpWholeExperts& operator=(const EpWholeExperts&) = delete;

 private:
  struct Saved {
    nn::GroupedExperts* module;
    std::string name;
    Tensor local;
  };
  std::vector<Saved> saved_;
  std::vector<std::pair<nn::MoE*, nn::MoEHooks>> hooks_;
};

/// The gradient sync of a layout with expert parallelism: `dense` (built over the model
/// with its experts detached) for every other parameter, and for the experts an optimizer
/// of their own (same factory, its learning rate taken from the dense one's at each step)
/// with their gradients summed over the edp group and divided by the replicas (the
/// gradient of the global mean loss, as one process has it).
std::unique_ptr<GradSync> make_expert_sync(std::unique_ptr<GradSync> dense, nn::Module& model,
                                           std::shared_ptr<const EpLayout> layout, const OptimizerFactory& make_optimizer);

/// Installs the context-parallel hooks on every MoE layer: each sequence is split over the
/// `cp` group, whose per-sequence expert counts are summed for the balance loss.
void apply_moe_cp(nn::Module& model, std::shared_ptr<comm::ProcessGroup> cp);

}  // namespace strata::parallel
