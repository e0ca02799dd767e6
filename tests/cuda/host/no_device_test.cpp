// What the CUDA backend does on a machine without a usable GPU (the CI machines): every
// entry point fails with an error that names the op and why, and the error formatting
// of checked CUDA calls. Tests that need "no GPU" skip when one is visible.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#ifdef STRATA_WITH_CUDA
#include <strata/tensor/cuda/runtime.h>
#include <strata/tensor/ops.h>

namespace strata {
namespace {

constexpr Device kGpu{DeviceType::CUDA, 0};

#define STRATA_REQUIRE_NO_GPU() \
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is visible; these tests cover the no-GPU case"

void expect_throws_with(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(CudaNoDevice, ReasonIsReported) {
  STRATA_REQUIRE_NO_GPU();
  EXPECT_FALSE(cuda::is_available());
  EXPECT_FALSE(cuda::unavailable_reason().empty());
  const auto lines = cuda::describe_devices();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("no CUDA device visible (", 0), 0u) << lines[0];
}

TEST(CudaNoDevice, AllocationAndCopiesFailNamingTheReason) {
  STRATA_REQUIRE_NO_GPU();
  const std::string reason = cuda::unavailable_reason();
  expect_throws_with([] { (void)ops::zeros({3}, DType::f32, kGpu); }, {"[alloc]", "cuda:0", "no CUDA device visible", reason});
  expect_throws_with([] { (void)ops::ones({3}).to(kGpu); }, {"no CUDA device visible"});
  expect_throws_with([] { (void)cuda::compute_stream(0); }, {"[compute_stream]", "no CUDA device visible"});
  expect_throws_with([] { cuda::DeviceGuard g(0); }, {"[DeviceGuard]", "no CUDA device visible"});
  // the memory counters of a CUDA device exist and stay at zero
  EXPECT_EQ(cuda::cuda_memory(0).total_current(), 0);
  EXPECT_EQ(cuda::allocator_stats(0).requests, 0);
  cuda::empty_cache();  // nothing to release, and no device call
}

TEST(CudaNoDevice, ErrorsNameTheDeviceRange) {
  if (cuda::device_count() == 0) {
    expect_throws_with([] { (void)ops::zeros({1}, DType::f32, Device{DeviceType::CUDA, 3}); }, {"cuda:3"});
  } else {
    const int n = cuda::device_count();
    expect_throws_with([n] { (void)ops::zeros({1}, DType::f32, Device{DeviceType::CUDA, n}); },
                       {"cuda:" + std::to_string(n), "does not exist"});
  }
}

TEST(CudaCheck, MessageNamesOpCallErrorAndLocation) {
  expect_throws_with([] { STRATA_CUDA_CHECK(cudaErrorInvalidValue, "my_op"); },
                     {"[my_op]", "cudaErrorInvalidValue failed", "cudaErrorInvalidValue (invalid argument)",
                      "no_device_test.cpp:"});
  try {
    STRATA_CUDA_CHECK(cudaErrorNoKernelImageForDevice, "softmax");
  } catch (const cuda::CudaError& e) {  // the typed error, with the rebuild hint
    EXPECT_NE(std::string(e.what()).find(std::string("compiled for sm ") + cuda::compiled_architectures()),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(STRATA_CUDA_CHECK(cudaSuccess, "noop"));
}

TEST(CudaRuntime, VersionsAndArchitectures) {
  EXPECT_GT(cuda::runtime_version(), 0);
  EXPECT_EQ(cuda::version_string(13000), "13.0");
  EXPECT_EQ(cuda::version_string(12040), "12.4");
  EXPECT_EQ(cuda::version_string(0), "none");
  EXPECT_STRNE(cuda::compiled_architectures(), "unknown");
  EXPECT_STRNE(cuda::compiled_architectures(), "");
}

TEST(CudaRuntime, Tf32SettingRoundTrips) {
  EXPECT_FALSE(cuda::allow_tf32());  // off by default: f32 matches the CPU
  cuda::set_allow_tf32(true);
  EXPECT_TRUE(cuda::allow_tf32());
  cuda::set_allow_tf32(false);
  EXPECT_FALSE(cuda::allow_tf32());
}

}  // namespace
}  // namespace strata
#endif  // STRATA_WITH_CUDA
