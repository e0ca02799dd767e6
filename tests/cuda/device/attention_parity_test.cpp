// The fused causal attention on CUDA (tensor/cuda/attention.cu) against the CPU kernel:
// outputs and the packed gradient of q, k and v in f32 and f64, at head sizes that fill
// a warp's lanes unevenly (hd 8, 40, 64, 128) and sequence lengths past one block of rows;
// bf16 within bf16 rounding; the saved statistics are the rows' log-sum-exp (B, H, T);
// grouped key/value heads.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "../cuda_test_util.h"

namespace strata {
namespace {

using namespace test;  // kGpu, Tol, tol_for, expect_close, rand_cpu, gpu

struct Case {
  int64_t B, T, H, hd;
};

TEST(CudaAttention, FusedKernelMatchesTheCpuForwardAndBackward) {
  STRATA_REQUIRE_GPU();
  for (const Case c : {Case{2, 7, 3, 8}, Case{1, 70, 2, 40}, Case{2, 33, 2, 64}, Case{1, 129, 1, 128}})
    for (DType dt : {DType::f32, DType::f64}) {
      const std::string what = std::string(dtype_name(dt)) + " B" + std::to_string(c.B) + " T" + std::to_string(c.T) +
                               " H" + std::to_string(c.H) + " hd" + std::to_string(c.hd);
      const Tensor qkv = rand_cpu({c.B, c.T, 3 * c.H * c.hd}, dt, 1, -1.5, 1.5);
      const Tensor dy = rand_cpu({c.B, c.T, c.H * c.hd}, dt, 2);
      const auto [yc, pc] = ops::causal_attention(qkv, c.hd);
      const auto [yg, lse] = ops::causal_attention(qkv.to(kGpu), c.hd);
      EXPECT_EQ(lse.shape(), (Shape{c.B, c.H, c.T})) << what;
      expect_close(yg, yc, what + " y");
      const Tensor dgc = ops::causal_attention_backward(dy, qkv, pc, c.hd);
      const Tensor dgg = ops::causal_attention_backward(dy.to(kGpu), qkv.to(kGpu), lse, c.hd);
      expect_close(dgg, dgc, dt == DType::f32 ? Tol{2e-5, 2e-4} : test::tol_for(dt), what + " dqkv");
    }
}

// Grouped key/value heads: CUDA repeats them to H heads inside the op and sums the
// gradients back; the CPU kernel reads them in place. Same y and d(q|k|v).
TEST(CudaAttention, GroupedKeyValueHeadsMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  const int64_t B = 2, T = 37, H = 4, Hkv = 2, hd = 40;
  const Tensor qkv = rand_cpu({B, T, (H + 2 * Hkv) * hd}, DType::f32, 4, -1.5, 1.5);
  const Tensor dy = rand_cpu({B, T, H * hd}, DType::f32, 5);
  const auto [yc, pc] = ops::causal_attention(qkv, hd, Hkv);
  const auto [yg, lse] = ops::causal_attention(qkv.to(kGpu), hd, Hkv);
  EXPECT_EQ(lse.shape(), (Shape{B, H, T}));
  expect_close(yg, yc, "grouped y");
  const Tensor dgg = ops::causal_attention_backward(dy.to(kGpu), qkv.to(kGpu), lse, hd, Hkv);
  EXPECT_EQ(dgg.shape(), qkv.shape());
  expect_close(dgg, ops::causal_attention_backward(dy, qkv, pc, hd, Hkv), Tol{2e-5, 2e-4}, "grouped dqkv");
}

TEST(CudaAttention, Bf16WithinBf16RoundingOfTheF32Result) {
  STRATA_REQUIRE_GPU();
  const Tensor qkv = rand_cpu({2, 50, 3 * 2 * 64}, DType::f32, 3, -1.5, 1.5);
  const Tensor q16 = ops::to_dtype(qkv, DType::bf16);
  const auto [yc, pc] = ops::causal_attention(ops::to_dtype(q16, DType::f32), 64);  // f32 on the rounded inputs
  const auto [yg, lse] = ops::causal_attention(q16.to(kGpu), 64);
  EXPECT_EQ(yg.dtype(), DType::bf16);
  EXPECT_EQ(lse.dtype(), DType::f32);
  expect_close(ops::to_dtype(yg, DType::f32), yc, Tol{1e-2, 1e-2}, "bf16 y");
}

}  // namespace
}  // namespace strata
