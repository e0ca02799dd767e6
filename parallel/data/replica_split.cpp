// DataParallel's thread replicas behind the ModelSplit interface.
#include <strata/parallel/data/replica_split.h>

#include <strata/core/threads.h>

namespace strata::parallel {

ReplicaSplit::ReplicaSplit(std::shared_ptr<DataParallel> replicas, LossFn loss)
    : WholeModel(replicas, std::move(loss)), replicas_(std::move(replicas)) {}

nlohmann::json ReplicaSplit::extra_state() const {
  nlohmann::json reps = nlohmann::json::array();
  for (int k = 1; k < replicas_->replicas(); ++k) {
    nlohmann::json gens = nlohmann::json::array();
    for (Generator* g : replicas_->replica(k).generators()) gens.push_back({g->seed(), g->offset()});
    reps.push_back(gens);
  }
  return {{"dp_replica_rngs", reps}};
}

void ReplicaSplit::load_extra_state(const nlohmann::json& extra) {
  const nlohmann::json saved = extra.value("dp_replica_rngs", nlohmann::json());
  if (!saved.is_array() || saved.size() != size_t(replicas_->replicas() - 1)) return;  // another replica count
  for (int k = 1; k < replicas_->replicas(); ++k) {
    auto gens = replicas_->replica(k).generators();
    const auto& s = saved[size_t(k - 1)];
    if (!s.is_array() || s.size() != gens.size()) continue;
    for (size_t i = 0; i < gens.size(); ++i) gens[i]->set_state(s[i][0].get<uint64_t>(), s[i][1].get<uint64_t>());
  }
}

std::string ReplicaSplit::memory_detail(const optim::Optimizer& opt) const {
  if (last_memory_.empty()) return "";
  std::vector<ReplicaMemory> m = last_memory_;
  for (const auto& [name, t] : opt.state_dict().tensors) m[0].optimizer += t.nbytes();
  return "dp: bytes per replica in the last training step\n" + DataParallel::format_memory(m);
}

std::vector<std::string> ReplicaSplit::notes(int64_t batch) const {
  const int k = replicas_->replicas();
  return {"dp: " + std::to_string(k) + " replicas (threads in this process) x " + std::to_string(get_num_threads()) +
          " intra-op thread(s), about " + std::to_string((batch + k - 1) / k) + " samples per replica per micro-batch"};
}

}  // namespace strata::parallel
