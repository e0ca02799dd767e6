// Thread replicas (DataParallel) as the split of a one-process layout: the whole model's
// step, each forward scattered over K replicas run by K threads and gathered on replica 0,
// where the loss and the optimizer live.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <strata/parallel/data/data_parallel.h>
#include <strata/parallel/whole_model.h>

namespace strata::parallel {

class ReplicaSplit final : public WholeModel {
 public:
  explicit ReplicaSplit(std::shared_ptr<DataParallel> replicas, LossFn loss);
  /// The dropout streams of replicas 1..K-1 ("dp_replica_rngs"); a single-process resume
  /// ignores them, and a checkpoint of another replica count leaves them as built.
  nlohmann::json extra_state() const override;
  void load_extra_state(const nlohmann::json& extra) override;
  void after_step() override { last_memory_ = replicas_->memory_report(); }
  std::string memory_detail(const optim::Optimizer& opt) const override;
  int compute_streams() const override { return replicas_->replicas(); }
  std::string strategy() const override { return "DataParallel"; }
  std::vector<std::string> notes(int64_t batch) const override;
  DataParallel& replicas() { return *replicas_; }

 private:
  std::shared_ptr<DataParallel> replicas_;
  std::vector<ReplicaMemory> last_memory_;  // the last step's, K small records
};

}  // namespace strata::parallel
