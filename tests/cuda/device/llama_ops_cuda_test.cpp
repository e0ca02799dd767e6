// The Llama kernels (RMSNorm, rotary embedding, SwiGLU) have no CUDA version yet: on a CUDA
// tensor each fails with an error naming the op and the device, never a wrong result or a
// crash. Skips without a GPU.
#include <gtest/gtest.h>

#include <strata/autograd/functions.h>
#include "../cuda_test_util.h"

namespace strata {
namespace {

using test::kGpu;

// fn() throws an Error whose message names `op` and the CUDA device.
template <class Fn>
void expect_names_op(Fn&& fn, const std::string& op) {
  try {
    (void)fn();
    ADD_FAILURE() << op << " ran on a CUDA tensor without a CUDA kernel";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[" + op + "]"), std::string::npos) << what;
    EXPECT_NE(what.find("cuda"), std::string::npos) << what;
  }
}

TEST(CudaLlamaOps, EachOpWithoutACudaKernelNamesItself) {
  STRATA_REQUIRE_GPU();
  const Tensor x = ops::ones({2, 3, 2, 4}, DType::f32, kGpu);
  const Tensor w = ops::ones({4}, DType::f32, kGpu);
  expect_names_op([&] { return ops::rms_norm(x, w, 1e-5).first; }, "rms_norm");
  expect_names_op([&] { return rms_norm(x, w, 1e-5); }, "rms_norm");
  expect_names_op([&] { return ops::rotary(x, ops::zeros({3}, DType::i64), ops::ones({2}, DType::f64)); }, "rotary");
  expect_names_op([&] { return ops::swiglu(x, x); }, "swiglu");
}

}  // namespace
}  // namespace strata
