// One rank of a data-parallel layout training the MLP (stage 0: DDP, 1-3: ZeRO), as the
// checkpoint tests use it: a step on the rank's share of a batch, save and load through
// the sharded checkpoint format.
#pragma once
#include <string>

#include <strata/parallel/checkpoint/layout_io.h>
#include "equivalence.h"

namespace strata::testing {

struct MlpLayoutRank {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<parallel::DistributedDataParallel> ddp;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<parallel::ZeroDataParallel> zero;
  DType dt;

  /// `make_opt` builds the optimizer at every stage; ZeRO's units are cut at
  /// `bucket_cap_mb`; the model and the inputs are cast to `d`.
  MlpLayoutRank(comm::ProcessGroup& g, int stage, uint64_t seed, const parallel::OptimizerFactory& make_opt,
                double bucket_cap_mb, DType d = DType::f32)
      : model(make_model("mlp", seed)), dt(d) {
    if (dt != DType::f32) model->to(dt);
    if (stage == 0) {
      ddp = parallel::apply_ddp(model, g, {});
      opt = make_opt(model->named_parameters());
    } else {
      zero = parallel::apply_zero(model, g, {.stage = stage, .bucket_cap_mb = bucket_cap_mb, .wrap = {}}, make_opt);
    }
  }
  optim::Optimizer& optimizer() { return zero ? zero->optimizer() : *opt; }
  /// One step on this rank's rows of make_batch("mlp", batch, s).
  void step(comm::ProcessGroup& g, int s, int64_t batch) {
    auto [x, y] = make_batch("mlp", batch, s);
    const int64_t per = batch / g.size();
    Tensor xr = ops::narrow(x, 0, g.rank() * per, per), yr = ops::narrow(y, 0, g.rank() * per, per);
    if (dt != DType::f32) xr = ops::to_dtype(xr, dt);
    if (zero) {
      backward(zero->forward_with([&] { return batch_loss(*model, xr, yr); }));
      zero->finalize();
      zero->step();
      zero->zero_grad();
    } else {
      backward(ddp->forward_with([&] { return batch_loss(*model, xr, yr); }));
      ddp->finalize();
      opt->step();
      ddp->zero_grad();
    }
  }
  void save(comm::ProcessGroup& g, const std::string& dir, int stage) {
    auto pieces = zero ? zero->state_pieces() : parallel::replicated_pieces(*model, opt.get(), g.rank());
    parallel::save_sharded(dir, g, pieces, stage, {{parallel::kOptimizerMetaKey, optimizer().state_dict().scalars}});
  }
  void load(const std::string& dir) {
    parallel::CheckpointReader ck(dir);
    if (zero)
      parallel::load_zero(ck, *zero, true);
    else
      parallel::load_replicated(ck, *model, opt.get());
  }
};

}  // namespace strata::testing
