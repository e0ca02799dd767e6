// The nccl backend's entry points on any machine: in a build without CUDA/NCCL, or on a
// machine without a GPU, asking for it fails at once with an error that says why
// (nothing hangs, MPI is not started). The backend itself is tested under mpirun with
// GPUs by tests/comm/mpi/nccl_collectives_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <strata/comm/nccl.h>

using namespace strata;
using namespace strata::comm;

namespace {

// The GPUs the NVIDIA driver lists, read without CUDA (0 without the driver). A container
// or CUDA_VISIBLE_DEVICES may show CUDA fewer of them, never more.
int driver_gpus() {
  std::error_code ec;
  int n = 0;
  for (std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", ec), end; !ec && it != end; it.increment(ec))
    ++n;
  return n;
}

TEST(NcclBackend, AvailabilityMatchesTheBuild) {
#ifdef STRATA_WITH_NCCL
  EXPECT_TRUE(nccl_available());
#else
  EXPECT_FALSE(nccl_available());
  EXPECT_EQ(nccl_device_count(), 0);
#endif
  const int gpus = driver_gpus();
  EXPECT_GE(nccl_device_count(), 0);
  EXPECT_LE(nccl_device_count(), gpus) << "more devices than the driver lists in /proc/driver/nvidia/gpus";
}

TEST(NcclBackend, ClearErrorWithoutCudaOrGpu) {
  if (nccl_available() && nccl_device_count() > 0)
    GTEST_SKIP() << "a GPU is visible: the nccl backend itself is tested under mpirun (comm_nccl_np*)";
  for (int device : {-1, 0, 3}) {
    std::string msg;
    try {
      init_nccl_world(CommOptions{.timeout_s = 5}, device);
      ADD_FAILURE() << "init_nccl_world succeeded without a GPU";
    } catch (const CommError& e) {
      ADD_FAILURE() << "a missing GPU is not a communication failure: " << e.what();
    } catch (const Error& e) {
      msg = e.what();
    }
    if (!nccl_available()) {
      EXPECT_NE(msg.find("[nccl] strata was built without CUDA/NCCL"), std::string::npos) << msg;
      EXPECT_NE(msg.find("STRATA_CUDA=ON"), std::string::npos) << msg;  // says how to get it
    } else {
      EXPECT_NE(msg.find("[nccl] no CUDA device is visible ("), std::string::npos) << msg;
      EXPECT_NE(msg.find("use the mpi backend"), std::string::npos) << msg;
    }
  }
}

}  // namespace
