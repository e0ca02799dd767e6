// Indexing / joining ops against naive loops: cat/stack along every dim with
// strided and empty pieces, index_select/index_add with repeated indices and both
// index dtypes, gather/scatter_add with an index smaller than the input, errors.
#include <gtest/gtest.h>

#include <strata/tensor/ops.h>

using namespace strata;

namespace {

Tensor rand_t(const Shape& s, DType dt = DType::f64, uint64_t seed = 1) {
  Generator g(seed);
  return ops::uniform(s, -1, 1, g, dt);
}

// Value of contiguous-order vector v (shape s) at multi-index ix.
double at(const std::vector<double>& v, const Shape& s, const std::vector<int64_t>& ix) {
  int64_t off = 0;
  for (size_t d = 0; d < s.size(); ++d) off = off * s[d] + ix[d];
  return v[size_t(off)];
}

std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> ix(s.size());
  for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
    ix[size_t(d)] = i % s[size_t(d)];
    i /= s[size_t(d)];
  }
  return ix;
}

}  // namespace

TEST(Index, CatEveryDimMatchesReference) {
  for (int64_t dim : {0, 1, 2, -1}) {
    const int64_t d = dim < 0 ? dim + 3 : dim;
    Shape s0{2, 3, 4}, s1{2, 3, 4}, s2{2, 3, 4};
    s1[size_t(d)] = 1;
    s2[size_t(d)] = 0;  // an empty piece
    Tensor a = rand_t(s0, DType::f64, 1);
    Tensor b = rand_t(s1, DType::f64, 2);
    Tensor c = ops::zeros(s2, DType::f64);
    Shape ps = s0;  // a strided (permuted) piece of shape s0
    Tensor p = ops::permute(rand_t({ps[2], ps[0], ps[1]}, DType::f64, 3), {1, 2, 0});
    Tensor o = ops::cat({a, b, c, p}, dim);
    Shape os = s0;
    os[size_t(d)] = 2 * s0[size_t(d)] + 1;
    ASSERT_EQ(o.shape(), os);
    const auto ov = o.to_vector<double>();
    const std::vector<std::pair<Tensor, int64_t>> pieces = {{a, 0}, {b, s0[size_t(d)]}, {p, s0[size_t(d)] + 1}};
    for (const auto& [t, start] : pieces) {
      const auto tv = t.to_vector<double>();
      for (int64_t i = 0; i < t.numel(); ++i) {
        auto ix = unravel(i, t.shape());
        const double want = tv[size_t(i)];
        ix[size_t(d)] += start;
        ASSERT_EQ(at(ov, os, ix), want);
      }
    }
  }
  Tensor i = ops::cat({ops::from_vector<int64_t>({1, 2}, {2}), ops::from_vector<int64_t>({3}, {1})}, 0);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
}

TEST(Index, CatAndStackErrors) {
  Tensor a = ops::zeros({2, 3});
  EXPECT_THROW(ops::cat({}, 0), Error);
  EXPECT_THROW(ops::cat({a, ops::zeros({2, 4})}, 0), Error);
  EXPECT_THROW(ops::cat({a, ops::zeros({2, 3}, DType::f64)}, 0), Error);
  EXPECT_THROW(ops::cat({a, a}, 2), Error);
  try {
    ops::cat({a, ops::zeros({3, 3})}, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[cat]"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("(3,3)"), std::string::npos);
  }
  EXPECT_THROW(ops::stack({a, ops::zeros({3, 2})}, 0), Error);
}

TEST(Index, Stack) {
  Tensor a = ops::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor b = ops::from_vector<float>({5, 6, 7, 8}, {2, 2});
  Tensor s0 = ops::stack({a, b}, 0);
  EXPECT_EQ(s0.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(s0.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  Tensor s2 = ops::stack({a, b}, -1);
  EXPECT_EQ(s2.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(s2.to_vector<float>(), (std::vector<float>{1, 5, 2, 6, 3, 7, 4, 8}));
  Tensor s1 = ops::stack({a, ops::transpose(b, 0, 1)}, 1);
  EXPECT_EQ(s1.to_vector<float>(), (std::vector<float>{1, 2, 5, 7, 3, 4, 6, 8}));
}

TEST(Index, IndexSelectAndIndexAdd) {
  Tensor t = rand_t({4, 5, 3}, DType::f64, 4);
  Tensor tp = ops::permute(rand_t({3, 4, 5}, DType::f64, 5), {1, 2, 0});  // strided (4,5,3)
  for (DType it : {DType::i64, DType::i32}) {
    for (const Tensor& x : {t, tp}) {
      for (int64_t dim : {0, 1, 2}) {
        const int64_t k = x.shape()[size_t(dim)];
        Tensor idx = ops::to_dtype(ops::from_vector<int64_t>({k - 1, 0, k - 1, 1, 1}, {5}), it);
        Tensor o = ops::index_select(x, dim, idx);
        Shape os = x.shape();
        os[size_t(dim)] = 5;
        ASSERT_EQ(o.shape(), os);
        const auto xv = x.to_vector<double>(), ov = o.to_vector<double>(), iv = idx.to_vector<double>();
        for (int64_t i = 0; i < o.numel(); ++i) {
          auto ix = unravel(i, os);
          ix[size_t(dim)] = int64_t(iv[size_t(ix[size_t(dim)])]);
          ASSERT_EQ(ov[size_t(i)], at(xv, x.shape(), ix));
        }
        // index_add scatters it back: repeated indices accumulate
        Tensor back = ops::index_add(x.shape(), dim, idx, o);
        const auto bv = back.to_vector<double>();
        std::vector<double> want(size_t(x.numel()), 0.0);
        for (int64_t i = 0; i < o.numel(); ++i) {
          auto ix = unravel(i, os);
          ix[size_t(dim)] = int64_t(iv[size_t(ix[size_t(dim)])]);
          int64_t off = 0;
          for (size_t dd = 0; dd < 3; ++dd) off = off * x.shape()[dd] + ix[dd];
          want[size_t(off)] += ov[size_t(i)];
        }
        for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(bv[i], want[i], 1e-14);
      }
    }
  }
  // integer payloads, empty index
  Tensor e = ops::from_vector<int64_t>({10, 11, 12, 13}, {2, 2});
  EXPECT_EQ(ops::index_select(e, 1, ops::from_vector<int64_t>({1}, {1})).to_vector<int64_t>(),
            (std::vector<int64_t>{11, 13}));
  EXPECT_EQ(ops::index_select(e, 0, ops::zeros({0}, DType::i64)).shape(), (Shape{0, 2}));
}

TEST(Index, IndexErrors) {
  Tensor t = ops::zeros({3, 4});
  EXPECT_THROW(ops::index_select(t, 0, ops::from_vector<int64_t>({3}, {1})), Error);
  EXPECT_THROW(ops::index_select(t, 0, ops::from_vector<int64_t>({-1}, {1})), Error);
  EXPECT_THROW(ops::index_select(t, 0, ops::from_vector<float>({0}, {1})), Error);
  EXPECT_THROW(ops::index_select(t, 0, ops::zeros({1, 1}, DType::i64)), Error);
  EXPECT_THROW(ops::index_add({3, 4}, 0, ops::from_vector<int64_t>({0}, {1}), ops::zeros({2, 4})), Error);
  EXPECT_THROW(ops::gather(t, 1, ops::from_vector<int64_t>({4}, {1, 1})), Error);
  EXPECT_THROW(ops::gather(t, 1, ops::zeros({4, 1}, DType::i64)), Error);  // bigger than t in dim 0
  EXPECT_THROW(ops::gather(t, 1, ops::zeros({3}, DType::i64)), Error);     // rank
  try {
    ops::index_select(t, 1, ops::from_vector<int64_t>({9}, {1}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 9"), std::string::npos) << e.what();
  }
}

TEST(Index, GatherAndScatterAdd) {
  Generator g(7);
  Tensor t = rand_t({4, 6, 5}, DType::f64, 6);
  Tensor tt = ops::transpose(rand_t({4, 5, 6}, DType::f64, 8), 1, 2);  // (4,6,5) strided
  for (const Tensor& x : {t, tt}) {
    for (int64_t dim : {0, 1, 2}) {
      Shape is{3, 4, 2};  // smaller than x in the other dims
      is[size_t(dim)] = 7;
      Tensor idx = ops::to_dtype(ops::uniform(is, 0, double(x.shape()[size_t(dim)]) - 1e-9, g, DType::f64), DType::i64);
      Tensor o = ops::gather(x, dim, idx);
      ASSERT_EQ(o.shape(), is);
      const auto xv = x.to_vector<double>(), ov = o.to_vector<double>();
      const auto iv = idx.to_vector<int64_t>();
      std::vector<double> scat(size_t(x.numel()), 0.0);
      for (int64_t i = 0; i < idx.numel(); ++i) {
        auto ix = unravel(i, is);
        ix[size_t(dim)] = iv[size_t(i)];
        ASSERT_EQ(ov[size_t(i)], at(xv, x.shape(), ix));
        int64_t off = 0;
        for (size_t dd = 0; dd < 3; ++dd) off = off * x.shape()[dd] + ix[dd];
        scat[size_t(off)] += ov[size_t(i)];
      }
      Tensor s = ops::scatter_add(x.shape(), dim, idx, o);
      const auto sv = s.to_vector<double>();
      for (size_t i = 0; i < scat.size(); ++i) ASSERT_NEAR(sv[i], scat[i], 1e-14);
    }
  }
  // the cross-entropy pattern: pick one column per row, i32 index, f32 values
  Tensor logits = ops::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor tgt = ops::from_vector<int32_t>({2, 0}, {2, 1});
  EXPECT_EQ(ops::gather(logits, 1, tgt).to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(ops::scatter_add({2, 3}, 1, tgt, ops::from_vector<float>({1, 1}, {2, 1})).to_vector<float>(),
            (std::vector<float>{0, 0, 1, 1, 0, 0}));
  Tensor ints = ops::from_vector<int64_t>({5, 6, 7}, {3});
  EXPECT_EQ(ops::gather(ints, 0, ops::from_vector<int64_t>({2, 2, 0}, {3})).to_vector<int64_t>(),
            (std::vector<int64_t>{7, 7, 5}));
}
