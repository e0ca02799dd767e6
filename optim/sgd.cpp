// SGD step: fused updates under NoGradGuard (ops::sgd_step_multi_ over the parameters,
// ops::sgd_step_mixed_ for those with f32 masters).
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

// As Adam::step: the parameters without a master in one ops::sgd_step_multi_ per
// first-step flag (momentum buffers start as the gradient on their first step).
void SGD::step() {
  NoGradGuard no_grad;
  struct Lists {
    std::vector<Tensor> p, g, buf;
  };
  Lists lists[2];  // [first step]
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
    ++param_steps_[i];
    if (Tensor w = master(i); w.defined()) {
      const ops::SgdParams sp{lr(), opt_.momentum, opt_.dampening, opt_.weight_decay, opt_.nesterov, first};
      ops::sgd_step_mixed_(w, p, g, buf, sp);  // f32 master step, p = its rounding
      continue;
    }
    Lists& l = lists[first ? 1 : 0];
    l.p.push_back(std::move(p));
    l.g.push_back(std::move(g));
    if (buf.defined()) l.buf.push_back(std::move(buf));
  }
  for (int first = 0; first < 2; ++first)
    ops::sgd_step_multi_(lists[first].p, lists[first].g, lists[first].buf,
                         {lr(), opt_.momentum, opt_.dampening, opt_.weight_decay, opt_.nesterov, first == 1});
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
