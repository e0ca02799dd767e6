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
  c.validate();
  return c;
}

void ParallelConfig::validate() const {
  if (mode != "none" && mode != "dp" && mode != "ddp")
    config_fail("parallel.mode", "expected one of none|dp|ddp, got '" + mode + "'");
  if (replicas < 1) config_fail("parallel.replicas", "must be >= 1, got " + std::to_string(replicas));
  ddp.validate();
}

}  // namespace strata::parallel
