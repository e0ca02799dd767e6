// plan_buckets: layout in reverse registration order, caps, the smaller first bucket,
// parameters cut by a bucket boundary, dtype groups; checked by hand and by invariants.
#include <gtest/gtest.h>

#include <tuple>

#include <strata/core/error.h>
#include <strata/core/rng.h>
#include <strata/parallel/data/bucket_plan.h>

namespace strata::parallel {
namespace {

TEST(BucketPlan, HandComputedLayout) {
  // params (registration order) of 10, 3, 7 floats; cap 4 floats, first 2, last 3.
  BucketPlan p = plan_buckets({{10, DType::f32}, {3, DType::f32}, {7, DType::f32}}, 16, 8, 12);
  ASSERT_EQ(p.buffer_numel, std::vector<int64_t>{20});
  EXPECT_EQ(p.slots[2].offset, 0);  // last registered first
  EXPECT_EQ(p.slots[1].offset, 7);
  EXPECT_EQ(p.slots[0].offset, 10);
  // first [0,2), last [17,20), the 15 floats between in ceil(15/4) = 4 near-equal pieces.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (auto& b : p.buckets) ranges.emplace_back(b.begin, b.end);
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 2}, {2, 5}, {5, 9}, {9, 13}, {13, 17}, {17, 20}};
  EXPECT_EQ(ranges, want);
  EXPECT_EQ(p.buckets[2].params, (std::vector<int>{2, 1}));  // the 7-float tail and the 3-float head
  EXPECT_EQ(p.buckets[3].params, (std::vector<int>{1, 0}));
  EXPECT_EQ(p.param_buckets[2], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(p.param_buckets[1], (std::vector<int>{2, 3}));
  EXPECT_EQ(p.param_buckets[0], (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(p.total_bytes(), 80);
}

TEST(BucketPlan, DefaultCapsKeepSmallModelsInOneBucket) {
  BucketPlan p = plan_buckets({{1000, DType::f32}, {10, DType::f32}}, mib_to_bytes(25), mib_to_bytes(1),
                              mib_to_bytes(1));
  ASSERT_EQ(p.buckets.size(), 1u);
  EXPECT_EQ(p.buckets[0].numel(), 1010);
  EXPECT_EQ(mib_to_bytes(25), 25 * 1024 * 1024);
}

TEST(BucketPlan, SmallFirstAndLastBucketsEqualMiddle) {
  // 10 MiB of f32, cap 4 MiB, first 1 MiB, last 0.5 MiB: 1 + 3 x 2.83 + 0.5.
  const int64_t n = 10 * 1024 * 1024 / 4;
  BucketPlan p = plan_buckets({{n / 2, DType::f32}, {n / 2, DType::f32}}, mib_to_bytes(4), mib_to_bytes(1),
                              mib_to_bytes(0.5));
  ASSERT_EQ(p.buckets.size(), 5u);
  EXPECT_EQ(p.buckets[0].numel() * 4, 1 << 20);
  EXPECT_EQ(p.buckets[4].numel() * 4, 1 << 19);
  const int64_t middle = n - (1 << 18) - (1 << 17);
  for (int b = 1; b <= 3; ++b) {
    EXPECT_LE(p.buckets[size_t(b)].numel() * 4, 4 << 20);
    EXPECT_LE(std::abs(p.buckets[size_t(b)].numel() - middle / 3), 1);
  }
}

TEST(BucketPlan, DtypeGroupsAndEmptyParams) {
  BucketPlan p = plan_buckets({{4, DType::f64}, {0, DType::f32}, {6, DType::f32}, {2, DType::f64}}, 16, 16, 16);
  ASSERT_EQ(p.buffer_dtypes.size(), 2u);
  EXPECT_EQ(p.buffer_dtypes[0], DType::f64);  // first seen walking backwards (param 3)
  EXPECT_EQ(p.buffer_dtypes[1], DType::f32);
  EXPECT_EQ(p.buffer_numel, (std::vector<int64_t>{6, 6}));
  EXPECT_TRUE(p.param_buckets[1].empty());
  EXPECT_EQ(p.slots[1].numel, 0);
  EXPECT_EQ(p.slots[3].buffer, 0);
  EXPECT_EQ(p.slots[3].offset, 0);
  EXPECT_EQ(p.slots[0].buffer, 0);
  EXPECT_EQ(p.slots[0].offset, 2);
  EXPECT_EQ(p.slots[2].buffer, 1);
  // Launch order follows the layout position of each bucket's first parameter: f64 [0,2)
  // (param 3), f32 [0,4) [4,6) (param 2), f64 [2,4) [4,6) (param 0); 16-byte caps hold 2
  // doubles or 4 floats.
  ASSERT_EQ(p.buckets.size(), 5u);
  const std::vector<std::tuple<int, int64_t, int64_t>> want = {{0, 0, 2}, {1, 0, 4}, {1, 4, 6}, {0, 2, 4}, {0, 4, 6}};
  for (size_t b = 0; b < want.size(); ++b)
    EXPECT_EQ(std::make_tuple(p.buckets[b].buffer, p.buckets[b].begin, p.buckets[b].end), want[b]) << "bucket " << b;
}

TEST(BucketPlan, TinyCapIsOneElement) {
  BucketPlan p = plan_buckets({{3, DType::f64}}, 1, 1, 1);
  EXPECT_EQ(p.buckets.size(), 3u);
}

TEST(BucketPlan, RejectsBadCaps) {
  EXPECT_THROW(plan_buckets({{3, DType::f32}}, 0, 4, 4), Error);
  EXPECT_THROW(plan_buckets({{3, DType::f32}}, 4, 4, 0), Error);
  EXPECT_THROW(mib_to_bytes(-1.0), Error);
}

TEST(BucketPlan, RandomLayoutsCoverEveryElementOnce) {
  Generator g(5);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BucketParam> ps;
    const int np = 1 + int(g.next_below(12));
    for (int i = 0; i < np; ++i)
      ps.push_back({int64_t(g.next_below(40)), (g.next_below(3) == 0) ? DType::f64 : DType::f32});
    const int64_t cap = 1 + int64_t(g.next_below(64)), first = 1 + int64_t(g.next_below(64)),
                  last = 1 + int64_t(g.next_below(64));
    BucketPlan p = plan_buckets(ps, cap, first, last);
    // Buckets tile each buffer in order; the first and last respect their caps, the
    // others the main one.
    std::vector<int64_t> next(p.buffer_numel.size(), 0);
    std::vector<std::vector<int64_t>> sizes(p.buffer_numel.size());
    for (size_t b = 0; b < p.buckets.size(); ++b) {
      const Bucket& k = p.buckets[b];
      EXPECT_EQ(k.begin, next[size_t(k.buffer)]);
      EXPECT_GT(k.numel(), 0);
      sizes[size_t(k.buffer)].push_back(k.numel());
      next[size_t(k.buffer)] = k.end;
      for (int i : k.params) {  // each listed parameter overlaps the bucket
        const ParamSlot& s = p.slots[size_t(i)];
        EXPECT_LT(s.offset, k.end);
        EXPECT_GT(s.offset + s.numel, k.begin);
      }
    }
    for (size_t f = 0; f < sizes.size(); ++f) {
      const int64_t es = int64_t(element_size(p.buffer_dtypes[f]));
      const auto& sz = sizes[f];
      for (size_t j = 0; j < sz.size(); ++j) {
        const int64_t c = j == 0 ? std::min(first, cap) : (j + 1 == sz.size() ? std::min(last, cap) : cap);
        EXPECT_LE(sz[j], std::max<int64_t>(1, c / es)) << "buffer " << f << " bucket " << j;
      }
    }
    EXPECT_EQ(next, p.buffer_numel);
    // Slots tile each buffer in reverse registration order.
    std::vector<int64_t> at(p.buffer_numel.size(), 0);
    for (int i = np - 1; i >= 0; --i) {
      const ParamSlot& s = p.slots[size_t(i)];
      EXPECT_EQ(s.offset, at[size_t(s.buffer)]);
      at[size_t(s.buffer)] += s.numel;
      int64_t covered = 0;
      for (int b : p.param_buckets[size_t(i)]) {
        const Bucket& k = p.buckets[size_t(b)];
        covered += std::min(k.end, s.offset + s.numel) - std::max(k.begin, s.offset);
      }
      EXPECT_EQ(covered, s.numel);
    }
  }
}

}  // namespace
}  // namespace strata::parallel
