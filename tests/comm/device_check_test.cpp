// The device check every collective runs on the caller's thread (device_mismatch): what a
// user sees when a tensor is on the wrong device for its group, tested with Device values
// so it needs no GPU; and that a refused call queues nothing on a real group.
#include <gtest/gtest.h>

#include <string>

#include <strata/comm/local.h>
#include <strata/comm/nccl.h>
#include <strata/tensor/ops.h>

using namespace strata;
using namespace strata::comm;

namespace {

constexpr Device cuda(int i) { return Device{DeviceType::CUDA, i}; }

std::string mismatch(const char* backend, int rank, Device group, Device tensor) {
  auto why = device_mismatch("all_reduce", "world", backend, rank, group, tensor);
  return why ? *why : std::string("<accepted>");
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(DeviceCheck, SameDeviceIsAccepted) {
  EXPECT_FALSE(device_mismatch("all_reduce", "world", "mpi", 0, kCPU, kCPU));
  EXPECT_FALSE(device_mismatch("all_reduce", "world", "local", 3, kCPU, kCPU));
  EXPECT_FALSE(device_mismatch("all_reduce", "world", "nccl", 1, cuda(1), cuda(1)));
  EXPECT_FALSE(device_mismatch("send", "tp", "nccl", 0, cuda(7), cuda(7)));
}

TEST(DeviceCheck, TensorOnAnotherGpuNamesBothDevices) {
  const std::string m = mismatch("nccl", 1, cuda(1), cuda(0));
  EXPECT_EQ(m.rfind("[all_reduce] group 'world' (nccl, rank 1) runs on cuda:1 but the tensor is on cuda:0", 0), 0u)
      << m;
  EXPECT_TRUE(has(m, ".to(cuda:1)")) << m;  // the fix
  // The other way round, and another op / group name.
  const std::string r = *device_mismatch("reduce_scatter", "dp/split0", "nccl", 0, cuda(0), cuda(3));
  EXPECT_EQ(r.rfind("[reduce_scatter] group 'dp/split0' (nccl, rank 0) runs on cuda:0 but the tensor is on cuda:3", 0),
            0u)
      << r;
}

TEST(DeviceCheck, CpuTensorOnAnNcclGroup) {
  const std::string m = mismatch("nccl", 2, cuda(2), kCPU);
  EXPECT_EQ(m.rfind("[all_reduce] group 'world' (nccl, rank 2) runs on cuda:2 but the tensor is on cpu", 0), 0u) << m;
  EXPECT_TRUE(has(m, ".to(cuda:2)")) << m;
  EXPECT_TRUE(has(m, "mpi group for CPU tensors")) << m;
}

// Like torch's gloo / non-CUDA-aware mpi: refused, not staged through host memory.
TEST(DeviceCheck, CudaTensorOnACpuBackend) {
  for (const char* backend : {"mpi", "local"}) {
    const std::string m = mismatch(backend, 0, kCPU, cuda(0));
    EXPECT_EQ(m.rfind(std::string("[all_reduce] group 'world' (") + backend +
                          ", rank 0) runs on cpu but the tensor is on cuda:0",
                      0),
              0u)
        << m;
    EXPECT_TRUE(has(m, "use the nccl backend for CUDA tensors")) << m;
    EXPECT_TRUE(has(m, ".to(kCPU)")) << m;
  }
}

TEST(DeviceCheck, GroupsReportTheirDevice) {
  auto world = make_local_world(2);
  EXPECT_EQ(world[0]->device(), kCPU);
  EXPECT_EQ(world[1]->device(), kCPU);
}

// A CUDA tensor can only be made with a GPU: then a local group refuses it on the
// caller's thread with nothing queued, and stays usable.
TEST(DeviceCheck, LocalGroupRefusesACudaTensorBeforeQueueing) {
  if (nccl_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: the message itself is tested above";
  run_local(2, [](ProcessGroup& g) {
    Tensor dev = ops::ones({4}, DType::f32, cuda(0));
    std::string msg;
    try {
      g.all_reduce(dev).wait();
    } catch (const CommError& e) {
      ADD_FAILURE() << "refused on the comm thread: " << e.what();
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_TRUE(has(msg, "runs on cpu but the tensor is on cuda:0")) << msg;
    EXPECT_EQ(g.stats()[OpKind::all_reduce].calls, 0);
    Tensor ok = ops::ones({4});
    g.all_reduce(ok).wait();
    EXPECT_EQ(ok.to_vector<float>(), std::vector<float>(4, 2.0f));
  });
}

}  // namespace
