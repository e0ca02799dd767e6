// Adam/AdamW step: fused updates under NoGradGuard (ops::adam_step_multi_ over the
// parameters, ops::adam_step_mixed_ for those with f32 masters).
#include <strata/optim/adam.h>

#include <map>

#include <strata/autograd/grad_mode.h>
#include <strata/tensor/cpu/op_profile.h>
#include <strata/tensor/half_ops.h>
#include <strata/tensor/ops.h>

namespace strata::optim {

Adam::Adam(NamedTensors named_params, const AdamOptions& opt) : Adam(std::move(named_params), opt, false) {}

Adam::Adam(NamedTensors named_params, const AdamOptions& opt, bool decoupled)
    : Optimizer(std::move(named_params), opt.lr), opt_(opt), decoupled_(decoupled) {
  STRATA_CHECK(opt.beta1 >= 0 && opt.beta1 < 1 && opt.beta2 >= 0 && opt.beta2 < 1, "[", decoupled ? "AdamW" : "Adam",
               "] betas must be in [0, 1), got (", opt.beta1, ", ", opt.beta2, ")");
  STRATA_CHECK(opt.eps >= 0 && opt.weight_decay >= 0, "[", decoupled ? "AdamW" : "Adam",
               "] eps and weight_decay must be >= 0, got ", opt.eps, ", ", opt.weight_decay);
}

AdamW::AdamW(NamedTensors named_params, const AdamWOptions& o)
    : Adam(std::move(named_params), AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}, true) {}

// The parameters without an f32 master go through ops::adam_step_multi_, one call per
// step count (they share it unless some had no gradient on some step): on CUDA a few
// launches for the whole model; on the CPU the per-tensor kernel, as before.
void Adam::step() {
  NoGradGuard no_grad;
  cpu::op_profile::Phase profile_phase("optimizer");
  struct Lists {
    std::vector<Tensor> p, g, m, v;
  };
  std::map<int64_t, Lists> by_step;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i].second;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    STRATA_CHECK(p.is_contiguous() && g.shape() == p.shape(), "[", type_name(), "] parameter '", params_[i].first,
                 "' must be contiguous with a same-shaped grad: ", p.str(), " grad ", g.str());
    g = ops::contiguous(g);
    Tensor m = state(i, 0), v = state(i, 1);  // handles: state() may grow the slot vector
    const int64_t t = ++param_steps_[i];
    const ops::AdamParams ap{lr(), opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay, t, decoupled_};
    if (Tensor w = master(i); w.defined()) {
      ops::adam_step_mixed_(w, p, g, m, v, ap);  // f32 master step, p = its rounding
      continue;
    }
    Lists& l = by_step[t];
    l.p.push_back(std::move(p));
    l.g.push_back(std::move(g));
    l.m.push_back(std::move(m));
    l.v.push_back(std::move(v));
  }
  for (auto& [t, l] : by_step)
    ops::adam_step_multi_(l.p, l.g, l.m, l.v,
                          {lr(), opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay, t, decoupled_});
  count_step();
}

void Adam::save_hparams(nlohmann::json& j) const {
  j["beta1"] = opt_.beta1;
  j["beta2"] = opt_.beta2;
  j["eps"] = opt_.eps;
  j["weight_decay"] = opt_.weight_decay;
}

void Adam::load_hparams(const nlohmann::json& j) {
  AdamOptions o = opt_;
  o.beta1 = j.value("beta1", o.beta1);
  o.beta2 = j.value("beta2", o.beta2);
  o.eps = j.value("eps", o.eps);
  o.weight_decay = j.value("weight_decay", o.weight_decay);
  opt_ = o;
}

}  // namespace strata::optim
