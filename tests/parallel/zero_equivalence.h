// The ZeRO equivalence harness (local-backend gtests and the mpirun test): train under
// ZeRO stage 1/2/3 on N ranks and compare with DDP / the single-process reference of
// equivalence.h; count the bytes each step sends.
#pragma once
#include "equivalence.h"
#include "optim/clip.h"
#include "parallel/zero.h"

namespace strata::testing {

struct ZeroCase {
  EquivCase base{};
  int stage = 1;
  double bucket_cap_mb = 25.0;
  bool prefetch = true;
  double clip = 0.0;  // > 0: clip the global grad norm every step
};

inline parallel::OptimizerFactory optimizer_factory(const std::string& kind) {
  return [kind](optim::NamedTensors params) -> std::unique_ptr<optim::Optimizer> {
    if (kind == "adam") return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions{.lr = 1e-2});
    return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  };
}

/// Single process, batch B, with clipping (the norms it saw go to `norms`, the losses to `losses`).
inline nn::NamedTensors reference_state_clipped(const ZeroCase& zc, std::vector<double>* norms,
                                                std::vector<double>* losses = nullptr) {
  const EquivCase& c = zc.base;
  auto model = make_model(c.model, kModelSeed);
  auto opt = make_optimizer(c.optim, *model);
  for (int s = 0; s < c.steps; ++s) {
    auto [x, y] = make_batch(c.model, c.batch, s);
    Tensor loss = batch_loss(*model, x, y);
    if (losses) losses->push_back(loss.item<double>());
    backward(loss);
    if (zc.clip > 0) {
      const double nrm = optim::clip_grad_norm(model->parameters(), zc.clip);
      if (norms) norms->push_back(nrm);
    }
    opt->step();
    opt->zero_grad();
  }
  return model->state_dict();
}

struct ZeroResult {
  nn::NamedTensors state;     // full parameters and buffers after the last step
  std::vector<double> norms;  // clip_grad_norm results per step
  int64_t bytes_per_step = 0; // reduce-scatter + all-gather bytes this rank sent in the last step
  int64_t padded_elems = 0;   // sum over units of the padded flat size
};

/// Trains under ZeRO on this rank of `group` (each rank starts from a different init;
/// model and batches on c.device). `losses`: each step's loss averaged over the ranks.
inline ZeroResult zero_state(comm::ProcessGroup& group, const ZeroCase& zc, std::vector<double>* losses = nullptr) {
  const EquivCase& c = zc.base;
  const int n = group.size(), r = group.rank();
  auto model = make_model(c.model, r == 0 ? kModelSeed : kModelSeed + 77 * uint64_t(r));
  model->to(c.device);
  parallel::ZeroOptions o{.stage = zc.stage, .bucket_cap_mb = zc.bucket_cap_mb, .prefetch = zc.prefetch, .wrap = {}};
  auto zero = parallel::apply_zero(model, group, o, optimizer_factory(c.optim));
  ZeroResult res;
  for (const auto& u : zero->units()) res.padded_elems += u.padded();
  const int64_t per = c.batch / n, micro = per / c.accum;
  auto sent = [&] {
    const comm::CommStats st = group.stats();
    return st[comm::OpKind::reduce_scatter].bytes_sent + st[comm::OpKind::all_gather].bytes_sent;
  };
  for (int s = 0; s < c.steps; ++s) {
    const int64_t before = sent();
    auto [xb, yb] = make_batch(c.model, c.batch, s);
    const Tensor x = xb.to(c.device), y = yb.to(c.device);
    double step_loss = 0;
    for (int m = 0; m < c.accum; ++m) {
      Tensor xm = ops::narrow(x, 0, r * per + m * micro, micro), ym = ops::narrow(y, 0, r * per + m * micro, micro);
      auto step_micro = [&] {
        Tensor loss = zero->forward_with([&] { return batch_loss(*model, xm, ym); }) * (1.0 / double(c.accum));
        if (losses) step_loss += loss.item<double>();
        backward(loss);
        zero->finalize();
      };
      if (m + 1 < c.accum) {
        auto guard = zero->no_sync();
        step_micro();
      } else {
        step_micro();
      }
    }
    if (losses) losses->push_back(rank_mean(group, step_loss));
    if (zc.clip > 0) res.norms.push_back(zero->clip_grad_norm(zc.clip));
    zero->step();
    zero->zero_grad();
    res.bytes_per_step = sent() - before;
  }
  res.state = zero->full_state_dict();
  return res;
}

}  // namespace strata::testing
