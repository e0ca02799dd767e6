// CUDA vs CPU: copies and dtype conversions, fills, transfers, and every elementwise op
// over contiguous, broadcast and strided operands, per dtype. Skips without a GPU.
#include <gtest/gtest.h>

#include "../cuda_test_util.h"

namespace strata {
namespace {

using namespace test;  // kGpu, Tol, tol_for, expect_close, rand_cpu, gpu
using ops::BinaryOp;
using ops::CompareOp;
using ops::UnaryOp;

const DType kAll[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};
const DType kArith[] = {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8};


// Values every dtype holds exactly and that stay small: 0..11 with quarter steps for floats.
Tensor small_values(const Shape& s, DType dt, uint64_t seed) {
  Tensor t = rand_cpu(s, DType::f64, seed, 0.0, 12.0);
  if (dt == DType::i32 || dt == DType::i64 || dt == DType::u8) return ops::to_dtype(rand_cpu(s, DType::i64, seed, 0, 12), dt);
  auto v = t.to_vector<double>();
  for (double& x : v) x = std::floor(x * 4) / 4;
  return ops::to_dtype(ops::from_vector(v, s), dt);
}

TEST(CudaParity, TransfersRoundTripEveryDtypeBitExactly) {
  STRATA_REQUIRE_GPU();
  for (DType dt : kAll) {
    const Tensor c = small_values({3, 7, 5}, dt, 1);
    const Tensor g = gpu(c);
    EXPECT_EQ(g.device(), kGpu);
    expect_close(g.to(kCPU), c, std::string("round trip ") + dtype_name(dt));
    // strided sources on either side
    expect_close(gpu(ops::transpose(c, 0, 2)).to(kCPU), ops::contiguous(ops::transpose(c, 0, 2)), "strided host");
    expect_close(ops::slice(g, 1, 1, 7, 2).to(kCPU), ops::contiguous(ops::slice(c, 1, 1, 7, 2)), "strided device");
  }
  EXPECT_EQ(gpu(ops::full({}, 3.5)).item<double>(), 3.5);
}

TEST(CudaParity, CopyConvertsEveryDtypePairLikeTheCpu) {
  STRATA_REQUIRE_GPU();
  for (DType s : kAll)
    for (DType d : kAll) {
      const Tensor c = small_values({4, 6}, s, 2);
      expect_close(ops::to_dtype(gpu(c), d), ops::to_dtype(c, d), std::string(dtype_name(s)) + "->" + dtype_name(d));
      // broadcast + strided destination through copy_
      Tensor cd = ops::zeros({6, 4}, d), gd = gpu(cd);
      Tensor cv = ops::transpose(cd, 0, 1), gv = ops::transpose(gd, 0, 1);
      const Tensor row = ops::narrow(c, 0, 2, 1);
      ops::copy_(cv, row);
      ops::copy_(gv, gpu(row));
      expect_close(gd, cd, std::string("copy_ broadcast ") + dtype_name(s) + "->" + dtype_name(d));
    }
}

// The contiguous floating conversions (autocast's casts take a typed kernel) round as the
// CPU does, bit for bit: values between 16-bit steps, ties, subnormals, overflow to
// infinity, infinities and NaN, over a tensor long enough for many blocks.
TEST(CudaParity, ContiguousFloatingCastsRoundLikeTheCpu) {
  STRATA_REQUIRE_GPU();
  std::vector<double> v = {0.0, -0.0, 1.0 + 1.0 / 512, 1.0 + 3.0 / 1024, 65504.0, 65520.0, 1e5, -1e38, 3.0e38,
                           1e-8, 6e-8, 1e-40, 1e-300, 1e300, INFINITY, -INFINITY, NAN};
  const Tensor r = rand_cpu({100003}, DType::f64, 11, -3e4, 3e4);
  for (double x : r.to_vector<double>()) v.push_back(x);
  const Tensor c64 = ops::from_vector(v, {int64_t(v.size())});
  const DType kFloats[] = {DType::f64, DType::f32, DType::bf16, DType::f16};
  for (DType s : kFloats) {
    const Tensor cs = ops::to_dtype(c64, s);
    for (DType d : kFloats)
      expect_close(ops::to_dtype(gpu(cs), d), ops::to_dtype(cs, d), Tol{0, 0},
                   std::string("contiguous ") + dtype_name(s) + "->" + dtype_name(d));
  }
}

TEST(CudaParity, FillEveryDtypeOnStridedViews) {
  STRATA_REQUIRE_GPU();
  for (DType dt : kAll)
    for (double v : {0.0, 1.5, 7.0}) {
      Tensor c = ops::zeros({5, 6}, dt), g = gpu(c);
      Tensor cv = ops::slice(c, 1, 0, 6, 2), gv = ops::slice(g, 1, 0, 6, 2);
      ops::fill_(cv, v);
      ops::fill_(gv, v);
      expect_close(g, c, std::string("fill ") + dtype_name(dt));
    }
}

TEST(CudaParity, BinaryOpsAllDtypesWithBroadcasting) {
  STRATA_REQUIRE_GPU();
  for (int o = 0; o <= int(BinaryOp::minimum); ++o) {
    const auto op = BinaryOp(o);
    for (DType dt : kArith) {
      const bool fl = dt == DType::f32 || dt == DType::f64;
      if (!fl && (op == BinaryOp::div || op == BinaryOp::pow)) continue;
      const double lo = (op == BinaryOp::pow || !fl) ? 0.0 : -3.0;
      const Tensor a = rand_cpu({3, 1, 5}, dt, 10, lo, 4.0), b = rand_cpu({4, 5}, dt, 11, lo + 0.5, 4.0);
      const std::string what = std::string("binary ") + std::to_string(o) + " " + dtype_name(dt);
      expect_close(ops::binary(op, gpu(a), gpu(b)), ops::binary(op, a, b), what);
      // transposed (non-contiguous) operands
      const Tensor at = ops::transpose(rand_cpu({5, 4}, dt, 12, lo, 4.0), 0, 1);
      expect_close(ops::binary(op, gpu(at), gpu(b)), ops::binary(op, at, b), what + " strided");
      for (bool first : {false, true})
        expect_close(ops::binary_scalar(op, gpu(a), 2.0, first), ops::binary_scalar(op, a, 2.0, first),
                     what + " scalar");
    }
  }
  try {
    (void)ops::binary(BinaryOp::div, gpu(ops::ones({2}, DType::i32)), gpu(ops::ones({2}, DType::i32)));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("div and pow need a floating dtype"), std::string::npos) << e.what();
  }
}

TEST(CudaParity, UnaryOpsAndActivationGradients) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor x = rand_cpu({7, 33}, dt, 20, -6.0, 6.0);
    const Tensor pos = rand_cpu({7, 33}, dt, 21, 0.05, 9.0);
    for (int o = 0; o <= int(UnaryOp::reciprocal); ++o) {
      const auto op = UnaryOp(o);
      const bool needs_pos = op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::rsqrt;
      const Tensor& in = needs_pos ? pos : x;
      expect_close(ops::unary(op, gpu(in)), ops::unary(op, in), std::string("unary ") + std::to_string(o));
      expect_close(ops::unary(op, gpu(ops::transpose(in, 0, 1))), ops::unary(op, ops::transpose(in, 0, 1)),
                   std::string("unary strided ") + std::to_string(o));
    }
    const Tensor g = rand_cpu({7, 33}, dt, 22);
    const Tensor yt = ops::unary(UnaryOp::tanh, x), ys = ops::unary(UnaryOp::sigmoid, x);
    const Tensor yr = ops::unary(UnaryOp::relu, x);
    for (bool t : {false, true}) expect_close(ops::gelu_backward(gpu(g), gpu(x), t), ops::gelu_backward(g, x, t), "gelu'");
    expect_close(ops::relu_backward(gpu(g), gpu(yr)), ops::relu_backward(g, yr), "relu'");
    expect_close(ops::tanh_backward(gpu(g), gpu(yt)), ops::tanh_backward(g, yt), "tanh'");
    expect_close(ops::sigmoid_backward(gpu(g), gpu(ys)), ops::sigmoid_backward(g, ys), "sigmoid'");
  }
}

TEST(CudaParity, CompareWhereMaskedFill) {
  STRATA_REQUIRE_GPU();
  for (DType dt : kArith) {
    const Tensor a = rand_cpu({4, 1, 6}, dt, 30, 0, 5), b = rand_cpu({3, 6}, dt, 31, 0, 5);
    for (int o = 0; o <= int(CompareOp::ge); ++o) {
      expect_close(ops::compare(CompareOp(o), gpu(a), gpu(b)), ops::compare(CompareOp(o), a, b), "compare");
      expect_close(ops::compare_scalar(CompareOp(o), gpu(a), 2.5), ops::compare_scalar(CompareOp(o), a, 2.5),
                   "compare_scalar");
    }
    const Tensor cond = ops::compare(CompareOp::gt, a, b);
    expect_close(ops::where(gpu(cond), gpu(a), gpu(b)), ops::where(cond, a, b), "where");
    const Tensor mask = ops::compare_scalar(CompareOp::lt, b, 2.0);
    const Tensor t = rand_cpu({4, 3, 6}, dt, 32, 0, 5);
    expect_close(ops::masked_fill(gpu(t), gpu(mask), 9.0), ops::masked_fill(t, mask, 9.0), "masked_fill");
  }
}

TEST(CudaParity, InPlaceAddAndScale) {
  STRATA_REQUIRE_GPU();
  for (DType dt : kArith) {
    for (double alpha : {1.0, 0.5, 3.0}) {
      Tensor c = rand_cpu({4, 6}, dt, 40, 0, 5), g = gpu(c);
      const Tensor src = rand_cpu({6}, dt, 41, 0, 5);
      ops::add_(c, src, alpha);
      ops::add_(g, gpu(src), alpha);
      expect_close(g, c, std::string("add_ ") + dtype_name(dt));
      Tensor cv = ops::transpose(c, 0, 1), gv = ops::transpose(g, 0, 1);
      ops::mul_(cv, 3.0);
      ops::mul_(gv, 3.0);
      expect_close(g, c, std::string("mul_ ") + dtype_name(dt));
    }
  }
}

TEST(CudaParity, ViewsCatStackOnDevice) {
  STRATA_REQUIRE_GPU();
  const Tensor a = rand_cpu({3, 4, 5}, DType::f32, 50), b = rand_cpu({3, 2, 5}, DType::f32, 51);
  expect_close(ops::cat({gpu(a), gpu(b)}, 1), ops::cat({a, b}, 1), "cat");
  expect_close(ops::stack({gpu(a), gpu(a)}, 0), ops::stack({a, a}, 0), "stack");
  expect_close(ops::reshape(ops::transpose(gpu(a), 0, 2), {20, 3}), ops::reshape(ops::transpose(a, 0, 2), {20, 3}),
               "reshape of a transposed view (copy)");
  expect_close(ops::contiguous(ops::expand(gpu(ops::narrow(a, 0, 0, 1)), {6, 4, 5})),
               ops::contiguous(ops::expand(ops::narrow(a, 0, 0, 1), {6, 4, 5})), "expand");
}

}  // namespace
}  // namespace strata
