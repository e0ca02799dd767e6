// Reading and checking the `parallel:` config section (see parallel_config.h).
#include "parallel/parallel_config.h"

namespace strata::parallel {

ParallelConfig ParallelConfig::from_node(const ConfigNode& n) {
  ParallelConfig c;
  c.mode = n.get("mode", c.mode);
  n.one_of("mode", c.mode, {"none", "dp", "ddp"});
  c.replicas = n.get("replicas", c.replicas);
  n.check_range("replicas", c.replicas, 1, 1024);
  c.ddp.bucket_cap_mb = n.get("bucket_cap_mb", c.ddp.bucket_cap_mb);
  n.check_range("bucket_cap_mb", c.ddp.bucket_cap_mb, 0, 1e6, /*lo_open=*/true);
  c.ddp.first_bucket_mb = n.get("first_bucket_mb", c.ddp.first_bucket_mb);
  n.check_range("first_bucket_mb", c.ddp.first_bucket_mb, 0, 1e6, /*lo_open=*/true);
  c.ddp.last_bucket_mb = n.get("last_bucket_mb", c.ddp.last_bucket_mb);
  n.check_range("last_bucket_mb", c.ddp.last_bucket_mb, 0, 1e6, /*lo_open=*/true);
  c.ddp.find_unused_parameters = n.get("find_unused_parameters", c.ddp.find_unused_parameters);
  c.ddp.broadcast_buffers = n.get("broadcast_buffers", c.ddp.broadcast_buffers);
  c.ddp.gradient_as_bucket_view = n.get("gradient_as_bucket_view", c.ddp.gradient_as_bucket_view);
  c.zero_stage = n.get("zero_stage", c.zero_stage);
  n.check_range("zero_stage", c.zero_stage, 0, 3);
  if (c.zero_stage != 0 && c.mode != "ddp")
    n.fail("zero_stage", "is " + std::to_string(c.zero_stage) + " but ZeRO stages need parallel.mode ddp, got '" +
                             c.mode + "' (use zero_stage 0, or mode ddp)");
  c.fsdp_prefetch = n.get("fsdp_prefetch", c.fsdp_prefetch);
  c.validate();
  return c;
}

void ParallelConfig::validate() const {
  if (mode != "none" && mode != "dp" && mode != "ddp")
    config_fail("parallel.mode", "expected one of none|dp|ddp, got '" + mode + "'");
  if (replicas < 1) config_fail("parallel.replicas", "must be >= 1, got " + std::to_string(replicas));
  if (zero_stage < 0 || zero_stage > 3)
    config_fail("parallel.zero_stage", "expected a value in [0, 3], got " + std::to_string(zero_stage));
  if (zero_stage != 0 && mode != "ddp")
    config_fail("parallel.zero_stage", "is " + std::to_string(zero_stage) +
                                           " but ZeRO stages need parallel.mode ddp, got '" + mode + "'");
  ddp.validate();
}

}  // namespace strata::parallel
