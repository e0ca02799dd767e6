// MoeMetrics: the routers' stats of one step, gathered over the ranks for the log.
#include "apps/moe_metrics.h"

#include <algorithm>
#include <string>

#include <strata/tensor/ops.h>

namespace strata::apps {

MoeMetrics::MoeMetrics(const nn::MoEConfig& moe, int64_t n_layer) : experts_(moe.experts) {
  for (int64_t i = 0; i < n_layer; ++i)
    if (moe.moe_block(i)) layers_.push_back(i);
  local_.assign(layers_.size() * size_t(experts_ + 4), 0.0);
}

void MoeMetrics::take(nn::Module& model) {
  if (!enabled()) return;
  std::fill(local_.begin(), local_.end(), 0.0);
  const size_t stride = size_t(experts_ + 4);
  for (const auto& [path, moe] : nn::moe_layers(model)) {
    // "h.3.mlp" / "layers.3.feed_forward": the block index is the second component.
    const size_t a = path.find('.'), b = path.find('.', a + 1);
    const int64_t block = std::stoll(path.substr(a + 1, b - a - 1));
    const auto it = std::find(layers_.begin(), layers_.end(), block);
    const nn::MoEStats s = moe->take_stats();
    if (it == layers_.end() || s.forwards == 0) continue;
    double* row = local_.data() + size_t(it - layers_.begin()) * stride;
    for (int64_t e = 0; e < experts_; ++e) row[e] = double(s.tokens[size_t(e)]);
    row[experts_] = double(s.dropped);
    row[experts_ + 1] = s.aux_loss / double(s.forwards);
    row[experts_ + 2] = s.z_loss / double(s.forwards);
    row[experts_ + 3] = 1;  // this rank holds the layer
  }
}

nlohmann::json MoeMetrics::reduce(comm::ProcessGroup& world, int tp) const {
  std::vector<double> all = local_;
  if (world.size() > 1)
    all = comm::all_reduce_host(world, ops::from_vector(local_, {int64_t(local_.size())}), comm::ReduceOp::sum)
              .to_vector<double>();
  const size_t stride = size_t(experts_ + 4);
  nlohmann::json tokens = nlohmann::json::array(), dropped = nlohmann::json::array();
  double aux = 0, z = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const double* row = all.data() + l * stride;
    const double holders = std::max(1.0, row[experts_ + 3]);
    nlohmann::json t = nlohmann::json::array();
    for (int64_t e = 0; e < experts_; ++e) t.push_back(int64_t(row[e] / tp + 0.5));
    tokens.push_back(std::move(t));
    dropped.push_back(int64_t(row[experts_] / tp + 0.5));
    aux += row[experts_ + 1] / holders;
    z += row[experts_ + 2] / holders;
  }
  return {{"layers", layers_}, {"tokens", tokens}, {"dropped", dropped}, {"aux_loss", aux}, {"z_loss", z}};
}

}  // namespace strata::apps
