// apply_tp: the broadcast, the child swaps and the record of what was sharded.
#include <strata/parallel/tp_plan.h>

#include <strata/optim/clip.h>

namespace strata::parallel {

const char* tp_style_name(TpStyle s) {
  switch (s) {
    case TpStyle::colwise: return "colwise";
    case TpStyle::colwise_qkv: return "colwise_qkv";
    case TpStyle::rowwise: return "rowwise";
    case TpStyle::parallel_rng: return "parallel_rng";
  }
  return "?";
}

const TpShardedParam* TpLayout::find(const std::string& name) const {
  for (const auto& p : sharded)
    if (p.name == name) return &p;
  return nullptr;
}

TpLayout apply_tp(nn::Module& model, const TpPlan& plan, std::shared_ptr<comm::ProcessGroup> tp) {
  STRATA_CHECK(tp != nullptr, "[apply_tp] the tp group is null");
  const int n = tp->size();
  std::vector<comm::Work> works;
  for (const auto& [name, t] : model.state_dict()) works.push_back(tp->broadcast(t, 0));
  for (const auto& w : works) w.wait();
  const std::vector<Generator*> gens = model.generators();
  if (n > 1 && !gens.empty()) {
    std::vector<int64_t> st;
    for (const Generator* g : gens) {
      st.push_back(int64_t(g->seed()));
      st.push_back(int64_t(g->offset()));
    }
    // Rank 0's block of a host all-gather (works on every backend, nccl included).
    const auto v = comm::all_gather_host(*tp, ops::from_vector(st, {int64_t(st.size())})).to_vector<int64_t>();
    for (size_t i = 0; i < gens.size(); ++i) gens[i]->set_state(uint64_t(v[2 * i]), uint64_t(v[2 * i + 1]));
  }
  // Every entry is checked before any module changes.
  for (const auto& [path, style] : plan) {
    const std::shared_ptr<nn::Module> m = model.child(path);  // throws naming the children
    if (style == TpStyle::parallel_rng) {
      STRATA_CHECK(m->own_generator() != nullptr, "[apply_tp] plan entry '", path, "' (parallel_rng) is a ",
                   m->type_name(), ", which has no generator of its own");
      continue;
    }
    const auto* lin = dynamic_cast<const nn::Linear*>(m.get());
    STRATA_CHECK(lin != nullptr, "[apply_tp] plan entry '", path, "' (", tp_style_name(style), ") is a ",
                 m->type_name(), ", not a Linear");
    const bool row = style == TpStyle::rowwise;
    const int64_t width = row ? lin->in_features() : lin->out_features(), parts = style == TpStyle::colwise_qkv ? 3 : 1;
    STRATA_CHECK(width % (parts * n) == 0, "[apply_tp] '", path, "': ", width, row ? " input" : " output",
                 " features do not split into ", parts, " part(s) x ", n, " tensor-parallel ranks");
  }
  TpLayout out{.tp = tp, .sharded = {}, .modules = {}};
  for (const auto& [path, style] : plan) {
    if (style == TpStyle::parallel_rng) {
      Generator* g = model.child(path)->own_generator();
      g->set_state(g->seed() + 2718 + uint64_t(tp->rank()), g->offset());
      continue;
    }
    const auto& lin = dynamic_cast<const nn::Linear&>(*model.child(path));
    const std::string pre = path + ".";
    std::shared_ptr<nn::Module> shard;
    if (style == TpStyle::rowwise) {
      out.sharded.push_back({pre + "weight", lin.weight().shape(), {1, 1}});
      shard = std::make_shared<RowParallelLinear>(lin, tp);
    } else {
      const int64_t parts = style == TpStyle::colwise_qkv ? 3 : 1;
      out.sharded.push_back({pre + "weight", lin.weight().shape(), {0, parts}});
      if (lin.has_bias()) out.sharded.push_back({pre + "bias", lin.bias().shape(), {0, parts}});
      shard = std::make_shared<ColumnParallelLinear>(lin, tp, parts);
    }
    shard->train(lin.is_training());
    model.replace_child(path, std::move(shard));
    out.modules.push_back(path);
  }
  return out;
}

TpWholeModules::TpWholeModules(nn::Module& model, const TpLayout& layout) : model_(model) {
  for (const std::string& path : layout.modules) {
    std::shared_ptr<nn::Module> shard = model.child(path);
    const auto whole = [&](const char* leaf) {
      const std::string name = path + "." + leaf;
      const TpShardedParam* p = layout.find(name);
      const Tensor& t = model.parameter(name);
      return p ? tp_unshard(t, p->split, *layout.tp) : t.detach();
    };
    const bool bias = !shard->named_parameters().empty() && shard->named_parameters().back().first == "bias";
    auto lin = std::make_shared<nn::Linear>(whole("weight"), bias ? whole("bias") : Tensor());
    lin->train(shard->is_training());
    model.replace_child(path, lin);
    shards_.emplace_back(path, std::move(shard));
  }
}

TpWholeModules::~TpWholeModules() {
  for (auto& [path, shard] : shards_) model_.replace_child(path, std::move(shard));
}

double tp_grad_norm_sq(const nn::NamedTensors& params, const TpLayout& layout) {
  std::vector<Tensor> sharded, replicated;
  for (const auto& [name, t] : params) (layout.find(name) ? sharded : replicated).push_back(t);
  Tensor sq = ops::full({1}, optim::grad_norm_sq(sharded), DType::f64);
  if (layout.tp->size() > 1) sq = comm::all_reduce_host(*layout.tp, sq, comm::ReduceOp::sum);
  return sq.item<double>() + optim::grad_norm_sq(replicated);
}

}  // namespace strata::parallel
