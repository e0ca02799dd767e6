// The CUDA runtime layer on a GPU: the caching allocator (reuse, per-device category
// accounting, empty_cache, record_stream, out-of-memory errors), streams, stream guards,
// events and device guards. Skips without a GPU.
#include <gtest/gtest.h>

#include "../cuda_test_util.h"

namespace strata {
namespace {

using namespace test;  // kGpu, Tol, tol_for, expect_close, rand_cpu, gpu

TEST(CudaAllocator, FreedBlocksAreReusedWithoutCudaMalloc) {
  STRATA_REQUIRE_GPU();
  cuda::empty_cache();
  const void* first = nullptr;
  {
    Tensor t = ops::empty({1 << 18}, DType::f32, kGpu);  // 1 MiB
    first = t.raw_data();
  }
  const auto before = cuda::allocator_stats(0);
  EXPECT_GE(before.cached_bytes, 1 << 20);
  Tensor again = ops::empty({(1 << 18) - 100}, DType::f32, kGpu);  // same size class
  const auto after = cuda::allocator_stats(0);
  EXPECT_EQ(again.raw_data(), first);
  EXPECT_EQ(after.device_mallocs, before.device_mallocs);
  EXPECT_EQ(after.cache_hits, before.cache_hits + 1);
  EXPECT_GE(after.reserved_bytes, after.allocated_bytes);
}

TEST(CudaAllocator, ChargesTheCategoryOfTheAllocatingScope) {
  STRATA_REQUIRE_GPU();
  MemoryTracker& mem = cuda::cuda_memory(0);
  const int64_t params0 = mem.stats(MemCategory::params).current;
  const int64_t grads0 = mem.stats(MemCategory::grads).current;
  const int64_t cpu_params0 = cpu_memory().stats(MemCategory::params).current;
  {
    MemoryScope scope(MemCategory::params);
    Tensor w = ops::zeros({1000}, DType::f32, kGpu);
    EXPECT_EQ(mem.stats(MemCategory::params).current - params0, 4000);
    EXPECT_EQ(cpu_memory().stats(MemCategory::params).current, cpu_params0);  // the CPU tracker is untouched
    w.storage()->recharge(MemCategory::grads);
    EXPECT_EQ(mem.stats(MemCategory::params).current, params0);
    EXPECT_EQ(mem.stats(MemCategory::grads).current - grads0, 4000);
  }
  EXPECT_EQ(mem.stats(MemCategory::grads).current, grads0);
}

TEST(CudaAllocator, EmptyCacheReturnsFreeBlocks) {
  STRATA_REQUIRE_GPU();
  { Tensor t = ops::empty({1 << 20}, DType::f32, kGpu); }
  ASSERT_GT(cuda::allocator_stats(0).cached_bytes, 0);
  const auto before = cuda::allocator_stats(0);
  cuda::empty_cache();
  const auto after = cuda::allocator_stats(0);
  EXPECT_EQ(after.cached_bytes, 0);
  EXPECT_GT(after.device_frees, before.device_frees);
  EXPECT_EQ(after.reserved_bytes, after.allocated_bytes);
}

TEST(CudaAllocator, RecordStreamDelaysReuseUntilThatStreamIsDone) {
  STRATA_REQUIRE_GPU();
  const cudaStream_t comm = cuda::comm_stream(0);
  const void* p = nullptr;
  {
    Tensor t = ops::empty({1 << 16}, DType::f32, kGpu);
    p = t.raw_data();
    {
      cuda::StreamGuard on_comm(0, comm);  // work that reads t on the comm stream
      Tensor s = ops::sum(t);
      (void)s;
    }
    cuda::record_stream(t, comm);
  }
  STRATA_CUDA_CHECK(cudaStreamSynchronize(comm), "test");
  Tensor again = ops::empty({1 << 16}, DType::f32, kGpu);
  EXPECT_EQ(again.raw_data(), p) << "the block should be back in the cache once the comm stream finished";
}

TEST(CudaAllocator, OutOfMemoryNamesSizesAndLeavesTheAllocatorUsable) {
  STRATA_REQUIRE_GPU();
  try {
    (void)ops::empty({int64_t(1) << 48}, DType::f32, kGpu);  // 1 PiB
    FAIL() << "expected an out-of-memory error";
  } catch (const cuda::CudaError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[alloc] CUDA out of memory on cuda:0"), std::string::npos) << m;
    EXPECT_NE(m.find("free of"), std::string::npos) << m;
  }
  expect_close(ops::ones({4}, DType::f32, kGpu), ops::ones({4}), "allocation after an OOM");
}

TEST(CudaRuntime, StreamGuardRoutesOpsAndRestores) {
  STRATA_REQUIRE_GPU();
  EXPECT_EQ(cuda::current_stream(0), cuda::compute_stream(0));
  EXPECT_NE(cuda::comm_stream(0), cuda::compute_stream(0));
  cuda::Stream side(0);
  {
    cuda::StreamGuard g(0, side.get());
    EXPECT_EQ(cuda::current_stream(0), side.get());
    const Tensor a = rand_cpu({64, 64}, DType::f32, 1);
    const Tensor r = ops::matmul(a.to(kGpu), a.to(kGpu));  // runs on `side`; to(kCPU) waits for it
    expect_close(r, ops::matmul(a, a), "matmul on a guarded stream");
  }
  EXPECT_EQ(cuda::current_stream(0), cuda::compute_stream(0));
  side.synchronize();
}

TEST(CudaRuntime, EventsOrderStreamsAndTime) {
  STRATA_REQUIRE_GPU();
  cuda::Event start(/*timing=*/true), stop(/*timing=*/true), ready;
  EXPECT_TRUE(ready.query());  // never recorded: complete
  start.record(0);
  Tensor x = ops::ones({1 << 20}, DType::f32, kGpu);
  Tensor y = ops::binary_scalar(ops::BinaryOp::mul, x, 3.0);
  ready.record(0);
  stop.record(0);
  // the comm stream waits for y, then reads it
  ready.wait(cuda::comm_stream(0));
  Tensor s;
  {
    cuda::StreamGuard g(0, cuda::comm_stream(0));
    s = ops::sum(y);
    cuda::record_stream(y, cuda::comm_stream(0));
  }
  cuda::Event summed;  // the compute stream (which item() copies on) waits for the comm stream
  summed.record(0, cuda::comm_stream(0));
  summed.wait(cuda::compute_stream(0));
  EXPECT_DOUBLE_EQ(s.item<double>(), 3.0 * (1 << 20));
  stop.synchronize();
  EXPECT_TRUE(stop.query());
  EXPECT_GE(start.elapsed_ms(stop), 0.0f);
}

TEST(CudaRuntime, DeviceGuardRestoresTheCurrentDevice) {
  STRATA_REQUIRE_GPU();
  int before = -1, after = -1;
  STRATA_CUDA_CHECK(cudaGetDevice(&before), "test");
  { cuda::DeviceGuard g(cuda::device_count() - 1); }
  STRATA_CUDA_CHECK(cudaGetDevice(&after), "test");
  EXPECT_EQ(after, before);
  const auto props = cuda::device_properties(0);
  EXPECT_GT(props.total_memory, 0u);
  EXPECT_GE(props.sm_major, 7);
  EXPECT_EQ(cuda::describe_devices().size(), size_t(cuda::device_count()));
}

TEST(CudaRuntime, PeerCopiesBetweenDevices) {
  STRATA_REQUIRE_GPU();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices, " << cuda::device_count() << " visible";
  const Tensor c = rand_cpu({100, 37}, DType::f32, 3);
  const Tensor g1 = c.to(kGpu).to(Device{DeviceType::CUDA, 1});
  EXPECT_EQ(g1.device().index, 1);
  expect_close(g1, c, test::Tol{0, 0}, "cuda:0 -> cuda:1");
  expect_close(ops::binary(ops::BinaryOp::add, g1, g1), ops::binary(ops::BinaryOp::add, c, c), "op on cuda:1");
}

}  // namespace
}  // namespace strata
