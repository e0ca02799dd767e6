// The MLP's planner description (see mlp_spec.h).
#include <strata/nn/mlp_spec.h>

#include <string>

#include <strata/nn/mlp_plans.h>

namespace strata::nn {

ModelSpec mlp_spec(const MLPConfig& cfg) {
  // net = Sequential(Flatten, [Linear, activation, Dropout if p > 0] per hidden, Linear).
  std::vector<ParamSpec> ps;
  const auto add_linear = [&ps](int64_t i, int64_t in, int64_t out) {
    const std::string path = "net." + std::to_string(i);
    ps.push_back({.name = path + ".weight", .shape = {out, in}});
    ps.push_back({.name = path + ".bias", .shape = {out}});
  };
  int64_t width = cfg.input, i = 1;  // net.0 is the Flatten
  for (int64_t h : cfg.hidden) {
    add_linear(i, width, h);
    i += cfg.dropout > 0 ? 3 : 2;
    width = h;
  }
  add_linear(i, width, cfg.classes);
  const TpPlan plan = mlp_tp_plan(cfg);
  for (ParamSpec& p : ps) p.tp_sharded = tp_shards(plan, p.name);

  ModelSpec s = ModelSpec::from_params(std::move(ps));
  double forward = 0;
  for (const ParamSpec& p : s.params)
    if (p.shape.size() == 2) forward += 2.0 * double(p.numel());  // Linear: 2·in·out
  s.flops_per_sample = 3.0 * forward;
  // Linears come as (weight, bias) pairs of entries; the pairs of mlp_tp_plan exchange the
  // colwise layer's input (backward) and the rowwise layer's output (forward).
  const size_t linears = s.params.size() / 2;
  int64_t exchange = 0;
  for (size_t k = 0; k + 2 < linears; k += 2) {
    exchange += s.params[2 * k].shape[1] + s.params[2 * (k + 1)].shape[0];
    s.tp_widths.push_back(cfg.hidden[k]);
  }
  if (exchange > 0) s.tp_whole = {{.per_sample = exchange, .count = 1}};
  int64_t per_sample = cfg.input;  // the input, then per Linear its output and its activation's
  for (const ParamSpec& p : s.params)
    if (p.shape.size() == 2) per_sample += 2 * p.shape[0];
  s.activation_bytes = [per_sample](const RankActivationQuery& q) { return q.batch * per_sample * 4; };
  return s;
}

}  // namespace strata::nn
