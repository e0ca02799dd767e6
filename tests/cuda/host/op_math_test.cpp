// The per-element formulas the CUDA elementwise kernels evaluate (tensor/cuda/op_math.h),
// run on the host against the CPU kernels (ops::binary, ops::unary, ...). The CPU uses
// vectorised exp/log/tanh/erf within a few ulp of libm, so f32 transcendental results
// agree to ~1e-6 relative; everything else must agree exactly.
#include <strata/tensor/cuda/op_math.h>

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <strata/tensor/ops.h>

namespace strata {
namespace {

using ops::BinaryOp;
using ops::CompareOp;
using ops::UnaryOp;

std::vector<double> grid() {
  std::vector<double> v = {0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-3, -7.25, 20.0, -30.0, 88.0, -100.0};
  for (int i = -40; i <= 40; ++i) v.push_back(i * 0.173);
  return v;
}

bool close(double a, double b, double rel) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= rel * std::max(1.0, std::abs(b));
}

template <class T>
void check_unary(UnaryOp op, double rel) {
  const auto g = grid();
  const Tensor x = ops::to_dtype(ops::from_vector(g, {int64_t(g.size())}), dtype_v<T>);
  const auto want = ops::unary(op, x).to_vector<double>();
  const auto xs = x.to_vector<T>();
  for (size_t i = 0; i < xs.size(); ++i)
    EXPECT_TRUE(close(double(cuda::apply_unary(op, xs[i])), want[i], rel))
        << dtype_name(dtype_v<T>) << " unary op " << int(op) << " at " << xs[i] << ": " << cuda::apply_unary(op, xs[i])
        << " vs cpu " << want[i];
}

TEST(CudaOpMath, UnaryMatchesCpu) {
  for (int op = 0; op <= int(UnaryOp::reciprocal); ++op) {
    check_unary<float>(UnaryOp(op), 2e-6);
    check_unary<double>(UnaryOp(op), 1e-13);
  }
}

template <class T>
void check_binary(BinaryOp op, double rel) {
  std::vector<double> a, b;
  for (double x : {-3.0, -1.5, 0.0, 0.75, 2.0, 5.0, 9.0})
    for (double y : {-2.0, -0.5, 0.0, 1.0, 2.0, 3.0, 7.0}) {
      a.push_back(x);
      b.push_back(y);
    }
  if constexpr (std::is_same_v<T, uint8_t>) {  // keep u8 inputs representable
    for (double& x : a) x = std::abs(x) * 20;
    for (double& y : b) y = std::abs(y) * 30;
  }
  const Shape s{int64_t(a.size())};
  const Tensor ta = ops::to_dtype(ops::from_vector(a, s), dtype_v<T>), tb = ops::to_dtype(ops::from_vector(b, s), dtype_v<T>);
  const auto want = ops::binary(op, ta, tb).to_vector<double>();
  const auto av = ta.to_vector<T>(), bv = tb.to_vector<T>();
  for (size_t i = 0; i < av.size(); ++i)
    EXPECT_TRUE(close(double(cuda::apply_binary(op, av[i], bv[i])), want[i], rel))
        << dtype_name(dtype_v<T>) << " binary op " << int(op) << " (" << double(av[i]) << ", " << double(bv[i]) << ")";
}

TEST(CudaOpMath, BinaryMatchesCpu) {
  for (int op = 0; op <= int(BinaryOp::minimum); ++op) {
    const auto o = BinaryOp(op);
    check_binary<float>(o, 0);
    check_binary<double>(o, 0);
    if (o == BinaryOp::div || o == BinaryOp::pow) continue;  // floating only
    check_binary<int32_t>(o, 0);
    check_binary<int64_t>(o, 0);
    check_binary<uint8_t>(o, 0);
  }
}

TEST(CudaOpMath, BinaryScalarSpecialCasesMatchCpu) {
  const auto g = grid();
  const Tensor x = ops::to_dtype(ops::from_vector(g, {int64_t(g.size())}), DType::f32);
  const auto xs = x.to_vector<float>();
  for (auto [op, s, first] : {std::tuple{BinaryOp::pow, 2.0, false}, {BinaryOp::div, 3.0, false},
                              {BinaryOp::div, 3.0, true}, {BinaryOp::sub, 0.3, true}, {BinaryOp::pow, 1.5, true}}) {
    const auto want = ops::binary_scalar(op, x, s, first).to_vector<float>();
    const auto f = cuda::make_scalar_op<float>(op, s, first);
    for (size_t i = 0; i < xs.size(); ++i)
      EXPECT_TRUE(close(f(xs[i]), want[i], 0)) << "op " << int(op) << " s " << s << " first " << first << " x " << xs[i];
  }
}

TEST(CudaOpMath, CompareMatchesCpu) {
  const Tensor a = ops::from_vector(std::vector<int64_t>{1, 2, 3, -4}, {4});
  const Tensor b = ops::from_vector(std::vector<int64_t>{2, 2, 1, -4}, {4});
  const auto av = a.to_vector<int64_t>(), bv = b.to_vector<int64_t>();
  for (int op = 0; op <= int(CompareOp::ge); ++op) {
    const auto want = ops::compare(CompareOp(op), a, b).to_vector<uint8_t>();
    const auto want_s = ops::compare_scalar(CompareOp(op), a, 2.5).to_vector<uint8_t>();
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(cuda::apply_compare(CompareOp(op), av[i], bv[i]), want[i]);
      EXPECT_EQ(cuda::apply_compare_scalar(CompareOp(op), av[i], 2.5), want_s[i]) << "integer vs 2.5, op " << op;
    }
  }
}

TEST(CudaOpMath, ActivationGradientsMatchCpu) {
  const auto g = grid();
  for (DType dt : {DType::f32, DType::f64}) {
    const double rel = dt == DType::f32 ? 2e-6 : 1e-13;
    const Tensor x = ops::to_dtype(ops::from_vector(g, {int64_t(g.size())}), dt);
    const Tensor dy = ops::full(x.shape(), 0.7, dt);
    const Tensor y_tanh = ops::unary(UnaryOp::tanh, x), y_sig = ops::unary(UnaryOp::sigmoid, x);
    const std::pair<cuda::ActKind, Tensor> cases[] = {
        {cuda::ActKind::gelu, ops::gelu_backward(dy, x, false)},
        {cuda::ActKind::gelu_tanh, ops::gelu_backward(dy, x, true)},
        {cuda::ActKind::relu, ops::relu_backward(dy, x)},
        {cuda::ActKind::tanh, ops::tanh_backward(dy, y_tanh)},
        {cuda::ActKind::sigmoid, ops::sigmoid_backward(dy, y_sig)},
    };
    for (const auto& [kind, want_t] : cases) {
      const Tensor& in = kind == cuda::ActKind::tanh ? y_tanh : (kind == cuda::ActKind::sigmoid ? y_sig : x);
      const auto want = want_t.to_vector<double>();
      const auto iv = in.to_vector<double>();
      for (size_t i = 0; i < iv.size(); ++i) {
        const double got = dt == DType::f32 ? double(cuda::apply_act_grad(kind, 0.7f, float(iv[i])))
                                            : cuda::apply_act_grad(kind, 0.7, iv[i]);
        EXPECT_TRUE(close(got, want[i], rel)) << dtype_name(dt) << " act " << int(kind) << " at " << iv[i];
      }
    }
  }
}

}  // namespace
}  // namespace strata
