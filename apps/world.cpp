// The device and the world group of one `strata train` run.
#include "apps/world.h"

#include <strata/comm/local.h>
#include <strata/comm/mpi.h>
#include <strata/comm/nccl.h>
#ifdef STRATA_WITH_CUDA
#include <strata/tensor/cuda/runtime.h>
#endif

namespace strata::apps {

Device resolve_device(const RunSection& run) {
  Device d = parse_device(run.device);
  if (d.is_cpu()) return d;
  if (run.device == "cuda" && comm::launched_by_mpi()) d.index = comm::local_rank();
#ifdef STRATA_WITH_CUDA
  const int count = cuda::device_count();
  if (count == 0)
    config_fail("run.device", "'" + run.device + "': no CUDA device is visible (" + cuda::unavailable_reason() + ")");
  if (d.index >= count)
    config_fail("run.device", "'" + run.device + "' resolves to cuda:" + std::to_string(d.index) + " but only " +
                                  std::to_string(count) + " CUDA device(s) are visible" +
                                  (run.device == "cuda" ? " (one GPU per rank: start at most that many ranks per node)"
                                                        : ""));
#endif
  return d;
}

std::shared_ptr<comm::ProcessGroup> init_world(const TrainConfig& cfg, Device device) {
  if (!comm::launched_by_mpi()) return comm::make_local_world(1, cfg.comm)[0];
  const bool nccl = cfg.comm_backend == "nccl" || (cfg.comm_backend == "auto" && !device.is_cpu());
  return nccl ? comm::init_nccl_world(cfg.comm, device.index) : comm::init_mpi_world(cfg.comm);
}

}  // namespace strata::apps
