// The tensor-core attention's blocks (tensor/cuda/attention_mma_kernels.h, the code the
// CUDA kernels run) executed on the host by the SIMT emulator (simt_emulator.h): y, the
// log-sum-exp and d(q|k|v) within 16-bit rounding of the CPU's f32 kernel on the same
// rounded inputs, for bf16 and f16 at every head size the kernels are built for, T within
// one tile, on its edge and across tiles (the diagonal inside a tile, rows and keys past T
// in the last); rows past T and other heads' columns are left alone.
#include "simt_emulator.h"

#include <gtest/gtest.h>

#include <string>

#include "../cuda_test_util.h"

namespace strata {
namespace {

using namespace cuda::mma;
using test::EmulatedThread;
using test::run_grid;

uint16_t* bits(const Tensor& t) { return static_cast<uint16_t*>(t.raw_data()); }
float* f32(const Tensor& t) { return static_cast<float*>(t.raw_data()); }

template <DType DT, int D>
void run_case(int64_t B, int64_t T, int64_t H, uint64_t seed) {
  const std::string what = std::string(dtype_name(DT)) + " hd" + std::to_string(D) + " B" + std::to_string(B) +
                           " T" + std::to_string(T) + " H" + std::to_string(H);
  const Tensor qkv = ops::to_dtype(test::rand_cpu({B, T, 3 * H * D}, DType::f32, seed, -1.5, 1.5), DT);
  const Tensor dy = ops::to_dtype(test::rand_cpu({B, T, H * D}, DType::f32, seed + 1), DT);
  const Tensor q32 = ops::to_dtype(qkv, DType::f32), g32 = ops::to_dtype(dy, DType::f32);
  const auto [yc, lc] = ops::causal_attention(q32, D);
  const Tensor dc = ops::causal_attention_backward(g32, q32, lc, D);

  // outputs start as NaN: whatever the blocks leave unwritten shows
  const Tensor y = ops::full({B, T, H * D}, NAN, DT);
  const Tensor lse = ops::full({B, H, T}, NAN, DType::f32);
  const Tensor delta = ops::full({B, H, T}, NAN, DType::f32);
  const Tensor dqkv = ops::full(qkv.shape(), NAN, DT);
  MmaArgs s;
  s.B = B;
  s.T = T;
  s.H = H;
  s.scale = float(1.0 / std::sqrt(double(D)));
  s.scale_log2 = s.scale * kLog2e;
  s.qkv = bits(qkv);
  s.dy = bits(dy);
  s.lse = f32(lse);
  s.delta = f32(delta);

  s.out = bits(y);
  run_grid(B * H, tiles(T), forward_smem_bytes(D), [&](int64_t bh, int64_t tile, uint16_t* smem) {
    forward_block<EmulatedThread, DT, D>(s, bh, tile, smem);
  });
  s.out = bits(dqkv);
  run_grid(B * H, tiles(T), dq_smem_bytes(D), [&](int64_t bh, int64_t tile, uint16_t* smem) {
    dq_block<EmulatedThread, DT, D>(s, bh, tile, smem);
  });
  run_grid(B * H, tiles(T), dkv_smem_bytes(D), [&](int64_t bh, int64_t tile, uint16_t* smem) {
    dkv_block<EmulatedThread, DT, D>(s, bh, tile, smem);
  });

  const double frac = DT == DType::bf16 ? 1.5e-2 : 2e-3;  // ~3x the rounding of P, dS and the outputs
  test::expect_within_scaled(y, yc, 1, frac, what + " y");
  test::expect_close(lse, lc, test::Tol{1e-4, 1e-4}, what + " lse");
  test::expect_within_scaled(dqkv, dc, 3, frac, what + " dqkv");
  // D_i = sum_j p_ij dP_ij = dy_i . y_i
  const Tensor dd = ops::sum(ops::binary(ops::BinaryOp::mul, ops::reshape(g32, {B, T, H, D}), ops::reshape(yc, {B, T, H, D})), {-1});
  test::expect_close(delta, ops::contiguous(ops::transpose(dd, 1, 2)), test::Tol{1e-2, 1e-2}, what + " D");
}

TEST(CudaAttentionMmaEmulated, Bf16BlocksMatchTheCpuKernel) {
  run_case<DType::bf16, 32>(1, 17, 2, 1);
  run_case<DType::bf16, 64>(2, 64, 1, 3);
  run_case<DType::bf16, 64>(1, 100, 2, 5);
  run_case<DType::bf16, 128>(1, 70, 1, 7);
}

TEST(CudaAttentionMmaEmulated, F16BlocksMatchTheCpuKernel) {
  run_case<DType::f16, 32>(1, 130, 1, 9);
  run_case<DType::f16, 64>(1, 1, 2, 11);
  run_case<DType::f16, 128>(1, 65, 1, 13);
}

}  // namespace
}  // namespace strata
