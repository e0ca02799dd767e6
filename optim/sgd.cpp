// SGD step: one fused ops::sgd_step_ per parameter under NoGradGuard.
#include <strata/optim/sgd.h>

#include <strata/autograd/grad_mode.h>
#include <strata/tensor/half_ops.h>
#include <strata/tensor/ops.h>

namespace strata::optim {

SGD::SGD(NamedTensors named_params, const SGDOptions& opt) : Optimizer(std::move(named_params), opt.lr), opt_(opt) {
  STRATA_CHECK(opt.momentum >= 0 && opt.weight_decay >= 0, "[SGD] momentum and weight_decay must be >= 0, got ",
               opt.momentum, ", ", opt.weight_decay);
  STRATA_CHECK(!opt.nesterov || (opt.momentum > 0 && opt.dampening == 0),
               "[SGD] nesterov needs momentum > 0 and dampening == 0, got momentum=", opt.momentum,
               " dampening=", opt.dampening);
}

std::vector<std::string> SGD::state_names() const {
  if (opt_.momentum == 0) return {};
  return {"momentum_buffer"};
}

void SGD::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i].second;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    STRATA_CHECK(p.is_contiguous() && g.shape() == p.shape(), "[SGD] parameter '", params_[i].first,
                 "' must be contiguous with a same-shaped grad: ", p.str(), " grad ", g.str());
    g = ops::contiguous(g);
    Tensor buf;
    bool first = false;
    if (opt_.momentum != 0) buf = state(i, 0, &first);
    const ops::SgdParams sp{lr(), opt_.momentum, opt_.dampening, opt_.weight_decay, opt_.nesterov, first};
    if (Tensor w = master(i); w.defined())
      ops::sgd_step_mixed_(w, p, g, buf, sp);  // f32 master step, p = its rounding
    else
      ops::sgd_step_(p, g, buf, sp);
    ++param_steps_[i];
  }
  count_step();
}

void SGD::save_hparams(nlohmann::json& j) const {
  j["momentum"] = opt_.momentum;
  j["dampening"] = opt_.dampening;
  j["weight_decay"] = opt_.weight_decay;
  j["nesterov"] = opt_.nesterov;
}

void SGD::load_hparams(const nlohmann::json& j) {
  SGDOptions o = opt_;
  o.momentum = j.value("momentum", o.momentum);
  o.dampening = j.value("dampening", o.dampening);
  o.weight_decay = j.value("weight_decay", o.weight_decay);
  o.nesterov = j.value("nesterov", o.nesterov);
  STRATA_CHECK((o.momentum == 0) == (opt_.momentum == 0), "[SGD::load_state_dict] momentum ", o.momentum,
               " in the state vs ", opt_.momentum, " here: momentum buffers would not match");
  opt_ = o;
}

}  // namespace strata::optim
