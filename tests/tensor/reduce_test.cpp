// Reductions against naive loops: every dim subset of a 3-d tensor, keepdim,
// strided inputs, the column/row fast paths at sizes that go threaded, f32
// accumulation accuracy, amax/argmax ties and NaN, sum_to_shape and errors.
#include <gtest/gtest.h>

#include <cmath>

#include <strata/tensor/cpu/simd_level.h>
#include <strata/tensor/ops.h>

#include "tests/simd_levels.h"

using namespace strata;

namespace {

Tensor rand_t(const Shape& s, DType dt = DType::f64, uint64_t seed = 1) {
  Generator g(seed);
  return ops::uniform(s, -1, 1, g, dt);
}

// Naive sum of a row-major tensor (values v, shape s) over the dims flagged in red.
std::vector<double> ref_sum(const std::vector<double>& v, const Shape& s, const std::vector<bool>& red, Shape* kept) {
  Shape ks = s;
  for (size_t d = 0; d < s.size(); ++d)
    if (red[d]) ks[d] = 1;
  std::vector<double> out(size_t(shape_numel(ks)), 0.0);
  const int64_t n = shape_numel(s);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, o = 0, stride = 1;
    for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
      const int64_t idx = rem % s[size_t(d)];
      rem /= s[size_t(d)];
      o += (red[size_t(d)] ? 0 : idx) * stride;
      stride *= ks[size_t(d)];
    }
    out[size_t(o)] += v[size_t(i)];
  }
  if (kept) *kept = ks;
  return out;
}

void expect_near_vec(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "at " << i;
}

}  // namespace

TEST(Reduce, SumEveryDimSubsetMatchesReference) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor t = rand_t({3, 4, 5}, dt, 2);
    Tensor tp = ops::permute(rand_t({5, 3, 4}, dt, 3), {1, 2, 0});  // (3,4,5) strided
    for (const Tensor& x : {t, tp}) {
      const auto v = x.to_vector<double>();
      for (int mask = 0; mask < 8; ++mask) {
        std::vector<int64_t> dims;
        std::vector<bool> red(3, false);
        for (int d = 0; d < 3; ++d)
          if (mask & (1 << d)) {
            dims.push_back(d - 3);  // negative dims
            red[size_t(d)] = true;
          }
        if (dims.empty()) red.assign(3, true);  // {} = all dims
        Shape ks;
        const auto want = ref_sum(v, x.shape(), red, &ks);
        const double tol = dt == DType::f64 ? 1e-13 : 1e-6;
        Tensor k = ops::sum(x, dims, true);
        EXPECT_EQ(k.shape(), ks);
        expect_near_vec(k.to_vector<double>(), want, tol);
        Tensor nk = ops::sum(x, dims, false);
        Shape drop;
        for (size_t d = 0; d < 3; ++d)
          if (!red[d]) drop.push_back(x.shape()[d]);
        EXPECT_EQ(nk.shape(), drop);
        expect_near_vec(nk.to_vector<double>(), want, tol);
        std::vector<double> wm = want;
        int64_t count = 1;
        for (size_t d = 0; d < 3; ++d)
          if (red[d]) count *= x.shape()[d];
        for (auto& w : wm) w /= double(count);
        expect_near_vec(ops::mean(x, dims, false).to_vector<double>(), wm, tol);
      }
    }
  }
}

TEST(Reduce, FastPathsAtThreadedSizes) {
  // (R,C)->(C) columns, (M,K)->(M) rows, (A,R,C)->(A,C) batched columns, all elements
  Tensor x = rand_t({700, 300}, DType::f32, 4);
  const auto v = x.to_vector<double>();
  expect_near_vec(ops::sum(x, {0}).to_vector<double>(), ref_sum(v, x.shape(), {true, false}, nullptr), 1e-5);
  expect_near_vec(ops::sum(x, {1}).to_vector<double>(), ref_sum(v, x.shape(), {false, true}, nullptr), 1e-5);
  expect_near_vec(ops::sum(x).to_vector<double>(), ref_sum(v, x.shape(), {true, true}, nullptr), 1e-5);
  Tensor y = rand_t({3, 200, 517}, DType::f64, 5);
  const auto yv = y.to_vector<double>();
  expect_near_vec(ops::sum(y, {1}).to_vector<double>(), ref_sum(yv, y.shape(), {false, true, false}, nullptr),
                  1e-12);
  expect_near_vec(ops::sum(y, {0, 2}).to_vector<double>(), ref_sum(yv, y.shape(), {true, false, true}, nullptr),
                  1e-12);
}

// Column sums (bias gradients) keep one f64 accumulator per column, added in row order
// within blocks of 512 rows, the blocks' partials then added in order: at every SIMD level
// the result is that serial order's, bit for bit, however the columns are strided through
// registers (widths below, at and past a 64-column strip, and a 256-column block's edge).
TEST(Reduce, ColumnSumsAreTheSerialOrderBitForBitAtEveryLevel) {
  strata::testing::SimdLevelGuard guard;
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{3, 5}, {700, 64}, {1100, 300}, {40, 384}}) {
    Generator g(uint64_t(rows * cols));
    const Tensor x = ops::uniform({rows, cols}, -1, 1, g, DType::f32);
    const auto v = x.to_vector<float>();
    std::vector<float> want(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) {
      double total = 0;
      for (int64_t r0 = 0; r0 < rows; r0 += 512) {
        double block = 0;
        for (int64_t r = r0; r < std::min(rows, r0 + 512); ++r) block += double(v[size_t(r * cols + c)]);
        total = rows > 512 ? total + block : block;
      }
      want[size_t(c)] = float(total);
    }
    for (cpu::SimdLevel lvl : strata::testing::runnable_simd_levels()) {
      cpu::set_simd_level(lvl);
      const auto got = ops::sum(x, {0}).to_vector<float>();
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(got[size_t(c)], want[size_t(c)]) << rows << "x" << cols << " column " << c << " at "
                                                   << cpu::simd_level_name(lvl);
    }
  }
}

TEST(Reduce, F32SumAccumulatesWide) {
  // 2^22 copies of 0.1f: a float accumulator drifts by ~10%, a wide one is exact to float
  const int64_t n = int64_t(1) << 22;
  Tensor t = ops::full({n}, 0.1, DType::f32);
  const double want = double(n) * double(0.1f);
  EXPECT_NEAR(ops::sum(t).item<double>(), want, want * 1e-6);
  Tensor cols = ops::full({n / 4, 4}, 0.1, DType::f32);
  for (double c : ops::sum(cols, {0}).to_vector<double>()) EXPECT_NEAR(c, want / 4, want * 1e-6);
  EXPECT_NEAR(ops::mean(t).item<double>(), double(0.1f), 1e-7);
}

TEST(Reduce, EmptyAndScalar) {
  Tensor e = ops::zeros({0, 3}, DType::f32);
  EXPECT_EQ(ops::sum(e).item<double>(), 0.0);
  EXPECT_EQ(ops::sum(e, {0}).to_vector<double>(), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(ops::sum(e, {1}).shape(), (Shape{0}));
  EXPECT_TRUE(std::isnan(ops::mean(e).item<double>()));
  Tensor s = ops::full({}, 2.5, DType::f64);
  EXPECT_EQ(ops::sum(s).item<double>(), 2.5);
  EXPECT_EQ(ops::sum(s).dim(), 0);
}

TEST(Reduce, DimErrors) {
  Tensor t = ops::zeros({2, 3}, DType::f32);
  EXPECT_THROW(ops::sum(t, {2}), Error);
  EXPECT_THROW(ops::sum(t, {1, -1}), Error);
  EXPECT_THROW(ops::amax(t, -3), Error);
  EXPECT_THROW(ops::amax(ops::zeros({2, 0}), 1), Error);
  EXPECT_THROW(ops::sum(ops::zeros({2}, DType::i64)), Error);
}

TEST(Reduce, AmaxArgmaxTiesAndNaN) {
  Tensor t = ops::from_vector<double>({1, 5, 5, 2,   //
                                       7, 0, 7, 7,   //
                                       -1, -3, -2, -1},
                                      {3, 4});
  EXPECT_EQ(ops::amax(t, 1).to_vector<double>(), (std::vector<double>{5, 7, -1}));
  EXPECT_EQ(ops::argmax(t, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0}));  // first on ties
  EXPECT_EQ(ops::amax(t, 0).to_vector<double>(), (std::vector<double>{7, 5, 7, 7}));
  EXPECT_EQ(ops::argmax(t, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1, 1}));
  EXPECT_EQ(ops::argmax(t, 0, true).shape(), (Shape{1, 4}));
  EXPECT_EQ(ops::argmax(t, 1).dtype(), DType::i64);
  // strided input and integers
  Tensor tt = ops::transpose(t, 0, 1);
  EXPECT_EQ(ops::argmax(tt, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
  Tensor i = ops::from_vector<int32_t>({3, 9, 9, -4}, {2, 2});
  EXPECT_EQ(ops::amax(i, 1).to_vector<int32_t>(), (std::vector<int32_t>{9, 9}));
  EXPECT_EQ(ops::argmax(i, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  Tensor n = ops::from_vector<float>({1, NAN, 3}, {3});
  EXPECT_TRUE(std::isnan(ops::amax(n, 0).item<double>()));
  EXPECT_EQ(ops::argmax(n, 0).item<int64_t>(), 1);
}

TEST(Reduce, AmaxMatchesReferenceMiddleDim) {
  Tensor x = rand_t({6, 50, 33}, DType::f32, 9);
  const auto v = x.to_vector<double>();
  const auto mx = ops::amax(x, 1).to_vector<double>();
  const auto am = ops::argmax(x, 1).to_vector<int64_t>();
  for (int64_t a = 0; a < 6; ++a)
    for (int64_t c = 0; c < 33; ++c) {
      double best = -1e300;
      int64_t arg = -1;
      for (int64_t k = 0; k < 50; ++k) {
        const double val = v[size_t((a * 50 + k) * 33 + c)];
        if (val > best) {
          best = val;
          arg = k;
        }
      }
      ASSERT_EQ(mx[size_t(a * 33 + c)], best);
      ASSERT_EQ(am[size_t(a * 33 + c)], arg);
    }
}

TEST(Reduce, SumToShape) {
  Tensor g = rand_t({8, 6, 5}, DType::f64, 10);
  const auto v = g.to_vector<double>();
  Tensor c = ops::sum_to_shape(g, {5});
  EXPECT_EQ(c.shape(), (Shape{5}));
  expect_near_vec(c.to_vector<double>(), ref_sum(v, g.shape(), {true, true, false}, nullptr), 1e-13);
  Tensor c1 = ops::sum_to_shape(g, {1, 5});
  EXPECT_EQ(c1.shape(), (Shape{1, 5}));
  expect_near_vec(c1.to_vector<double>(), c.to_vector<double>(), 1e-15);
  Tensor m = ops::sum_to_shape(g, {6, 1});
  EXPECT_EQ(m.shape(), (Shape{6, 1}));
  expect_near_vec(m.to_vector<double>(), ref_sum(v, g.shape(), {true, false, true}, nullptr), 1e-13);
  Tensor k = ops::sum_to_shape(g, {8, 1, 5});
  expect_near_vec(k.to_vector<double>(), ref_sum(v, g.shape(), {false, true, false}, nullptr), 1e-13);
  EXPECT_TRUE(ops::sum_to_shape(g, g.shape()).shares_storage(g));
  // an expanded gradient (stride 0) sums correctly too
  Tensor e = ops::expand(ops::from_vector<double>({1, 2, 3}, {3, 1}), {3, 4});
  EXPECT_EQ(ops::sum_to_shape(e, {3, 1}).to_vector<double>(), (std::vector<double>{4, 8, 12}));
  EXPECT_EQ(ops::sum_to_shape(e, {4}).to_vector<double>(), (std::vector<double>{6, 6, 6, 6}));
  // (N,C)->(C) in f32 at a bias-gradient size
  Tensor b = rand_t({4096, 128}, DType::f32, 11);
  expect_near_vec(ops::sum_to_shape(b, {128}).to_vector<double>(),
                  ref_sum(b.to_vector<double>(), b.shape(), {true, false}, nullptr), 1e-5);
  EXPECT_THROW(ops::sum_to_shape(g, {4}), Error);
  EXPECT_THROW(ops::sum_to_shape(ops::zeros({3}), {2, 3}), Error);
}

TEST(Reduce, SumSquares) {
  Tensor t = rand_t({1000, 37}, DType::f32, 12);
  double want = 0;
  for (double x : t.to_vector<double>()) want += x * x;
  EXPECT_NEAR(ops::sum_squares(t), want, want * 1e-9);
  EXPECT_NEAR(ops::sum_squares(ops::transpose(t, 0, 1)), want, want * 1e-9);
  EXPECT_EQ(ops::sum_squares(ops::zeros({0})), 0.0);
}
