// The MLP's tensor-parallel plan and pipeline split (see mlp_plans.h).
#include <strata/nn/mlp_plans.h>

#include <string>

#include <strata/autograd/functions.h>
#include <strata/nn/linear.h>

namespace strata::nn {

TpPlan mlp_tp_plan(const MLPConfig& cfg) {
  // net.<i> as MLP registers it: net.0 the Flatten, then per hidden layer its Linear, the
  // activation and (dropout > 0) a Dropout, then the output Linear.
  std::vector<std::string> linears;
  std::vector<std::vector<std::string>> rng_after;  // modules with their own generator after each Linear
  int64_t i = 1;
  for (size_t h = 0; h < cfg.hidden.size(); ++h) {
    linears.push_back("net." + std::to_string(i));
    rng_after.emplace_back();
    if (cfg.dropout > 0) rng_after.back().push_back("net." + std::to_string(i + 2));
    i += cfg.dropout > 0 ? 3 : 2;
  }
  linears.push_back("net." + std::to_string(i));
  rng_after.emplace_back();
  TpPlan plan;
  for (size_t k = 0; k + 2 < linears.size(); k += 2) {
    plan[linears[k]] = TpStyle::colwise;
    plan[linears[k + 1]] = TpStyle::rowwise;
    // Dropout between the pair acts on this rank's columns: masks of its own.
    for (const std::string& d : rng_after[k]) plan[d] = TpStyle::parallel_rng;
  }
  return plan;
}

PipelinePlan mlp_pp_plan(const MLP& mlp, const std::vector<int64_t>& layers) {
  PipelinePlan p;
  p.blocks = "net";
  p.layers = layers;
  std::vector<int64_t> width;  // per block: the feature width of its output
  int64_t w = mlp.config().input;
  bool seen_linear = false;
  for (const auto& [name, m] : mlp.child("net")->named_children()) {
    if (const auto* lin = dynamic_cast<const Linear*>(m.get())) {
      if (seen_linear) p.layer_blocks.push_back(0);  // a Linear starts the next layer
      seen_linear = true;
      w = lin->out_features();
    }
    if (p.layer_blocks.empty()) p.layer_blocks.push_back(0);  // the Flatten joins the first layer
    ++p.layer_blocks.back();
    width.push_back(w);
  }
  p.forward = [](Module& m, const PipelineStageSpec& s, const Tensor& in) {
    const auto children = m.child("net")->named_children();
    Tensor x = in;
    for (int64_t i = s.begin; i < s.end; ++i) x = (*children[size_t(i)].second)(x);
    return x;
  };
  p.loss = [](const Tensor& out, const Tensor& y) { return cross_entropy(out, y); };
  const DType act = stage_activation_dtype(mlp);
  p.activation = [width, act](const PipelineStageSpec& s, const Shape& in) {
    return ActivationSpec{{in[0], width[size_t(s.end) - 1]}, act};
  };
  return p;
}

}  // namespace strata::nn
