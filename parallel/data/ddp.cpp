// apply_ddp and the DDP handle (see ddp.h); the gradient machinery is in reducer.cpp.
#include <strata/parallel/data/ddp.h>

#include <cmath>

#include <strata/autograd/grad_mode.h>
#include <strata/core/config.h>
#include <strata/parallel/data/bucket_plan.h>
#include <strata/parallel/data/coalesced.h>

namespace strata::parallel {

void DDPOptions::validate() const {
  if (!(std::isfinite(bucket_cap_mb) && bucket_cap_mb > 0))
    config_fail("parallel.bucket_cap_mb", "must be a positive number of MiB, got " + std::to_string(bucket_cap_mb));
  if (!(std::isfinite(first_bucket_mb) && first_bucket_mb > 0))
    config_fail("parallel.first_bucket_mb",
                "must be a positive number of MiB, got " + std::to_string(first_bucket_mb));
  if (!(std::isfinite(last_bucket_mb) && last_bucket_mb > 0))
    config_fail("parallel.last_bucket_mb", "must be a positive number of MiB, got " + std::to_string(last_bucket_mb));
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, comm::ProcessGroup& group,
                                                 const DDPOptions& opts)
    : module_(std::move(module)), group_(group), opts_(opts) {
  STRATA_CHECK(module_ != nullptr, "[ddp] apply_ddp got a null module");
  opts_.validate();
  for (auto& [name, t] : module_->named_buffers()) buffers_.push_back(t);
  sync_parameters();
  ReducerOptions ro;
  ro.cap_bytes = mib_to_bytes(opts_.bucket_cap_mb);
  ro.first_cap_bytes = mib_to_bytes(opts_.first_bucket_mb);
  ro.last_cap_bytes = mib_to_bytes(opts_.last_bucket_mb);
  ro.find_unused_parameters = opts_.find_unused_parameters;
  ro.gradient_as_bucket_view = opts_.gradient_as_bucket_view;
  reducer_ = std::make_unique<Reducer>(module_->named_parameters(), group_, ro);
}

void DistributedDataParallel::sync_parameters() {
  std::vector<Tensor> all;
  for (auto& [name, t] : module_->named_parameters()) all.push_back(t.detach());
  for (auto& t : buffers_) all.push_back(t);
  broadcast_coalesced(group_, all, 0);
}

void DistributedDataParallel::sync_buffers() { broadcast_coalesced(group_, buffers_, 0); }

void DistributedDataParallel::pre_forward() {
  if (opts_.broadcast_buffers) sync_buffers();
}

void DistributedDataParallel::post_forward(const std::vector<Tensor>& outputs) {
  // Like PyTorch: only a forward that records a graph is followed by a backward.
  if (grad_enabled()) reducer_->prepare_for_backward(outputs);
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  pre_forward();
  Tensor y = module_->forward(x);
  post_forward({y});
  return y;
}

Tensor DistributedDataParallel::forward_with(const std::function<Tensor()>& fn) {
  pre_forward();
  Tensor y = fn();
  post_forward({y});
  return y;
}

void DistributedDataParallel::finalize() { reducer_->finalize(); }

std::unique_ptr<DistributedDataParallel> apply_ddp(std::shared_ptr<nn::Module> module, comm::ProcessGroup& group,
                                                   const DDPOptions& opts) {
  return std::make_unique<DistributedDataParallel>(std::move(module), group, opts);
}

}  // namespace strata::parallel
