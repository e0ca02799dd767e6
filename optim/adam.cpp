// Adam/AdamW step: one fused ops::adam_step_ per parameter under NoGradGuard.
#include <strata/optim/adam.h>

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

void Adam::step() {
  NoGradGuard no_grad;
  cpu::op_profile::Phase profile_phase("optimizer");
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
    if (Tensor w = master(i); w.defined())
      ops::adam_step_mixed_(w, p, g, m, v, ap);  // f32 master step, p = its rounding
    else
      ops::adam_step_(p, g, m, v, ap);
  }
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
