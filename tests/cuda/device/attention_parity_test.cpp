// The fused causal attention on CUDA (tensor/cuda/attention.cu) against the CPU kernel:
// outputs and the packed gradient of q, k and v in f32 and f64, at head sizes that fill
// a warp's lanes unevenly (hd 8, 40, 64, 128) and sequence lengths past one block of rows;
// bf16 within bf16 rounding; the saved statistics are the rows' log-sum-exp (B, H, T);
// grouped key/value heads; the tensor-core kernels (bf16, f16 at hd 32, 64, 128) within
// 16-bit rounding of the CPU and of the warp-per-row kernels, deterministic.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

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

// STRATA_CUDA_ATTENTION set for one scope (the tensor-core kernels or the warp-per-row ones).
struct AttentionBackend {
  explicit AttentionBackend(const char* v) { ::setenv("STRATA_CUDA_ATTENTION", v, 1); }
  ~AttentionBackend() { ::unsetenv("STRATA_CUDA_ATTENTION"); }
};

struct Outputs {
  Tensor y, lse, dqkv;
};
Outputs run_gpu(const Tensor& qkv, const Tensor& dy, int64_t hd) {
  auto [y, lse] = ops::causal_attention(qkv.to(kGpu), hd);
  Tensor d = ops::causal_attention_backward(dy.to(kGpu), qkv.to(kGpu), lse, hd);
  return {y, lse, d};
}

// bf16 and f16 at the head sizes the tensor-core kernels are built for, T within one
// tile, on its edge and across several (the causal diagonal inside a tile, rows and keys
// past T in the last): y, the log-sum-exp and d(q|k|v) against the CPU's f32 kernel on the
// same rounded inputs, and against the warp-per-row kernels; twice the same bits.
TEST(CudaAttention, TensorCoreKernelsMatchTheCpuWithinSixteenBitRounding) {
  STRATA_REQUIRE_GPU();
  struct Size {
    int64_t B, T, H;
  };
  uint64_t seed = 10;
  for (DType dt : {DType::bf16, DType::f16})
    for (int64_t hd : {32, 64, 128})
      for (const Size z : {Size{2, 1, 2}, Size{1, 17, 3}, Size{2, 64, 2}, Size{1, 100, 2}, Size{1, 200, 1}}) {
        const std::string what = std::string(dtype_name(dt)) + " hd" + std::to_string(hd) + " B" +
                                 std::to_string(z.B) + " T" + std::to_string(z.T) + " H" + std::to_string(z.H);
        const Tensor qkv = ops::to_dtype(rand_cpu({z.B, z.T, 3 * z.H * hd}, DType::f32, ++seed, -1.5, 1.5), dt);
        const Tensor dy = ops::to_dtype(rand_cpu({z.B, z.T, z.H * hd}, DType::f32, ++seed), dt);
        const Tensor q32 = ops::to_dtype(qkv, DType::f32), g32 = ops::to_dtype(dy, DType::f32);
        const auto [yc, lc] = ops::causal_attention(q32, hd);
        const Tensor dc = ops::causal_attention_backward(g32, q32, lc, hd);
        const double frac = dt == DType::bf16 ? 1.5e-2 : 2e-3;  // ~3x the rounding of P, dS and the outputs

        const Outputs mma = run_gpu(qkv, dy, hd);
        EXPECT_EQ(mma.y.dtype(), dt) << what;
        expect_within_scaled(mma.y, yc, 1, frac, what + " y");
        expect_close(mma.lse, lc, Tol{1e-4, 1e-4}, what + " lse");
        expect_within_scaled(mma.dqkv, dc, 3, frac, what + " dqkv");

        const Outputs again = run_gpu(qkv, dy, hd);
        expect_same_bits(again.y, mma.y, what + " y twice");
        expect_same_bits(again.dqkv, mma.dqkv, what + " dqkv twice");

        Outputs warp;
        {
          const AttentionBackend backend("warp");
          warp = run_gpu(qkv, dy, hd);
        }
        expect_within_scaled(mma.y, warp.y, 1, frac, what + " y against the warp kernels");
        expect_close(mma.lse, warp.lse, Tol{1e-4, 1e-4}, what + " lse against the warp kernels");
        expect_within_scaled(mma.dqkv, warp.dqkv, 3, frac, what + " dqkv against the warp kernels");
      }
}

TEST(CudaAttention, RefusesAnUnknownBackendSetting) {
  STRATA_REQUIRE_GPU();
  const Tensor qkv = ops::to_dtype(rand_cpu({1, 4, 3 * 64}, DType::f32, 1), DType::bf16).to(kGpu);
  const AttentionBackend backend("flash");
  try {
    (void)ops::causal_attention(qkv, 64);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("STRATA_CUDA_ATTENTION must be auto, mma or warp"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata
