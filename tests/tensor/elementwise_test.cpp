// Elementwise raw ops against naive reference loops: broadcasting, strided views,
// empty tensors, f32/f64/integer dtypes, activation derivatives by finite
// differences, in-place ops and the error messages for bad shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include <strata/tensor/ops.h>

using namespace strata;
using ops::BinaryOp;
using ops::CompareOp;
using ops::UnaryOp;

namespace {

Tensor rand_t(const Shape& s, DType dt = DType::f64, double lo = -2, double hi = 2, uint64_t seed = 1) {
  Generator g(seed);
  return ops::uniform(s, lo, hi, g, dt);
}

// Element of a row-major tensor with values v and shape s at the broadcast position
// of out-index `oi` (out shape os).
double at_broadcast(const std::vector<double>& v, const Shape& s, const Shape& os, int64_t oi) {
  int64_t off = 0, stride = 1;
  int64_t rem = oi;
  const int64_t lead = int64_t(os.size()) - int64_t(s.size());
  for (int64_t d = int64_t(os.size()) - 1; d >= 0; --d) {
    const int64_t i = rem % os[size_t(d)];
    rem /= os[size_t(d)];
    if (d < lead) continue;
    const int64_t sd = s[size_t(d - lead)];
    off += (sd == 1 ? 0 : i) * stride;
    stride *= sd;
  }
  return v[size_t(off)];
}

std::vector<double> ref_binary(const Tensor& a, const Tensor& b, const Shape& os,
                               const std::function<double(double, double)>& f) {
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> out(size_t(shape_numel(os)));
  for (int64_t i = 0; i < shape_numel(os); ++i)
    out[size_t(i)] = f(at_broadcast(av, a.shape(), os, i), at_broadcast(bv, b.shape(), os, i));
  return out;
}

void expect_near_vec(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
      continue;
    }
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "at " << i;
  }
}

double apply_binary(BinaryOp op, double x, double y) {
  switch (op) {
    case BinaryOp::add: return x + y;
    case BinaryOp::sub: return x - y;
    case BinaryOp::mul: return x * y;
    case BinaryOp::div: return x / y;
    case BinaryOp::pow: return std::pow(x, y);
    case BinaryOp::maximum: return std::max(x, y);
    case BinaryOp::minimum: return std::min(x, y);
  }
  return 0;
}

const std::vector<BinaryOp> kAllBinary = {BinaryOp::add,  BinaryOp::sub,     BinaryOp::mul,    BinaryOp::div,
                                          BinaryOp::pow, BinaryOp::maximum, BinaryOp::minimum};

}  // namespace

TEST(Elementwise, BinaryBroadcastMatchesReferenceF64) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 1, 3}, {4, 1}}, {{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{3, 1}, {1, 5}}, {{}, {2, 3}}, {{2, 3}, {}}, {{5}, {1}}};
  for (const auto& [sa, sb] : cases) {
    Tensor a = rand_t(sa, DType::f64, 0.5, 2.0, 1);
    Tensor b = rand_t(sb, DType::f64, 0.5, 2.0, 2);
    const Shape os = ops::broadcast_shapes(sa, sb);
    for (BinaryOp op : kAllBinary) {
      Tensor o = ops::binary(op, a, b);
      EXPECT_EQ(o.shape(), os);
      EXPECT_TRUE(o.is_contiguous());
      expect_near_vec(o.to_vector<double>(),
                      ref_binary(a, b, os, [op](double x, double y) { return apply_binary(op, x, y); }), 1e-14);
    }
  }
}

TEST(Elementwise, BinaryF32AndStridedInputs) {
  Tensor base = rand_t({4, 6}, DType::f32, -1, 1, 3);
  Tensor at = ops::transpose(base, 0, 1);  // (6,4), non-contiguous
  Tensor b = rand_t({6, 4}, DType::f32, -1, 1, 4);
  Tensor bs = ops::slice(rand_t({6, 8}, DType::f32, -1, 1, 5), 1, 0, 8, 2);  // (6,4) stride 2
  ASSERT_FALSE(at.is_contiguous());
  ASSERT_FALSE(bs.is_contiguous());
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::maximum}) {
    for (const Tensor& rhs : {b, bs}) {
      Tensor o = ops::binary(op, at, rhs);
      ASSERT_EQ(o.dtype(), DType::f32);
      expect_near_vec(o.to_vector<double>(),
                      ref_binary(at, rhs, {6, 4}, [op](double x, double y) { return apply_binary(op, x, y); }),
                      1e-6);
    }
  }
  // broadcast of a column against a transposed matrix
  Tensor col = rand_t({6, 1}, DType::f32, -1, 1, 6);
  expect_near_vec(ops::binary(BinaryOp::mul, at, col).to_vector<double>(),
                  ref_binary(at, col, {6, 4}, [](double x, double y) { return x * y; }), 1e-6);
}

TEST(Elementwise, BinaryLargeContiguousAndBiasAdd) {
  // big enough to take the threaded path; (N,C)+(C) is the bias-add layout
  Tensor x = rand_t({512, 300}, DType::f32, -1, 1, 7);
  Tensor bias = rand_t({300}, DType::f32, -1, 1, 8);
  expect_near_vec(ops::binary(BinaryOp::add, x, bias).to_vector<double>(),
                  ref_binary(x, bias, {512, 300}, [](double p, double q) { return p + q; }), 1e-6);
  Tensor y = rand_t({512, 300}, DType::f32, -1, 1, 9);
  expect_near_vec(ops::binary(BinaryOp::mul, x, y).to_vector<double>(),
                  ref_binary(x, y, {512, 300}, [](double p, double q) { return p * q; }), 1e-6);
}

TEST(Elementwise, BinaryIntegers) {
  Tensor a = ops::from_vector<int64_t>({1, -2, 3, 4, 5, -6}, {2, 3});
  Tensor b = ops::from_vector<int64_t>({10, 20, 30}, {3});
  EXPECT_EQ(ops::binary(BinaryOp::add, a, b).to_vector<int64_t>(), (std::vector<int64_t>{11, 18, 33, 14, 25, 24}));
  EXPECT_EQ(ops::binary(BinaryOp::mul, a, b).to_vector<int64_t>(),
            (std::vector<int64_t>{10, -40, 90, 40, 100, -180}));
  EXPECT_EQ(ops::binary(BinaryOp::maximum, a, ops::from_vector<int64_t>({2}, {1})).to_vector<int64_t>(),
            (std::vector<int64_t>{2, 2, 3, 4, 5, 2}));
  Tensor u = ops::from_vector<uint8_t>({1, 0, 1}, {3});
  EXPECT_EQ(ops::binary(BinaryOp::add, u, u).to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 2}));
  Tensor i32 = ops::from_vector<int32_t>({7, 8}, {2});
  EXPECT_EQ(ops::binary(BinaryOp::sub, i32, i32).dtype(), DType::i32);
  EXPECT_THROW(ops::binary(BinaryOp::div, a, a), Error);
}

TEST(Elementwise, EmptyTensors) {
  Tensor a = ops::zeros({0, 3}, DType::f32);
  Tensor b = ops::ones({3}, DType::f32);
  Tensor o = ops::binary(BinaryOp::add, a, b);
  EXPECT_EQ(o.shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::unary(UnaryOp::exp, a).shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::compare(CompareOp::lt, a, b).shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::binary_scalar(BinaryOp::mul, a, 2.0).numel(), 0);
  Tensor d = ops::zeros({0, 3}, DType::f32);
  ops::add_(d, b);
  ops::mul_(d, 3.0);
  EXPECT_EQ(d.numel(), 0);
}

TEST(Elementwise, ShapeAndDtypeErrorsNameTheOp) {
  Tensor a = ops::zeros({2, 3}, DType::f32);
  Tensor b = ops::zeros({4}, DType::f32);
  try {
    ops::binary(BinaryOp::add, a, b);
    FAIL() << "expected a broadcast error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[add]"), std::string::npos) << m;
    EXPECT_NE(m.find("(2,3)"), std::string::npos) << m;
    EXPECT_NE(m.find("(4)"), std::string::npos) << m;
  }
  try {
    ops::binary(BinaryOp::mul, a, ops::zeros({2, 3}, DType::f64));
    FAIL() << "expected a dtype error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[mul]"), std::string::npos) << m;
    EXPECT_NE(m.find("f64"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::where(ops::zeros({2, 3}, DType::f32), a, a), Error);  // cond must be u8
  EXPECT_THROW(ops::masked_fill(a, ops::zeros({3, 3}, DType::u8), 1.0), Error);
  Tensor small = ops::zeros({3}, DType::f32);
  EXPECT_THROW(ops::add_(small, a), Error);  // src larger than dst
  Tensor expanded = ops::expand(ops::zeros({1, 3}, DType::f32), {2, 3});
  EXPECT_THROW(ops::add_(expanded, a), Error);
  EXPECT_THROW(ops::unary(UnaryOp::exp, ops::zeros({2}, DType::i64)), Error);
}

TEST(Elementwise, BinaryScalar) {
  Tensor a = rand_t({3, 5}, DType::f64, 0.5, 3, 11);
  const auto av = a.to_vector<double>();
  for (BinaryOp op : kAllBinary) {
    for (bool first : {false, true}) {
      for (double s : {2.0, 0.5, -1.5}) {
        std::vector<double> want;
        for (double x : av) want.push_back(first ? apply_binary(op, s, x) : apply_binary(op, x, s));
        expect_near_vec(ops::binary_scalar(op, a, s, first).to_vector<double>(), want, 1e-14);
      }
    }
  }
  Tensor f = ops::transpose(rand_t({5, 3}, DType::f32, -1, 1, 12), 0, 1);
  std::vector<double> want;
  for (double x : f.to_vector<double>()) want.push_back(x * x);
  expect_near_vec(ops::binary_scalar(BinaryOp::pow, f, 2.0).to_vector<double>(), want, 1e-6);
  Tensor i = ops::from_vector<int32_t>({1, 2, 3}, {3});
  EXPECT_EQ(ops::binary_scalar(BinaryOp::sub, i, 10, true).to_vector<int32_t>(), (std::vector<int32_t>{9, 8, 7}));
}

TEST(Elementwise, CompareAllDtypes) {
  const std::vector<CompareOp> ops_list = {CompareOp::eq, CompareOp::ne, CompareOp::lt,
                                           CompareOp::le, CompareOp::gt, CompareOp::ge};
  auto ref = [](CompareOp op, double x, double y) {
    switch (op) {
      case CompareOp::eq: return x == y;
      case CompareOp::ne: return x != y;
      case CompareOp::lt: return x < y;
      case CompareOp::le: return x <= y;
      case CompareOp::gt: return x > y;
      case CompareOp::ge: return x >= y;
    }
    return false;
  };
  for (DType dt : {DType::f32, DType::f64, DType::i64, DType::i32, DType::u8}) {
    Tensor a = ops::to_dtype(ops::from_vector<double>({1, 2, 3, 2, 5, 0}, {2, 3}), dt);
    Tensor b = ops::to_dtype(ops::from_vector<double>({2, 2, 1}, {3}), dt);
    for (CompareOp op : ops_list) {
      Tensor c = ops::compare(op, a, b);
      ASSERT_EQ(c.dtype(), DType::u8);
      const auto got = c.to_vector<double>();
      const auto want = ref_binary(a, b, {2, 3}, [&](double x, double y) { return double(ref(op, x, y)); });
      EXPECT_EQ(got, want) << dtype_name(dt);
      std::vector<double> want_s;
      for (double x : a.to_vector<double>()) want_s.push_back(double(ref(op, x, 2.5)));
      EXPECT_EQ(ops::compare_scalar(op, a, 2.5).to_vector<double>(), want_s) << dtype_name(dt);
    }
  }
}

TEST(Elementwise, UnaryMatchesStdMath) {
  auto gelu = [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); };
  auto gelu_t = [](double x) {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  };
  const std::vector<std::pair<UnaryOp, std::function<double(double)>>> table = {
      {UnaryOp::neg, [](double x) { return -x; }},
      {UnaryOp::exp, [](double x) { return std::exp(x); }},
      {UnaryOp::log, [](double x) { return std::log(x); }},
      {UnaryOp::sqrt, [](double x) { return std::sqrt(x); }},
      {UnaryOp::rsqrt, [](double x) { return 1 / std::sqrt(x); }},
      {UnaryOp::abs, [](double x) { return std::abs(x); }},
      {UnaryOp::relu, [](double x) { return x > 0 ? x : 0; }},
      {UnaryOp::gelu, gelu},
      {UnaryOp::gelu_tanh, gelu_t},
      {UnaryOp::tanh, [](double x) { return std::tanh(x); }},
      {UnaryOp::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {UnaryOp::sign, [](double x) { return double((x > 0) - (x < 0)); }},
      {UnaryOp::square, [](double x) { return x * x; }},
      {UnaryOp::reciprocal, [](double x) { return 1 / x; }},
  };
  const bool positive_only[] = {false, false, true, true, true, false, false,
                                false, false, false, false, false, false, false};
  for (DType dt : {DType::f64, DType::f32}) {
    for (size_t k = 0; k < table.size(); ++k) {
      const auto& [op, f] = table[k];
      Tensor a = positive_only[k] ? rand_t({7, 9}, dt, 0.1, 4, 20 + k) : rand_t({7, 9}, dt, -4, 4, 20 + k);
      a = ops::transpose(a, 0, 1);  // strided input
      std::vector<double> want;
      for (double x : a.to_vector<double>()) want.push_back(f(x));
      Tensor o = ops::unary(op, a);
      EXPECT_EQ(o.dtype(), dt);
      expect_near_vec(o.to_vector<double>(), want, dt == DType::f64 ? 1e-13 : 2e-6);
    }
  }
  // sign(0) = 0, relu(0) = 0
  Tensor z = ops::zeros({2}, DType::f64);
  EXPECT_EQ(ops::unary(UnaryOp::sign, z).to_vector<double>(), (std::vector<double>{0, 0}));
}

TEST(Elementwise, WhereAndMaskedFill) {
  Tensor cond = ops::from_vector<uint8_t>({1, 0, 1}, {3});
  Tensor a = rand_t({2, 1, 3}, DType::f64, -1, 1, 30);
  Tensor b = rand_t({4, 1}, DType::f64, -1, 1, 31);
  Tensor o = ops::where(cond, a, b);
  ASSERT_EQ(o.shape(), (Shape{2, 4, 3}));
  const auto cv = cond.to_vector<double>(), av = a.to_vector<double>(), bv = b.to_vector<double>();
  const auto got = o.to_vector<double>();
  for (int64_t i = 0; i < 24; ++i) {
    const double c = at_broadcast(cv, {3}, {2, 4, 3}, i);
    const double want = c != 0 ? at_broadcast(av, a.shape(), {2, 4, 3}, i) : at_broadcast(bv, b.shape(), {2, 4, 3}, i);
    EXPECT_EQ(got[size_t(i)], want);
  }
  Tensor ia = ops::from_vector<int64_t>({1, 2, 3}, {3});
  Tensor ib = ops::from_vector<int64_t>({-1, -2, -3}, {3});
  EXPECT_EQ(ops::where(cond, ia, ib).to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));

  Tensor t = ops::transpose(rand_t({3, 2}, DType::f32, -1, 1, 32), 0, 1);  // (2,3) strided
  Tensor mask = ops::from_vector<uint8_t>({0, 1, 1}, {3});
  Tensor m = ops::masked_fill(t, mask, -1e9);
  const auto tv = t.to_vector<double>();
  const auto mv = m.to_vector<double>();
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(mv[i], i % 3 == 0 ? double(float(tv[i])) : double(float(-1e9)));
}

TEST(Elementwise, ActivationBackwardMatchesFiniteDifferences) {
  Tensor x = rand_t({40}, DType::f64, -3, 3, 40);
  Tensor g = rand_t({40}, DType::f64, -1, 1, 41);
  const double h = 1e-6;
  auto fd = [&](UnaryOp op) {
    Tensor xp = ops::binary_scalar(BinaryOp::add, x, h), xm = ops::binary_scalar(BinaryOp::add, x, -h);
    Tensor d = ops::binary_scalar(BinaryOp::mul,
                                  ops::binary(BinaryOp::sub, ops::unary(op, xp), ops::unary(op, xm)), 1 / (2 * h));
    return ops::binary(BinaryOp::mul, g, d).to_vector<double>();
  };
  expect_near_vec(ops::gelu_backward(g, x, false).to_vector<double>(), fd(UnaryOp::gelu), 1e-7);
  expect_near_vec(ops::gelu_backward(g, x, true).to_vector<double>(), fd(UnaryOp::gelu_tanh), 1e-7);
  expect_near_vec(ops::tanh_backward(g, ops::unary(UnaryOp::tanh, x)).to_vector<double>(), fd(UnaryOp::tanh), 1e-7);
  expect_near_vec(ops::sigmoid_backward(g, ops::unary(UnaryOp::sigmoid, x)).to_vector<double>(),
                  fd(UnaryOp::sigmoid), 1e-7);
  expect_near_vec(ops::relu_backward(g, ops::unary(UnaryOp::relu, x)).to_vector<double>(), fd(UnaryOp::relu), 1e-7);
  // f32 agrees with f64
  Tensor g32 = ops::to_dtype(g, DType::f32), x32 = ops::to_dtype(x, DType::f32);
  expect_near_vec(ops::gelu_backward(g32, x32, false).to_vector<double>(),
                  ops::gelu_backward(g, x, false).to_vector<double>(), 1e-5);
  EXPECT_THROW(ops::relu_backward(g, ops::zeros({41}, DType::f64)), Error);
}

TEST(Elementwise, InPlaceAddMulZero) {
  Tensor d = rand_t({64, 33}, DType::f32, -1, 1, 50);
  const auto d0 = d.to_vector<double>();
  Tensor s = rand_t({64, 33}, DType::f32, -1, 1, 51);
  const auto sv = s.to_vector<double>();
  const uint32_t v0 = d.version();
  ops::add_(d, s);
  EXPECT_GT(d.version(), v0);
  std::vector<double> want(d0.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = d0[i] + sv[i];
  expect_near_vec(d.to_vector<double>(), want, 1e-6);
  ops::add_(d, s, -0.5);
  for (size_t i = 0; i < want.size(); ++i) want[i] -= 0.5 * sv[i];
  expect_near_vec(d.to_vector<double>(), want, 1e-6);
  // broadcast src (a bias row) and a strided dst (transposed view writes through)
  Tensor base = ops::zeros({33, 64}, DType::f32);
  Tensor dt = ops::transpose(base, 0, 1);  // (64,33)
  Tensor row = rand_t({33}, DType::f32, -1, 1, 52);
  ops::add_(dt, row, 2.0);
  const auto rv = row.to_vector<double>();
  const auto bv = base.to_vector<double>();
  for (int64_t c = 0; c < 33; ++c)
    for (int64_t n = 0; n < 64; ++n) ASSERT_NEAR(bv[size_t(c * 64 + n)], 2 * rv[size_t(c)], 1e-6);
  ops::mul_(d, 3.0);
  for (auto& w : want) w *= 3;
  expect_near_vec(d.to_vector<double>(), want, 1e-6);
  ops::zero_(dt);
  for (double v : base.to_vector<double>()) ASSERT_EQ(v, 0.0);
  Tensor i = ops::from_vector<int64_t>({1, 2}, {2});
  ops::add_(i, ops::from_vector<int64_t>({5, 5}, {2}), 2.0);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{11, 12}));
}

TEST(Elementwise, FastF32MathAccuracyAndEdgeCases) {
  // dense sweep: f32 exp/tanh/gelu/sigmoid stay within a few ulp of the f64 libm values
  std::vector<float> xs;
  for (float x = -86.0f; x <= 88.0f; x += 0.01173f) xs.push_back(x);
  Tensor x = ops::from_vector<float>(xs, {int64_t(xs.size())});
  const auto e = ops::unary(UnaryOp::exp, x).to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = std::exp(double(xs[i]));
    ASSERT_NEAR(e[i], want, 3e-7 * want) << "exp(" << xs[i] << ")";
  }
  std::vector<float> small;
  for (float v = -12.0f; v <= 12.0f; v += 0.00731f) small.push_back(v);
  small.push_back(1e-5f);
  small.push_back(-3e-4f);
  Tensor s = ops::from_vector<float>(small, {int64_t(small.size())});
  const auto th = ops::unary(UnaryOp::tanh, s).to_vector<double>();
  const auto sg = ops::unary(UnaryOp::sigmoid, s).to_vector<double>();
  const auto ge = ops::unary(UnaryOp::gelu, s).to_vector<double>();
  for (size_t i = 0; i < small.size(); ++i) {
    const double v = small[i];
    ASSERT_NEAR(th[i], std::tanh(v), 1e-6 * std::abs(std::tanh(v)) + 1e-12) << "tanh(" << v << ")";
    ASSERT_NEAR(sg[i], 1 / (1 + std::exp(-v)), 1e-6 * (1 / (1 + std::exp(-v))) + 1e-12) << "sigmoid(" << v << ")";
    ASSERT_NEAR(ge[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-6) << "gelu(" << v << ")";
  }
  // log over many binades, including subnormals
  std::vector<float> pos;
  for (float v = 1e-44f; v < 1e30f; v = std::max(v * 1.0137f, std::nextafter(v, 1.0f))) pos.push_back(v);
  Tensor lp = ops::from_vector<float>(pos, {int64_t(pos.size())});
  const auto lg = ops::unary(UnaryOp::log, lp).to_vector<double>();
  for (size_t i = 0; i < pos.size(); ++i) {
    const double want = std::log(double(pos[i]));
    ASSERT_NEAR(lg[i], want, 2e-7 * std::abs(want) + 1e-7) << "log(" << pos[i] << ")";
  }
  const float inf = std::numeric_limits<float>::infinity();
  const auto le = ops::unary(UnaryOp::log, ops::from_vector<float>({0.0f, -1.0f, inf, NAN, 1.0f}, {5}))
                      .to_vector<float>();
  EXPECT_EQ(le[0], -inf);
  EXPECT_TRUE(std::isnan(le[1]));
  EXPECT_EQ(le[2], inf);
  EXPECT_TRUE(std::isnan(le[3]));
  EXPECT_EQ(le[4], 0.0f);
  Tensor edge = ops::from_vector<float>({-200.0f, 200.0f, -inf, inf, NAN, 0.0f}, {6});
  const auto ee = ops::unary(UnaryOp::exp, edge).to_vector<float>();
  EXPECT_EQ(ee[0], 0.0f);
  EXPECT_EQ(ee[1], inf);
  EXPECT_EQ(ee[2], 0.0f);
  EXPECT_EQ(ee[3], inf);
  EXPECT_TRUE(std::isnan(ee[4]));
  EXPECT_EQ(ee[5], 1.0f);
  const auto te = ops::unary(UnaryOp::tanh, edge).to_vector<float>();
  EXPECT_EQ(te[0], -1.0f);
  EXPECT_EQ(te[1], 1.0f);
  EXPECT_EQ(te[3], 1.0f);
  EXPECT_TRUE(std::isnan(te[4]));
  const auto se = ops::unary(UnaryOp::sigmoid, edge).to_vector<float>();
  EXPECT_EQ(se[0], 0.0f);
  EXPECT_EQ(se[1], 1.0f);
  EXPECT_EQ(se[5], 0.5f);
}
