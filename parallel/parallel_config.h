// The `parallel:` section of a training config as a plain struct, read and checked here
// so the driver (apps/) only forwards it: the layout's degrees (dp, tp, pp, zero_stage),
// the DDP and FSDP options, and DataParallel's thread replicas, a separate single-process
// option.
#pragma once
#include <string>
#include <vector>

#include <strata/core/config.h>
#include <strata/parallel/data/data_parallel.h>
#include <strata/parallel/data/ddp.h>
#include <strata/parallel/parallel_dims.h>
#include <strata/parallel/pipeline/executor.h>

namespace strata::parallel {

struct ParallelConfig {
  ParallelDims dims;          ///< parallel.{dp (int | auto), cp, tp, pp, zero_stage}
  std::string cp_split = "zigzag";  ///< parallel.cp_split: zigzag | plain (how cp cuts each sequence)
  int replicas = 0;           ///< parallel.replicas: K >= 1 thread replicas in one process (DataParallel);
                              ///<   0 = off. from_node sets it to devices.size() when only devices is given
  std::vector<Device> devices;  ///< parallel.devices: [cuda:0, cuda:1] puts replica k on devices[k]
                                ///<   (all cpu, or distinct cuda:N; size == replicas); empty: the model's device
  DDPOptions ddp;             ///< parallel.{bucket_cap_mb, first_bucket_mb, last_bucket_mb, find_unused_parameters,
                              ///<   broadcast_buffers, gradient_as_bucket_view}
  bool fsdp_prefetch = true;  ///< parallel.fsdp_prefetch: stage 3 gathers the next layer's
                              ///<   parameters while the current one computes
  bool sequence_parallel = false;  ///< parallel.sequence_parallel: at tp > 1, LayerNorm and dropout
                                   ///<   on sequence shards (Megatron-SP); ignored at tp 1
  PipelineOptions pipeline;   ///< parallel.{pp_schedule: gpipe|1f1b|interleaved (1f1b),
                              ///<   microbatches (default: pp), pp_virtual (1), pp_exchanges: auto|inline|thread}
  std::vector<int64_t> pp_layers;  ///< parallel.pp_layers: blocks per stage; empty: balanced
  bool auto_layout = false;  ///< `parallel: auto`: the driver chooses dims and schedule once the world size is known

  /// True when the run uses DataParallel thread replicas (parallel.replicas or .devices).
  bool thread_replicas() const { return replicas > 0; }

  /// Reads the keys of `n` (the `parallel` node; absent keys keep their defaults) and
  /// validates. ConfigError names the key path and line; the removed key parallel.mode
  /// gets the new spelling.
  static ParallelConfig from_node(const ConfigNode& n);
  /// ConfigError naming the parallel.* key of the first bad value.
  void validate() const;
  DataParallelOptions dp_options() const { return {.replicas = replicas, .devices = devices}; }
  /// Intra-op threads per compute stream of a process whose budget is `threads` (run.threads;
  /// 0 = every core): thread replicas share it (at least one each), otherwise all of it (0).
  int intra_op_threads(int threads) const;
};

}  // namespace strata::parallel
