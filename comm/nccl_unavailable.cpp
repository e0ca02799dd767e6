// The nccl backend's entry points (comm/nccl.h) in a build without CUDA/NCCL: the
// backend is absent and asking for it says so and how to get it. The backend itself is
// comm/nccl_backend.cpp, compiled instead when STRATA_WITH_NCCL is defined.
#if !defined(STRATA_WITH_NCCL)
#include <strata/comm/nccl.h>

#include <strata/core/error.h>

namespace strata::comm {

bool nccl_available() { return false; }

int nccl_device_count() { return 0; }

std::shared_ptr<ProcessGroup> init_nccl_world(const CommOptions&, int, int*, char***) {
  STRATA_THROW(Error,
               "[nccl] strata was built without CUDA/NCCL, so the nccl backend is not available: reconfigure with "
               "-DSTRATA_CUDA=ON on a machine with the CUDA toolkit and NCCL >= 2.18 (nccl.h, libnccl), or use the "
               "mpi backend (init_mpi_world) with CPU tensors");
}

}  // namespace strata::comm
#endif  // !STRATA_WITH_NCCL
