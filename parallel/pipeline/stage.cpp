// Splitting a model's blocks into pipeline stages and keeping a rank's stages (see
// pipeline_stage.h).
#include <strata/parallel/pipeline/stage.h>

#include <algorithm>
#include <limits>
#include <set>

#include <strata/core/config.h>
#include <strata/core/error.h>

namespace strata::parallel {
namespace {

// What stays where a rank dropped a block or child: no parameters, never run. It keeps
// the dropped part's random generators (Dropout modules, no parameters) as children, so
// every rank lists the whole model's generators in the same order (checkpoints hold
// them all; ParallelModel takes each one's state from the rank that runs it).
class DroppedStage : public nn::Module {
 public:
  explicit DroppedStage(nn::Module& dropped) {
    int k = 0;
    for (const auto& [name, m] : dropped.named_modules())
      if (m->own_generator() && m->parameters().empty()) register_module("rng" + std::to_string(k++), m);
  }
  Tensor forward(const Tensor&) override {
    STRATA_THROW(Error, "[pipeline] this module lives on another pipeline stage");
  }
  std::string type_name() const override { return "DroppedStage"; }
};

int64_t params_of(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace

std::vector<PipelineStageSpec> split_stages(const std::vector<int64_t>& block_params, int64_t first_params,
                                            int64_t last_params, int stages,
                                            const std::vector<int64_t>& explicit_layers) {
  const int64_t L = int64_t(block_params.size());
  if (L < stages)
    config_fail("parallel.pp", "gives " + std::to_string(stages) + " pipeline stage(s) (pp x pp_virtual) but the model has " +
                                   std::to_string(L) + " block(s): each stage needs at least one");
  std::vector<int64_t> counts;
  if (!explicit_layers.empty()) {
    if (int64_t(explicit_layers.size()) != stages)
      config_fail("parallel.pp_layers", "has " + std::to_string(explicit_layers.size()) + " entries but there are " +
                                            std::to_string(stages) + " stages (pp x pp_virtual)");
    int64_t sum = 0;
    for (size_t i = 0; i < explicit_layers.size(); ++i) {
      if (explicit_layers[i] < 1)
        config_fail("parallel.pp_layers[" + std::to_string(i) + "]", "must be >= 1, got " + std::to_string(explicit_layers[i]));
      sum += explicit_layers[i];
    }
    if (sum != L)
      config_fail("parallel.pp_layers", "sums to " + std::to_string(sum) + " but the model has " + std::to_string(L) +
                                            " block(s)");
    counts = explicit_layers;
  } else {
    // best[s][e]: the smallest largest-stage cost with stages 0..s-1 covering blocks [0, e).
    const int64_t inf = std::numeric_limits<int64_t>::max();
    std::vector<int64_t> prefix(size_t(L) + 1, 0);
    for (int64_t i = 0; i < L; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + block_params[size_t(i)];
    const auto cost = [&](int s, int64_t a, int64_t b) {
      return prefix[size_t(b)] - prefix[size_t(a)] + (s == 0 ? first_params : 0) + (s == stages - 1 ? last_params : 0);
    };
    std::vector<std::vector<int64_t>> best(size_t(stages) + 1, std::vector<int64_t>(size_t(L) + 1, inf));
    std::vector<std::vector<int64_t>> cut = best;
    best[0][0] = 0;
    for (int s = 1; s <= stages; ++s)
      for (int64_t e = s; e <= L - (stages - s); ++e)
        for (int64_t a = s - 1; a < e; ++a) {
          if (best[size_t(s) - 1][size_t(a)] == inf) continue;
          const int64_t c = std::max(best[size_t(s) - 1][size_t(a)], cost(s - 1, a, e));
          if (c < best[size_t(s)][size_t(e)]) {  // first (earliest) cut on ties: deterministic
            best[size_t(s)][size_t(e)] = c;
            cut[size_t(s)][size_t(e)] = a;
          }
        }
    counts.assign(size_t(stages), 0);
    for (int64_t s = stages, e = L; s > 0; --s) {
      const int64_t a = cut[size_t(s)][size_t(e)];
      counts[size_t(s) - 1] = e - a;
      e = a;
    }
  }
  std::vector<PipelineStageSpec> out;
  int64_t begin = 0;
  for (int s = 0; s < stages; ++s) {
    out.push_back({.stage = s, .stages = stages, .begin = begin, .end = begin + counts[size_t(s)]});
    begin += counts[size_t(s)];
  }
  return out;
}

std::vector<PipelineStageSpec> plan_stages(const nn::Module& model, const PipelinePlan& plan, int stages) {
  const auto blocks = model.child(plan.blocks);
  std::vector<int64_t> bp;
  for (const auto& [name, b] : blocks->named_children()) bp.push_back(params_of(*b));
  const auto sum_of = [&](const std::vector<std::string>& names) {
    int64_t n = 0;
    for (const auto& c : names) n += params_of(*model.child(c));
    return n;
  };
  if (plan.layer_blocks.empty()) return split_stages(bp, sum_of(plan.first), sum_of(plan.last), stages, plan.layers);
  // Split whole layers, then turn layer ranges into block ranges.
  std::vector<int64_t> lp, start{0};
  for (int64_t n : plan.layer_blocks) {
    STRATA_CHECK(n >= 1 && start.back() + n <= int64_t(bp.size()), "[pipeline] the plan's layer_blocks do not fit the ",
                 bp.size(), " blocks of ", plan.blocks);
    int64_t p = 0;
    for (int64_t i = start.back(); i < start.back() + n; ++i) p += bp[size_t(i)];
    lp.push_back(p);
    start.push_back(start.back() + n);
  }
  STRATA_CHECK(start.back() == int64_t(bp.size()), "[pipeline] the plan's layer_blocks cover ", start.back(), " of the ",
               bp.size(), " blocks of ", plan.blocks);
  std::vector<PipelineStageSpec> out = split_stages(lp, sum_of(plan.first), sum_of(plan.last), stages, plan.layers);
  for (auto& s : out) {
    s.begin = start[size_t(s.begin)];
    s.end = start[size_t(s.end)];
  }
  return out;
}

void keep_stages(nn::Module& model, const PipelinePlan& plan, const std::vector<PipelineStageSpec>& mine) {
  std::set<std::string> keep;
  bool first = false, last = false;
  for (const auto& s : mine) {
    first = first || s.first();
    last = last || s.last();
  }
  if (first) keep.insert(plan.first.begin(), plan.first.end());
  if (last) keep.insert(plan.last.begin(), plan.last.end());
  const std::string top_blocks = plan.blocks.substr(0, plan.blocks.find('.'));
  for (const auto& [name, child] : model.named_children()) {
    const bool planned = name == top_blocks || std::count(plan.first.begin(), plan.first.end(), name) ||
                         std::count(plan.last.begin(), plan.last.end(), name);
    STRATA_CHECK(planned || params_of(*child) == 0, "[pipeline] the model's child '", name,
                 "' has parameters but is in no part of the pipeline plan (first, blocks, last)");
    if (planned && name != top_blocks && !keep.count(name)) model.replace_child(name, std::make_shared<DroppedStage>(*child));
  }
  const auto blocks = model.child(plan.blocks);
  int64_t i = 0;
  std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>> drop;
  for (const auto& [name, b] : blocks->named_children()) {
    bool held = false;
    for (const auto& s : mine) held = held || (i >= s.begin && i < s.end);
    if (!held) drop.emplace_back(plan.blocks + "." + name, b);
    ++i;
  }
  for (const auto& [d, b] : drop) model.replace_child(d, std::make_shared<DroppedStage>(*b));
}

std::vector<char> owned_generators(nn::Module& model) {
  std::set<const Generator*> dropped;
  for (const auto& [name, m] : model.named_modules())
    if (m->type_name() == "DroppedStage")
      for (const Generator* g : m->generators()) dropped.insert(g);
  std::vector<char> out;
  for (const Generator* g : model.generators()) out.push_back(dropped.count(g) ? 0 : 1);
  return out;
}

}  // namespace strata::parallel
