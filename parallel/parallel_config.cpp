// Reading and checking the `parallel:` config section (see parallel_config.h).
#include "parallel/parallel_config.h"

namespace strata::parallel {
namespace {

// The rules parallel.devices must follow beyond parsing: mode dp, one entry per replica,
// all cpu or all cuda, no CUDA device twice. `line` (0 = unknown) goes into the error.
void check_devices(const ParallelConfig& c, int line) {
  const auto& d = c.devices;
  if (d.empty()) return;
  if (c.mode != "dp")
    config_fail("parallel.devices", "places DataParallel replicas and needs parallel.mode dp, got '" + c.mode +
                                        "' (ddp/ZeRO run one rank per device: pick it with the launcher)", line);
  for (size_t k = 0; k < d.size(); ++k) {
    const std::string key = "parallel.devices[" + std::to_string(k) + "]";
    if (d[k].type != d[0].type)
      config_fail(key, "is " + d[k].str() + " but parallel.devices[0] is " + d[0].str() +
                           "; give all cpu, or distinct cuda:N", line);
    if (d[k].type == DeviceType::CUDA)
      for (size_t j = 0; j < k; ++j)
        if (d[j] == d[k])
          config_fail(key, d[k].str() + " is listed twice (also parallel.devices[" + std::to_string(j) +
                               "]); each CUDA device holds one replica", line);
  }
  if (size_t(c.replicas) != d.size())
    config_fail("parallel.devices", "lists " + std::to_string(d.size()) + " device(s) but parallel.replicas is " +
                                        std::to_string(c.replicas) +
                                        " (one replica per device; drop parallel.replicas to derive it)", line);
}

}  // namespace

ParallelConfig ParallelConfig::from_node(const ConfigNode& n) {
  ParallelConfig c;
  c.mode = n.get("mode", c.mode);
  n.one_of("mode", c.mode, {"none", "dp", "ddp"});
  const bool replicas_given = n.has("replicas");
  c.replicas = n.get("replicas", c.replicas);
  n.check_range("replicas", c.replicas, 1, 1024);
  const auto device_names = n.get("devices", std::vector<std::string>{});
  for (size_t k = 0; k < device_names.size(); ++k) {
    const auto d = try_parse_device(device_names[k]);
    if (!d)
      config_fail(n.key_path("devices") + "[" + std::to_string(k) + "]", not_a_device(device_names[k]),
                  n.line_of("devices"));
    c.devices.push_back(*d);
  }
  if (!c.devices.empty() && !replicas_given) c.replicas = int(c.devices.size());
  check_devices(c, n.line_of("devices"));
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
  check_devices(*this, 0);
  if (zero_stage < 0 || zero_stage > 3)
    config_fail("parallel.zero_stage", "expected a value in [0, 3], got " + std::to_string(zero_stage));
  if (zero_stage != 0 && mode != "ddp")
    config_fail("parallel.zero_stage", "is " + std::to_string(zero_stage) +
                                           " but ZeRO stages need parallel.mode ddp, got '" + mode + "'");
  ddp.validate();
}

}  // namespace strata::parallel
