// The CPU kernels on bf16 / f16 storage (widened to f32 inside the kernel) against the
// same ops run in f32 on the widened 16-bit inputs. The 16-bit result must equal the f32
// result rounded once to 16 bits, up to the f32 op's own rounding and a few 16-bit ulps
// for ops whose f32 partial results differ in summation order (GEMM panels): the
// tolerance is 2 ulps of the 16-bit type, relative (bf16: 2^-7, f16: 2^-10), plus a small
// absolute term for results near 0 after cancellation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <strata/tensor/half_ops.h>
#include <strata/tensor/ops.h>
#include "tests/test_tensors.h"

using namespace strata;
using strata::testing::rnd;

namespace {

class HalfKernels : public ::testing::TestWithParam<DType> {
 protected:
  DType dt() const { return GetParam(); }
  double ulp() const { return dt() == DType::bf16 ? 1.0 / 128 : 1.0 / 1024; }
  // A 16-bit tensor of N(0, scale^2) values and its exact f32 widening.
  std::pair<Tensor, Tensor> make(const Shape& s, uint64_t seed, double scale = 1.0) const {
    Tensor h = ops::to_dtype(rnd(s, DType::f32, seed, scale), dt());
    return {h, ops::to_dtype(h, DType::f32)};
  }
  // got (16-bit) against want (f32 computed on the widened inputs).
  void expect_close(const Tensor& got, const Tensor& want, const std::string& what, double abs_tol = 1e-3,
                    double ulps = 2) const {
    ASSERT_EQ(got.dtype(), dt()) << what;
    ASSERT_EQ(got.shape(), want.shape()) << what;
    const auto g = ops::to_dtype(got, DType::f32).to_vector<float>();
    const auto w = want.to_vector<float>();
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], w[i], ulps * ulp() * std::abs(w[i]) + abs_tol) << what << " element " << i;
  }
};

INSTANTIATE_TEST_SUITE_P(Half, HalfKernels, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST_P(HalfKernels, StorageIsTwoBytesPerElement) {
  const Tensor t = ops::zeros({3, 5, 7}, dt());
  EXPECT_EQ(t.nbytes(), 3 * 5 * 7 * 2);
  EXPECT_EQ(t.storage()->nbytes(), size_t(3 * 5 * 7 * 2));
}

TEST_P(HalfKernels, MatmulAllLayoutsAndPanelEdges) {
  // k = 300 and m = 260 cross the 256-wide panels; odd n
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{5, 7, 3}, {260, 300, 33}, {17, 513, 270}}) {
    auto [a, af] = make({m, k}, 1);
    auto [b, bf] = make({k, n}, 2);
    expect_close(ops::matmul(a, b), ops::matmul(af, bf), "a@b", 1e-2);
    // transposed operands go to the kernel as strided views
    auto [at, atf] = make({k, m}, 3);
    auto [bt, btf] = make({n, k}, 4);
    expect_close(ops::matmul(ops::transpose(at, 0, 1), ops::transpose(bt, 0, 1)),
                 ops::matmul(ops::transpose(atf, 0, 1), ops::transpose(btf, 0, 1)), "a^T@b^T", 1e-2);
  }
}

TEST_P(HalfKernels, BatchedMatmulAndGemmBeta) {
  auto [a, af] = make({2, 3, 9, 16}, 5);
  auto [b, bf] = make({2, 3, 16, 9}, 6);
  expect_close(ops::matmul(a, b), ops::matmul(af, bf), "batched", 1e-2);
  // out = 0.5 a@b + 2 out
  auto [x, xf] = make({9, 16}, 7);
  auto [y, yf] = make({16, 11}, 8);
  auto [c, cf] = make({9, 11}, 9);
  Tensor c16 = ops::clone(c), c32 = ops::clone(cf);
  ops::gemm_(c16, x, y, 0.5, 2.0);
  ops::gemm_(c32, xf, yf, 0.5, 2.0);
  expect_close(c16, c32, "gemm beta", 1e-2);
}

TEST_P(HalfKernels, ElementwiseAndBroadcast) {
  auto [a, af] = make({4, 6, 10}, 10);
  auto [b, bf] = make({10}, 11);
  expect_close(ops::binary(ops::BinaryOp::add, a, b), ops::binary(ops::BinaryOp::add, af, bf), "add");
  expect_close(ops::binary(ops::BinaryOp::mul, a, b), ops::binary(ops::BinaryOp::mul, af, bf), "mul");
  expect_close(ops::binary_scalar(ops::BinaryOp::mul, a, 0.125), ops::binary_scalar(ops::BinaryOp::mul, af, 0.125),
               "mul scalar", 0, 0);  // a power of 2: exact
  for (auto op : {ops::UnaryOp::gelu, ops::UnaryOp::gelu_tanh, ops::UnaryOp::exp, ops::UnaryOp::tanh})
    expect_close(ops::unary(op, a), ops::unary(op, af), "unary", 1e-3);
  auto [g, gf] = make({4, 6, 10}, 12);
  expect_close(ops::gelu_backward(g, a, false), ops::gelu_backward(gf, af, false), "gelu backward");
  Tensor mask = ops::compare_scalar(ops::CompareOp::gt, af, 0.5);
  expect_close(ops::masked_fill(a, mask, -1e4), ops::masked_fill(af, mask, -1e4), "masked_fill", 0, 1);
  Tensor acc = ops::clone(a), accf = ops::to_dtype(a, DType::f32);
  ops::add_(acc, g, 0.5);
  ops::add_(accf, gf, 0.5);
  expect_close(acc, accf, "add_");
}

TEST_P(HalfKernels, SumsAccumulateWide) {
  // 4096 rows of a bias gradient: bf16 accumulation would drift by far more than 2 ulps
  auto [x, xf] = make({4096, 24}, 13);
  expect_close(ops::sum(x, {0}), ops::sum(xf, {0}), "column sums", 1e-2);
  expect_close(ops::sum(x, {1}), ops::sum(xf, {1}), "row sums", 1e-3);
  expect_close(ops::sum(x), ops::sum(xf), "all", 1e-2);
}

TEST_P(HalfKernels, LayerNormForwardBackwardWithF32Stats) {
  auto [x, xf] = make({37, 48}, 14, 3.0);
  auto [w, wf] = make({48}, 15);
  auto [b, bf] = make({48}, 16);
  auto [y, mean, rstd] = ops::layer_norm(x, w, b, 1e-5);
  auto [yf, meanf, rstdf] = ops::layer_norm(xf, wf, bf, 1e-5);
  EXPECT_EQ(mean.dtype(), DType::f32);
  EXPECT_EQ(rstd.dtype(), DType::f32);
  for (auto [u, v] : {std::pair{mean, meanf}, std::pair{rstd, rstdf}}) {
    const auto p = u.to_vector<float>(), q = v.to_vector<float>();
    for (size_t i = 0; i < p.size(); ++i) ASSERT_NEAR(p[i], q[i], 1e-5 * (1 + std::abs(q[i])));
  }
  expect_close(y, yf, "y", 1e-2);
  auto [dy, dyf] = make({37, 48}, 17);
  auto [dx, dw, db] = ops::layer_norm_backward(dy, x, mean, rstd, w, true);
  auto [dxf, dwf, dbf] = ops::layer_norm_backward(dyf, xf, meanf, rstdf, wf, true);
  expect_close(dx, dxf, "dx", 1e-2);
  expect_close(dw, dwf, "dw", 1e-2);
  expect_close(db, dbf, "db", 1e-2);
}

TEST_P(HalfKernels, SoftmaxLastAndMiddleDim) {
  auto [x, xf] = make({6, 5, 33}, 18, 4.0);
  auto [dy, dyf] = make({6, 5, 33}, 19);
  for (int64_t dim : {-1, 1}) {
    const Tensor y = ops::softmax(x, dim), yf = ops::softmax(xf, dim);
    expect_close(y, yf, "softmax", 1e-4);
    expect_close(ops::softmax_backward(dy, y, dim), ops::softmax_backward(dyf, ops::to_dtype(y, DType::f32), dim),
                 "softmax backward", 1e-3);
    const Tensor ly = ops::log_softmax(x, dim), lyf = ops::log_softmax(xf, dim);
    expect_close(ly, lyf, "log_softmax", 1e-3);
    expect_close(ops::log_softmax_backward(dy, ly, dim),
                 ops::log_softmax_backward(dyf, ops::to_dtype(ly, DType::f32), dim), "log_softmax backward", 2e-2);
  }
}

TEST_P(HalfKernels, CrossEntropyInF32) {
  auto [x, xf] = make({29, 67}, 20, 3.0);
  Tensor t = strata::testing::random_tokens({29}, 67, 21);
  auto [loss, probs] = ops::cross_entropy(x, t, -100);
  auto [lossf, probsf] = ops::cross_entropy(xf, t, -100);
  ASSERT_EQ(loss.dtype(), DType::f32);
  ASSERT_EQ(probs.dtype(), DType::f32);
  EXPECT_NEAR(loss.item<double>(), lossf.item<double>(), 1e-6);  // the same f32 math on the same values
  const Tensor g = ops::full({}, 1.0, DType::f32);
  const Tensor d = ops::cross_entropy_backward(g, probs, t, -100, dt());
  expect_close(d, ops::cross_entropy_backward(g, probsf, t, -100), "dlogits", 1e-6);
}

TEST_P(HalfKernels, EmbeddingGatherAndScatterAddInF32) {
  auto [w, wf] = make({11, 70}, 22);
  // many repeats of few rows: the scatter-add sums 300 gradients into each row
  Tensor idx = strata::testing::random_tokens({600}, 2, 23);
  expect_close(ops::embedding(w, idx), ops::embedding(wf, idx), "gather", 0, 0);
  auto [dy, dyf] = make({600, 70}, 24);
  expect_close(ops::embedding_backward(dy, idx, 11), ops::embedding_backward(dyf, idx, 11), "scatter-add", 1e-2);
}

TEST_P(HalfKernels, DropoutKeepsTheF32Mask) {
  auto [x, xf] = make({1000}, 25);
  Generator g1(7), g2(7);
  auto [y, mask] = ops::dropout(x, 0.25, g1);
  auto [yf, maskf] = ops::dropout(xf, 0.25, g2);
  EXPECT_EQ(mask.to_vector<uint8_t>(), maskf.to_vector<uint8_t>());
  expect_close(y, yf, "dropout", 0, 1);
  expect_close(ops::dropout_backward(x, mask, 0.25), ops::dropout_backward(xf, maskf, 0.25), "dropout bwd", 0, 1);
}

// The CNN's kernels: convolution (im2col on 2-byte buffers, the GEMM widening its panels),
// pooling and batch norm (widened per element, statistics in f32/f64).
TEST_P(HalfKernels, Conv2dForwardBackward) {
  for (const ops::Conv2dParams& p : {ops::Conv2dParams{}, ops::Conv2dParams{2, 2, 1, 1}}) {
    auto [x, xf] = make({5, 3, 11, 9}, 30);
    auto [w, wf] = make({4, 3, 3, 3}, 31, 0.3);
    auto [b, bf] = make({4}, 32);
    const Tensor y = ops::conv2d(x, w, b, p), yf = ops::conv2d(xf, wf, bf, p);
    expect_close(y, yf, "conv2d", 2e-2);
    auto [dy, dyf] = make(y.shape(), 33);
    auto [dx, dw, db] = ops::conv2d_backward(dy, x, w, true, p);
    auto [dxf, dwf, dbf] = ops::conv2d_backward(dyf, xf, wf, true, p);
    expect_close(dx, dxf, "conv2d dx", 2e-2);
    expect_close(dw, dwf, "conv2d dw", 5e-2, 4);  // sums of 5 x 11 x 9 products
    expect_close(db, dbf, "conv2d db", 5e-2);
  }
  // 1x1 (no im2col)
  auto [x, xf] = make({3, 6, 5, 5}, 34);
  auto [w, wf] = make({2, 6, 1, 1}, 35);
  expect_close(ops::conv2d(x, w, Tensor(), {}), ops::conv2d(xf, wf, Tensor(), {}), "conv2d 1x1", 2e-2);
}

TEST_P(HalfKernels, PoolingForwardBackward) {
  auto [x, xf] = make({2, 3, 8, 10}, 36);
  for (const ops::Pool2dParams& p : {ops::Pool2dParams{}, ops::Pool2dParams{3, 3, 2, 2, 1, 1}}) {
    auto [y, idx] = ops::max_pool2d(x, p);
    auto [yf, idxf] = ops::max_pool2d(xf, p);
    expect_close(y, yf, "max_pool2d", 0, 0);  // a selection: exact
    EXPECT_EQ(idx.to_vector<int64_t>(), idxf.to_vector<int64_t>());
    auto [dy, dyf] = make(y.shape(), 37);
    expect_close(ops::max_pool2d_backward(dy, idx, x.shape()), ops::max_pool2d_backward(dyf, idxf, xf.shape()),
                 "max_pool2d backward", 1e-2);
    expect_close(ops::avg_pool2d(x, p), ops::avg_pool2d(xf, p), "avg_pool2d", 1e-2);
    expect_close(ops::avg_pool2d_backward(dy, x.shape(), p), ops::avg_pool2d_backward(dyf, xf.shape(), p),
                 "avg_pool2d backward", 1e-2);
  }
}

TEST_P(HalfKernels, BatchNormForwardBackward) {
  auto [x, xf] = make({6, 4, 5, 5}, 38, 2.0);
  auto [w, wf] = make({4}, 39);
  auto [b, bf] = make({4}, 40);
  Tensor rm = ops::zeros({4}, dt()), rv = ops::ones({4}, dt());
  Tensor rmf = ops::zeros({4}, DType::f32), rvf = ops::ones({4}, DType::f32);
  auto [y, sm, si] = ops::batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
  auto [yf, smf, sif] = ops::batch_norm(xf, wf, bf, rmf, rvf, true, 0.1, 1e-5);
  expect_close(y, yf, "batch_norm", 2e-2);
  expect_close(rm, rmf, "running mean", 1e-3);
  expect_close(rv, rvf, "running var", 1e-3);
  auto [dy, dyf] = make(y.shape(), 41);
  auto [dx, dw, db] = ops::batch_norm_backward(dy, x, w, sm, si, true);
  auto [dxf, dwf, dbf] = ops::batch_norm_backward(dyf, xf, wf, smf, sif, true);
  expect_close(dx, dxf, "batch_norm dx", 3e-2, 4);  // the saved mean / invstd are 16-bit
  expect_close(dw, dwf, "batch_norm dw", 5e-2, 4);
  expect_close(db, dbf, "batch_norm db", 5e-2);
  // eval: running statistics
  auto [ye, sme, sie] = ops::batch_norm(x, w, b, rm, rv, false, 0.1, 1e-5);
  auto [yef, smef, sief] = ops::batch_norm(xf, wf, bf, rmf, rvf, false, 0.1, 1e-5);
  expect_close(ye, yef, "batch_norm eval", 2e-2, 4);
}

TEST(HalfKernelsErrors, SixteenBitNormNeedsF32Stats) {
  const Tensor x = ops::zeros({2, 4}, DType::bf16);
  const Tensor bad = ops::zeros({2}, DType::bf16);
  EXPECT_THROW(ops::layer_norm_backward(x, x, bad, bad, Tensor(), false), Error);
}

}  // namespace
