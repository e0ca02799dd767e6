// CUDA matmul / gemm_ (cuBLAS) vs the CPU (OpenBLAS): plain, transposed views, 1-d
// operands, k = 0, batched with uniform strides (strided-batched call), attention's
// head views (one strided-batched call per sequence) and broadcast batch dims, f32 / f64, TF32, and f16 / bf16 against an
// f32 reference of the rounded inputs. Skips without a GPU.
#include <gtest/gtest.h>

#include <strata/tensor/cpu/op_profile.h>

#include "../cuda_test_util.h"

namespace strata {
namespace {

using namespace test;  // kGpu, Tol, tol_for, expect_close, rand_cpu, gpu


TEST(CudaGemm, MatmulShapesAndLayouts) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor a = rand_cpu({17, 33}, dt, 1), b = rand_cpu({33, 9}, dt, 2);
    expect_close(ops::matmul(gpu(a), gpu(b)), ops::matmul(a, b), "2-d");
    const Tensor at = rand_cpu({33, 17}, dt, 3), bt = rand_cpu({9, 33}, dt, 4);
    expect_close(ops::matmul(ops::transpose(gpu(at), 0, 1), ops::transpose(gpu(bt), 0, 1)),
                 ops::matmul(ops::transpose(at, 0, 1), ops::transpose(bt, 0, 1)), "transposed views");
    const Tensor v = rand_cpu({33}, dt, 5);
    expect_close(ops::matmul(gpu(a), gpu(v)), ops::matmul(a, v), "matrix @ vector");
    expect_close(ops::matmul(gpu(v), gpu(b)), ops::matmul(v, b), "vector @ matrix");
    // a column slice: leading dimension larger than the row length
    const Tensor wide = rand_cpu({17, 50}, dt, 6);
    expect_close(ops::matmul(ops::narrow(gpu(wide), 1, 4, 33), gpu(b)), ops::matmul(ops::narrow(wide, 1, 4, 33), b),
                 "lda > k");
    // k = 0 gives zeros; an empty m gives an empty result
    expect_close(ops::matmul(gpu(ops::zeros({3, 0}, dt)), gpu(ops::zeros({0, 4}, dt))), ops::zeros({3, 4}, dt), "k=0");
    EXPECT_EQ(ops::matmul(gpu(ops::zeros({0, 33}, dt)), gpu(b)).numel(), 0);
  }
}

TEST(CudaGemm, GemmAlphaBetaIntoAnExistingOutput) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor a = rand_cpu({8, 12}, dt, 10), b = rand_cpu({12, 6}, dt, 11);
    Tensor c = rand_cpu({8, 6}, dt, 12), gc = gpu(c);
    ops::gemm_(c, a, b, 0.5, 2.0);
    ops::gemm_(gc, gpu(a), gpu(b), 0.5, 2.0);
    expect_close(gc, c, "gemm_ alpha 0.5 beta 2");
  }
}

TEST(CudaGemm, BatchedUniformAndBroadcast) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64}) {
    // attention shapes: q (B,H,T,D) @ k^T (a transposed view), then probs @ v
    const Tensor q = rand_cpu({2, 3, 16, 8}, dt, 20), k = rand_cpu({2, 3, 16, 8}, dt, 21);
    expect_close(ops::matmul(gpu(q), ops::transpose(gpu(k), -1, -2)), ops::matmul(q, ops::transpose(k, -1, -2)),
                 "q @ k^T");
    // broadcast a single matrix over the batch (stride 0)
    const Tensor w = rand_cpu({8, 5}, dt, 22);
    expect_close(ops::matmul(gpu(q), gpu(w)), ops::matmul(q, w), "batch @ matrix");
    const Tensor m = rand_cpu({16, 5}, dt, 25);  // (5, 16) as a transposed view, @ (2, 3, 16, 8)
    expect_close(ops::matmul(gpu(ops::transpose(m, 0, 1)), gpu(q)), ops::matmul(ops::transpose(m, 0, 1), q),
                 "matrix @ batch");
    // broadcast batch dims that are not uniform strides: per-matrix calls
    const Tensor x = rand_cpu({4, 1, 5, 7}, dt, 23), y = rand_cpu({1, 3, 7, 2}, dt, 24);
    expect_close(ops::matmul(gpu(x), gpu(y)), ops::matmul(x, y), "(4,1) x (1,3) batch broadcast");
  }
}

// Attention's q, k, v are (B, H, T, hd) views into a packed (B, T, 3*H*hd) tensor: the
// heads of one sequence step by hd, the sequences by T*3*H*hd, so no single stride spans
// the batch. matmul makes one strided-batched call per sequence over its H heads, not
// B*H single GEMMs (the kernel calls are counted by the op profiler).
TEST(CudaGemm, AttentionHeadViewsBatchPerSequence) {
  STRATA_REQUIRE_GPU();
  const int64_t B = 3, T = 16, H = 4, hd = 8;
  const Tensor qkv = rand_cpu({B, T, 3 * H * hd}, DType::f32, 50);
  const auto heads = [&](const Tensor& t, int64_t i) {
    return ops::permute(ops::select(ops::view(t, {B, T, 3, H, hd}), 2, i), {0, 2, 1, 3});
  };
  const Tensor g = gpu(qkv);
  cpu::op_profile::start();
  const Tensor s = ops::matmul(heads(g, 0), ops::transpose(heads(g, 1), -1, -2));
  cpu::op_profile::stop();
  int64_t batched = 0, single = 0;
  for (const auto& st : cpu::op_profile::results()) {
    if (st.name == "matmul_batched") batched += st.calls;
    if (st.name == "matmul") single += st.calls;
  }
  EXPECT_EQ(batched, B) << "one strided-batched call per sequence";
  EXPECT_EQ(single, 0);
  expect_close(s, ops::matmul(heads(qkv, 0), ops::transpose(heads(qkv, 1), -1, -2)), "q @ k^T of head views");
  expect_close(ops::matmul(ops::softmax(s, -1), heads(g, 2)),
               ops::matmul(ops::softmax(ops::matmul(heads(qkv, 0), ops::transpose(heads(qkv, 1), -1, -2)), -1),
                           heads(qkv, 2)),
               "probs @ v");
}

TEST(CudaGemm, Tf32IsOptInAndClose) {
  STRATA_REQUIRE_GPU();
  const Tensor a = rand_cpu({64, 256}, DType::f32, 30), b = rand_cpu({256, 48}, DType::f32, 31);
  const Tensor want = ops::matmul(a, b);
  ASSERT_FALSE(cuda::allow_tf32());
  expect_close(ops::matmul(gpu(a), gpu(b)), want, Tol{1e-4, 1e-5}, "f32 without tf32");
  cuda::set_allow_tf32(true);
  const Tensor tf = ops::matmul(gpu(a), gpu(b));
  cuda::set_allow_tf32(false);
  expect_close(tf, want, Tol{0.05, 5e-3}, "f32 with tf32 (10-bit mantissa inputs)");
}

TEST(CudaGemm, HalfAndBfloat16) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor a = rand_cpu({32, 64}, DType::f32, 40), b = rand_cpu({64, 24}, DType::f32, 41);
    const Tensor a16 = ops::to_dtype(a, dt), b16 = ops::to_dtype(b, dt);
    // reference: the f32 product of the rounded inputs, rounded to the output type
    const Tensor want = ops::to_dtype(ops::matmul(ops::to_dtype(a16, DType::f32), ops::to_dtype(b16, DType::f32)), dt);
    const Tensor got = ops::matmul(gpu(a16), gpu(b16));
    EXPECT_EQ(got.dtype(), dt);
    const Tol tol = dt == DType::f16 ? Tol{0.05, 5e-3} : Tol{0.25, 1.6e-2};
    expect_close(got, want, tol, std::string("matmul ") + dtype_name(dt));
    const Tensor qa = ops::to_dtype(rand_cpu({3, 8, 16}, DType::f32, 42), dt);
    const Tensor qb = ops::to_dtype(rand_cpu({3, 16, 4}, DType::f32, 43), dt);
    const Tensor wb = ops::to_dtype(ops::matmul(ops::to_dtype(qa, DType::f32), ops::to_dtype(qb, DType::f32)), dt);
    expect_close(ops::matmul(gpu(qa), gpu(qb)), wb, tol, std::string("batched matmul ") + dtype_name(dt));
  }
}

}  // namespace
}  // namespace strata
