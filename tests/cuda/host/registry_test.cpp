// The kernel registry behind KernelTable (tensor/dispatch.h): backend kernels found by op
// name and checked by signature, every front-end table covered by a CUDA kernel in CUDA
// builds, and clear errors for CUDA tensors in builds without CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <strata/tensor/dispatch.h>
#include <strata/tensor/ops.h>

namespace strata {
namespace {

void double_it(Tensor& t) { ops::mul_(t, 2.0); }
int wrong_signature(int x) { return x; }

TEST(KernelRegistry, FindsARegisteredKernelByOpName) {
  using Fn = void(Tensor&);
  register_kernel("test_registry_op", DeviceType::CUDA, &double_it);
  const KernelTable<Fn> table{"test_registry_op", {nullptr, nullptr}};
  EXPECT_EQ(table.find(Device{DeviceType::CUDA, 0}), &double_it);
  EXPECT_EQ(table.find(kCPU), nullptr);
  const auto names = registered_kernels(DeviceType::CUDA);
  EXPECT_NE(std::find(names.begin(), names.end(), "test_registry_op"), names.end());
  const KernelTable<Fn> missing{"test_registry_missing", {nullptr, nullptr}};
  try {
    (void)missing(kCPU);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[test_registry_missing] no kernel for device cpu"), std::string::npos)
        << e.what();
  }
}

TEST(KernelRegistry, SignatureMismatchIsAnError) {
  register_kernel("test_registry_typed", DeviceType::CUDA, &wrong_signature);
  const KernelTable<void(Tensor&)> table{"test_registry_typed", {nullptr, nullptr}};
  try {
    (void)table.find(Device{DeviceType::CUDA, 0});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[test_registry_typed]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("signature"), std::string::npos) << e.what();
  }
}

#ifdef STRATA_WITH_CUDA
// Op names of every KernelTable in the front ends (tensor/*.cpp).
std::set<std::string> front_end_ops() {
  std::set<std::string> ops;
  const std::regex table(R"re(KernelTable<\w+>\s+k\w+\{\s*"(\w+)")re");
  for (const auto& f : std::filesystem::directory_iterator(std::string(STRATA_SOURCE_DIR) + "/tensor")) {
    if (f.path().extension() != ".cpp") continue;
    std::ifstream in(f.path());
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    for (auto it = std::sregex_iterator(text.begin(), text.end(), table); it != std::sregex_iterator(); ++it)
      ops.insert((*it)[1]);
  }
  return ops;
}

TEST(KernelRegistry, EveryFrontEndOpHasACudaKernel) {
  const auto ops = front_end_ops();
  ASSERT_GT(ops.size(), 40u) << "the front-end scan found too few KernelTables";
  const auto reg = registered_kernels(DeviceType::CUDA);
  const std::set<std::string> have(reg.begin(), reg.end());
  // the random initialisers create CPU tensors only (ops::uniform / ops::normal take no device)
  std::set<std::string> cpu_only = {"uniform", "normal"};
  // The GEMM that adds a bias in the library's kernel (ops::addmm): devices without one
  // write the bias rows and accumulate their GEMM onto them.
  cpu_only.insert("addmm");
  // The rotary embedding inside the CPU attention kernel (ops::causal_attention_rotary):
  // other devices run rotary then causal_attention (autograd's causal_attention_rotary).
  cpu_only.insert({"causal_attention_rotary", "causal_attention_rotary_backward"});
  // BatchNorm with the ReLU in its pass (ops::batch_norm(..., relu)): other devices run
  // batch_norm then relu (and relu_backward then batch_norm_backward).
  cpu_only.insert({"batch_norm_relu", "batch_norm_relu_backward"});
  // ... and with a 2x2 max pool too: autograd runs batch_norm (relu) then max_pool2d there.
  cpu_only.insert({"batch_norm_relu_max_pool2", "batch_norm_relu_max_pool2_backward"});
#ifndef STRATA_WITH_CUDNN
  cpu_only.insert({"conv2d", "conv2d_backward"});
#endif
  for (const auto& op : ops)
    if (!cpu_only.count(op)) {
      EXPECT_TRUE(have.count(op)) << "no CUDA kernel registered for '" << op << "'";
    }
}
#else
TEST(KernelRegistry, CudaTensorsNeedACudaBuild) {
  try {
    (void)ops::zeros({2}, DType::f32, Device{DeviceType::CUDA, 0});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA support"), std::string::npos) << e.what();
  }
  try {
    (void)ops::ones({2}).to(Device{DeviceType::CUDA, 0});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("STRATA_CUDA=ON"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace strata
