#include <gtest/gtest.h>

#include <strata/tensor/ops.h>

using namespace strata;

TEST(Views, TransposeSharesStorageAndReadsStrided) {
  Tensor a = ops::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = ops::transpose(a, 0, 1);
  EXPECT_TRUE(t.shares_storage(a));
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Views, ReshapeViewsWhenPossibleAndCopiesOtherwise) {
  Tensor a = ops::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(ops::reshape(a, {3, 2}).shares_storage(a));
  EXPECT_TRUE(ops::view(a, {-1}).shares_storage(a));
  Tensor t = ops::transpose(a, 0, 1);
  EXPECT_THROW(ops::view(t, {6}), Error);
  Tensor r = ops::reshape(t, {6});
  EXPECT_FALSE(r.shares_storage(a));
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Views, NarrowSliceSelectExpand) {
  Tensor a = ops::from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  EXPECT_EQ(ops::narrow(a, 1, 1, 2).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(ops::slice(a, 1, 0, 4, 2).to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(ops::select(a, 0, -1).to_vector<int64_t>(), (std::vector<int64_t>{8, 9, 10, 11}));
  Tensor e = ops::expand(ops::from_vector<int64_t>({7, 8}, {2, 1}), {2, 3});
  EXPECT_EQ(e.strides()[1], 0);
  EXPECT_EQ(e.to_vector<int64_t>(), (std::vector<int64_t>{7, 7, 7, 8, 8, 8}));
  EXPECT_EQ(ops::unsqueeze(a, 0).shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(ops::squeeze(ops::unsqueeze(a, 2), 2).shape(), (Shape{3, 4}));
  auto parts = ops::chunk(a, 2, 1);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 6, 7, 10, 11}));
}

TEST(Views, ErrorsNameTheOp) {
  Tensor a = ops::zeros({2, 3});
  try {
    ops::narrow(a, 1, 2, 5);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[narrow]"), std::string::npos);
  }
}

TEST(Matmul, MatchesNaiveIncludingTransposedAndBatched) {
  Generator g(7);
  for (auto [n, k, m] : {std::tuple{3, 5, 4}, {1, 7, 1}, {17, 33, 9}}) {
    Tensor a = ops::normal({n, k}, 0, 1, g, DType::f64);
    Tensor bt = ops::normal({m, k}, 0, 1, g, DType::f64);
    Tensor b = ops::transpose(bt, 0, 1);  // strided view: goes to BLAS as a transpose
    Tensor c = ops::matmul(a, b);
    auto av = a.to_vector<double>(), bv = b.to_vector<double>(), cv = c.to_vector<double>();
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < m; ++j) {
        double s = 0;
        for (int p = 0; p < k; ++p) s += av[i * k + p] * bv[p * m + j];
        EXPECT_NEAR(cv[i * m + j], s, 1e-12);
      }
  }
  Tensor a = ops::normal({2, 3, 4, 5}, 0, 1, g, DType::f64);
  Tensor b = ops::normal({3, 5, 2}, 0, 1, g, DType::f64);  // batch broadcast
  Tensor c = ops::matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3, 4, 2}));
  Tensor ref = ops::matmul(ops::contiguous(ops::select(ops::select(a, 0, 1), 0, 2)), ops::select(b, 0, 2));
  auto cs = ops::select(ops::select(c, 0, 1), 0, 2).to_vector<double>();
  auto rs = ref.to_vector<double>();
  for (size_t i = 0; i < rs.size(); ++i) EXPECT_NEAR(cs[i], rs[i], 1e-12);
}

TEST(Random, CounterBasedAndIndependentOfThreads) {
  Generator g1(42), g2(42);
  Tensor a = ops::normal({1000}, 0, 1, g1);
  Tensor b = ops::normal({1000}, 0, 1, g2);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(g1.offset(), 250u);
  auto v = a.to_vector<float>();
  double mean = 0;
  for (float x : v) mean += x;
  EXPECT_NEAR(mean / 1000, 0.0, 0.1);
}

TEST(Dtype, HalfAndBf16RoundTrip) {
  Tensor a = ops::from_vector<float>({1.0f, -2.5f, 0.1f, 65504.f, 1e-6f}, {5});
  auto h = ops::to_dtype(ops::to_dtype(a, DType::f16), DType::f32).to_vector<float>();
  EXPECT_FLOAT_EQ(h[0], 1.0f);
  EXPECT_FLOAT_EQ(h[1], -2.5f);
  EXPECT_NEAR(h[2], 0.1f, 1e-4);
  EXPECT_FLOAT_EQ(h[3], 65504.f);
  auto b = ops::to_dtype(ops::to_dtype(a, DType::bf16), DType::f32).to_vector<float>();
  EXPECT_FLOAT_EQ(b[1], -2.5f);
  EXPECT_NEAR(b[2], 0.1f, 1e-3);
}
