// Synthetic datasets: the documented Philox streams, order independence, and that
// the labels really are argmax of the fixed linear map (so the task is learnable).
#include <gtest/gtest.h>

#include <cmath>

#include <strata/core/rng.h>
#include <strata/data/synthetic.h>

using namespace strata;
using namespace strata::data;

TEST(Synthetic, ClassificationFollowsDocumentedStreamAndLabels) {
  SyntheticClassification ds({.size = 500, .sample_shape = {13}, .num_classes = 5, .seed = 77});
  std::vector<int64_t> idx(500);
  for (int64_t i = 0; i < 500; ++i) idx[size_t(i)] = (i * 37) % 500;  // shuffled order
  Batch b = ds.get_batch(idx);
  ASSERT_EQ(b.input.shape(), (Shape{500, 13}));
  ASSERT_EQ(b.target.shape(), (Shape{500}));
  const float* x = b.input.data<float>();
  const int64_t* y = b.target.data<int64_t>();
  const Generator g(77);
  std::vector<int64_t> per_class(5, 0);
  for (int64_t k = 0; k < 500; ++k) {
    const int64_t i = idx[size_t(k)];
    for (int64_t j = 0; j < 13; ++j) ASSERT_EQ(x[k * 13 + j], g.normal(0, uint64_t(i * 13 + j))) << i << "," << j;
    // Reference labels in double with the map drawn element by element.
    double best = -1e300, second = -1e300;
    int64_t arg = -1;
    for (int64_t c = 0; c < 5; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < 13; ++j)
        acc += double(g.normal(SyntheticClassification::kWeightBase, uint64_t(c * 13 + j))) * x[k * 13 + j];
      if (acc > best) second = best, best = acc, arg = c;
      else if (acc > second) second = acc;
    }
    if (best - second > 1e-4) {
      EXPECT_EQ(y[k], arg) << "sample " << i;
    }
    ++per_class[size_t(y[k])];
  }
  for (int64_t c : per_class) EXPECT_GT(c, 40);  // every class occurs (~100 each)
}

TEST(Synthetic, SampleIsIndependentOfBatchAndOrder) {
  SyntheticClassification ds({.size = 64, .sample_shape = {3, 5, 7}, .num_classes = 4, .seed = 1});
  Batch a = ds.get_batch({9, 3, 63});
  Batch b = ds.get_batch({63});
  Batch c = ds.get_batch({3, 3});
  EXPECT_EQ(a.input.shape(), (Shape{3, 3, 5, 7}));
  auto av = a.input.to_vector<float>(), bv = b.input.to_vector<float>(), cv = c.input.to_vector<float>();
  EXPECT_TRUE(std::equal(bv.begin(), bv.end(), av.begin() + 2 * 105));
  EXPECT_TRUE(std::equal(cv.begin(), cv.begin() + 105, av.begin() + 105));
  EXPECT_TRUE(std::equal(cv.begin(), cv.begin() + 105, cv.begin() + 105));
  EXPECT_EQ(a.target.to_vector<int64_t>()[2], b.target.to_vector<int64_t>()[0]);
  // A different seed gives different data; the same seed the same.
  SyntheticClassification other({.size = 64, .sample_shape = {3, 5, 7}, .num_classes = 4, .seed = 2});
  EXPECT_NE(other.get_batch({63}).input.to_vector<float>(), bv);
  SyntheticClassification same({.size = 64, .sample_shape = {3, 5, 7}, .num_classes = 4, .seed = 1});
  EXPECT_EQ(same.get_batch({63}).input.to_vector<float>(), bv);
  EXPECT_THROW(ds.get_batch({64}), Error);
  EXPECT_THROW(ds.get_batch({-1}), Error);
}

TEST(Synthetic, InputsAreStandardNormal) {
  SyntheticClassification ds({.size = 2000, .sample_shape = {50}, .num_classes = 3, .seed = 5});
  std::vector<int64_t> idx(2000);
  for (int64_t i = 0; i < 2000; ++i) idx[size_t(i)] = i;
  auto x = ds.get_batch(idx).input.to_vector<float>();
  double s = 0, sq = 0;
  for (float v : x) s += v, sq += double(v) * v;
  const double n = double(x.size()), mean = s / n;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(sq / n - mean * mean, 1.0, 0.02);
}

TEST(Synthetic, TokensShiftedAndFollowSuccessor) {
  SyntheticTokens ds({.size = 300, .block_size = 17, .vocab_size = 11, .noise = 0.2, .seed = 3});
  std::vector<int64_t> idx(300);
  for (int64_t i = 0; i < 300; ++i) idx[size_t(i)] = 299 - i;
  Batch b = ds.get_batch(idx);
  ASSERT_EQ(b.input.shape(), (Shape{300, 17}));
  ASSERT_EQ(b.target.shape(), (Shape{300, 17}));
  auto x = b.input.to_vector<int64_t>(), y = b.target.to_vector<int64_t>();
  const auto& succ = ds.successor();
  int64_t follows = 0, pairs = 0;
  for (int64_t k = 0; k < 300; ++k) {
    for (int64_t t = 0; t < 17; ++t) {
      const int64_t xi = x[size_t(k * 17 + t)], yi = y[size_t(k * 17 + t)];
      ASSERT_GE(xi, 0);
      ASSERT_LT(xi, 11);
      if (t + 1 < 17) {
        EXPECT_EQ(yi, x[size_t(k * 17 + t + 1)]);
      }
      follows += (yi == succ[size_t(xi)]);
      ++pairs;
    }
  }
  // P(follow) = (1 - noise) + noise / V = 0.8 + 0.2/11.
  EXPECT_NEAR(double(follows) / double(pairs), 0.8 + 0.2 / 11.0, 0.03);
  // Row k of a batch equals the single-sample batch.
  Batch one = ds.get_batch({299});
  auto ov = one.input.to_vector<int64_t>();
  EXPECT_TRUE(std::equal(ov.begin(), ov.end(), x.begin()));
}
