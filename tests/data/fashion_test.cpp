// The real Fashion-MNIST files of the Debian package `dataset-fashion-mnist`.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include <strata/data/fashion_mnist.h>

using namespace strata;
using namespace strata::data;

namespace {

bool have_data() {
  return std::filesystem::exists(FashionMnist::images_path(Split::train, kFashionMnistDir)) &&
         std::filesystem::exists(FashionMnist::images_path(Split::test, kFashionMnistDir));
}

const FashionMnist& train_set() {
  static const FashionMnist ds(Split::train);
  return ds;
}

}  // namespace

#define REQUIRE_FASHION_MNIST()                                                                       \
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"

TEST(FashionMnist, TrainSplitShapesAndLabels) {
  REQUIRE_FASHION_MNIST();
  const FashionMnist& ds = train_set();
  ASSERT_EQ(ds.size(), 60000);
  ASSERT_EQ(ds.pixels().size(), size_t(60000 * 784));
  // The published split is balanced: 6000 images per class.
  std::vector<int64_t> per_class(10, 0);
  for (uint8_t l : ds.labels()) ++per_class[l];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[size_t(c)], 6000) << "class " << c;

  Batch b = ds.get_batch({0, 59999, 123});
  EXPECT_EQ(b.input.shape(), (Shape{3, 1, 28, 28}));
  EXPECT_EQ(b.input.dtype(), DType::f32);
  EXPECT_EQ(b.target.shape(), (Shape{3}));
  EXPECT_EQ(b.target.dtype(), DType::i64);
  // Values follow (x/255 - mean)/std of the stored u8 pixels.
  const float* x = b.input.data<float>();
  const int64_t rows[3] = {0, 59999, 123};
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(b.target.data<int64_t>()[k], ds.labels()[size_t(rows[k])]);
    for (int p = 0; p < 784; p += 37) {
      const double want = (ds.pixels()[size_t(rows[k] * 784 + p)] / 255.0 - 0.2860) / 0.3530;
      EXPECT_NEAR(x[k * 784 + p], want, 1e-5);
    }
  }
}

TEST(FashionMnist, NormalisedTrainSetHasMeanZeroStdOne) {
  REQUIRE_FASHION_MNIST();
  const FashionMnist& ds = train_set();
  double sum = 0.0, sq = 0.0;
  int64_t n = 0;
  for (int64_t start = 0; start < ds.size(); start += 10000) {
    std::vector<int64_t> idx(10000);
    std::iota(idx.begin(), idx.end(), start);
    Batch b = ds.get_batch(idx);
    const float* x = b.input.data<float>();
    for (int64_t i = 0; i < b.input.numel(); ++i) {
      sum += x[i];
      sq += double(x[i]) * x[i];
    }
    n += b.input.numel();
  }
  const double mean = sum / double(n), var = sq / double(n) - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(var), 1.0, 0.01);
}

TEST(FashionMnist, TestSplit) {
  REQUIRE_FASHION_MNIST();
  FashionMnist ds(Split::test);
  ASSERT_EQ(ds.size(), 10000);
  std::vector<int64_t> per_class(10, 0);
  for (uint8_t l : ds.labels()) ++per_class[l];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[size_t(c)], 1000) << "class " << c;
  Batch b = ds.get_batch({9999});
  EXPECT_EQ(b.input.shape(), (Shape{1, 1, 28, 28}));
  EXPECT_GE(b.target.item<int64_t>(), 0);
  EXPECT_LT(b.target.item<int64_t>(), 10);
  // Train and test images differ (the split is not the same file read twice).
  EXPECT_NE(std::vector<uint8_t>(ds.pixels().begin(), ds.pixels().begin() + 784),
            std::vector<uint8_t>(train_set().pixels().begin(), train_set().pixels().begin() + 784));
}
