// recompute_in_backward: autograd's checkpoint() with the generators' draws replayed.
#include <strata/nn/recompute.h>

#include <memory>
#include <utility>

#include <strata/autograd/functions.h>
#include <strata/autograd/grad_mode.h>
#include <strata/core/error.h>

namespace strata::nn {

Recompute parse_recompute(const std::string& s, const std::string& key) {
  if (s == "none" || s == "false") return Recompute::none;
  if (s == "full" || s == "true") return Recompute::full;
  if (s == "selective") return Recompute::selective;
  STRATA_THROW(ConfigError, key, ": expected one of none|full|selective (or true|false), got '", s, "'");
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::full: return "full";
    case Recompute::selective: return "selective";
  }
  return "?";
}

Tensor recompute_in_backward(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                             std::vector<Generator*> gens) {
  if (!grad_enabled()) return fn(x);
  // checkpoint() calls the function twice: the forward, then the recompute in backward.
  struct Replay {
    std::vector<Generator*> gens;
    std::vector<std::pair<uint64_t, uint64_t>> at_forward;
    bool ran = false;
  };
  auto rp = std::make_shared<Replay>();
  rp->gens = std::move(gens);
  auto run = [fn, rp](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    if (!rp->ran) {
      rp->ran = true;
      for (Generator* g : rp->gens) rp->at_forward.emplace_back(g->seed(), g->offset());
      return {fn(in[0])};
    }
    std::vector<std::pair<uint64_t, uint64_t>> now;
    for (size_t j = 0; j < rp->gens.size(); ++j) {
      now.emplace_back(rp->gens[j]->seed(), rp->gens[j]->offset());
      rp->gens[j]->set_state(rp->at_forward[j].first, rp->at_forward[j].second);
    }
    Tensor out = fn(in[0]);
    for (size_t j = 0; j < rp->gens.size(); ++j) rp->gens[j]->set_state(now[j].first, now[j].second);
    return {out};
  };
  return checkpoint(run, {x})[0];
}

}  // namespace strata::nn
