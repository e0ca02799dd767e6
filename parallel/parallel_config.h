// The `parallel:` section of a training config as a plain struct, read and checked here
// so the driver (apps/) only forwards it: mode none | dp | ddp, DataParallel's replica
// count and devices, the DDP options and the ZeRO stage / FSDP prefetch setting.
#pragma once
#include <string>
#include <vector>

#include "core/config.h"
#include "parallel/data_parallel.h"
#include "parallel/ddp.h"

namespace strata::parallel {

struct ParallelConfig {
  std::string mode = "none";  ///< parallel.mode: none | dp | ddp
  int replicas = 2;           ///< parallel.replicas (dp): K >= 1 thread replicas; from_node sets it to
                              ///<   devices.size() when only parallel.devices is given
  std::vector<Device> devices;  ///< parallel.devices (dp): [cuda:0, cuda:1] puts replica k on devices[k]
                                ///<   (all cpu, or distinct cuda:N; size == replicas); empty: the model's device
  DDPOptions ddp;             ///< parallel.{bucket_cap_mb, first_bucket_mb, last_bucket_mb, find_unused_parameters,
                              ///<   broadcast_buffers, gradient_as_bucket_view} (ddp)
  int zero_stage = 0;         ///< parallel.zero_stage: 0 (plain DDP) .. 3; non-zero needs mode ddp
  bool fsdp_prefetch = true;  ///< parallel.fsdp_prefetch: stage 3 gathers the next layer's
                              ///<   parameters while the current one computes

  /// Reads the keys of `n` (the `parallel` node; absent keys keep their defaults) and
  /// validates. ConfigError names the key path and line.
  static ParallelConfig from_node(const ConfigNode& n);
  /// ConfigError naming the parallel.* key of the first bad value.
  void validate() const;
  DataParallelOptions dp_options() const { return {.replicas = replicas, .devices = devices}; }
};

}  // namespace strata::parallel
