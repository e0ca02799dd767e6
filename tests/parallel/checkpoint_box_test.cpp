// The pure box arithmetic of checkpoint format v2 (parallel/checkpoint/box.h): intersection,
// flat-range-to-boxes (exhaustively, against the flat order it must reproduce), the
// tiling check, and the copy runs between two boxes (against an element-wise copy).
#include <strata/parallel/checkpoint/box.h>

#include <gtest/gtest.h>

#include <random>

namespace strata::parallel {
namespace {

Box B(std::vector<int64_t> o, std::vector<int64_t> l) { return Box{std::move(o), std::move(l)}; }

TEST(CheckpointBox, Intersect) {
  EXPECT_EQ(intersect(B({0, 0}, {4, 5}), B({2, 3}, {4, 4})), B({2, 3}, {2, 2}));
  EXPECT_EQ(intersect(B({1, 1}, {2, 2}), B({0, 0}, {7, 5})), B({1, 1}, {2, 2}));  // contained
  EXPECT_FALSE(intersect(B({0, 0}, {2, 5}), B({2, 0}, {2, 5})));                    // touching rows
  EXPECT_FALSE(intersect(B({0, 0}, {4, 2}), B({1, 2}, {2, 3})));                    // disjoint columns
  EXPECT_FALSE(intersect(B({0, 0}, {0, 5}), B({0, 0}, {4, 5})));                    // empty box
  EXPECT_EQ(intersect(B({}, {}), B({}, {})), B({}, {}));                            // scalars
  EXPECT_THROW(intersect(B({0}, {1}), B({0, 0}, {1, 1})), Error);
  EXPECT_EQ(box_str(B({0, 2}, {3, 3})), "[0:3, 2:5]");
  EXPECT_TRUE(box_inside(B({6, 0}, {1, 5}), {7, 5}));
  EXPECT_FALSE(box_inside(B({6, 0}, {2, 5}), {7, 5}));
  EXPECT_FALSE(box_inside(B({0}, {5}), {7, 5}));
}

TEST(CheckpointBox, FlatRangeExample) {
  // (7, 5), flat [3, 22): the rest of row 0, rows 1-3 whole, the start of row 4.
  const std::vector<FlatBox> b = flat_range_to_boxes({7, 5}, 3, 22);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].box, B({0, 3}, {1, 2}));
  EXPECT_EQ(b[1].box, B({1, 0}, {3, 5}));
  EXPECT_EQ(b[2].box, B({4, 0}, {1, 2}));
  EXPECT_EQ(b[1].flat_begin, 5);
  EXPECT_EQ(flat_range_to_boxes({7, 5}, 0, 35).size(), 1u);  // the whole tensor is one box
  EXPECT_EQ(flat_range_to_boxes({}, 0, 1).size(), 1u);
  EXPECT_TRUE(flat_range_to_boxes({7, 5}, 9, 9).empty());
  EXPECT_THROW(flat_range_to_boxes({7, 5}, 3, 36), Error);
}

TEST(CheckpointBox, FlatRangeToBoxesIsExactAndSmallForEveryRange) {
  for (const Shape& shape : std::vector<Shape>{{11}, {7, 5}, {3, 4, 6}, {2, 3, 2, 3}, {4, 1, 2}, {1, 1, 3}, {}}) {
    const int64_t n = shape_numel(shape);
    const size_t max_boxes = shape.empty() ? 1 : 2 * (shape.size() - 1) + 1;
    for (int64_t b = 0; b <= n; ++b)
      for (int64_t e = b; e <= n; ++e) {
        SCOPED_TRACE(shape_str(shape) + " [" + std::to_string(b) + ", " + std::to_string(e) + ")");
        const std::vector<FlatBox> boxes = flat_range_to_boxes(shape, b, e);
        ASSERT_LE(boxes.size(), max_boxes);
        int64_t pos = b;
        for (const FlatBox& fb : boxes) {
          ASSERT_TRUE(box_inside(fb.box, shape)) << box_str(fb.box);
          ASSERT_FALSE(fb.box.empty());
          ASSERT_EQ(fb.flat_begin, pos);
          // Each box is exactly the contiguous flat range that follows.
          const auto runs = box_runs(fb.box, shape);
          ASSERT_EQ(runs.size(), 1u) << box_str(fb.box);
          ASSERT_EQ(runs[0], std::make_pair(pos, pos + fb.box.numel()));
          pos += fb.box.numel();
        }
        ASSERT_EQ(pos, e);
      }
  }
}

TEST(CheckpointBox, BoxRuns) {
  using Runs = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(box_runs(B({1, 0}, {2, 5}), {7, 5}), (Runs{{5, 15}}));
  EXPECT_EQ(box_runs(B({1, 1}, {2, 2}), {7, 5}), (Runs{{6, 8}, {11, 13}}));
  EXPECT_EQ(box_runs(B({1, 0, 0}, {2, 2, 6}), {3, 4, 6}), (Runs{{24, 36}, {48, 60}}));
  EXPECT_EQ(box_runs(B({}, {}), {}), (Runs{{0, 1}}));
  EXPECT_TRUE(box_runs(B({0, 0}, {0, 5}), {7, 5}).empty());
}

TEST(CheckpointBox, TilingAcceptsExactCovers) {
  EXPECT_FALSE(check_tiling({7, 5}, {B({0, 0}, {7, 5})}));
  EXPECT_FALSE(check_tiling({7, 5}, {B({0, 0}, {7, 2}), B({0, 2}, {7, 3})}));  // column shards (TP colwise)
  EXPECT_FALSE(check_tiling({7, 5}, {B({4, 0}, {3, 5}), B({0, 0}, {4, 5})}));  // row shards, any order
  std::vector<Box> mixed;                                                       // ZeRO ranges of 4 ranks
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 3}, {3, 22}, {22, 23}, {23, 35}})
    for (const FlatBox& fb : flat_range_to_boxes({7, 5}, b, e)) mixed.push_back(fb.box);
  mixed.push_back(B({2, 2}, {0, 3}));  // empty boxes (declarations) are ignored
  EXPECT_FALSE(check_tiling({7, 5}, mixed));
  EXPECT_FALSE(check_tiling({0, 4}, {}));
  EXPECT_FALSE(check_tiling({}, {B({}, {})}));
}

TEST(CheckpointBox, TilingFindsOverlapGapAndOutside) {
  auto overlap = check_tiling({7, 5}, {B({0, 0}, {7, 3}), B({0, 0}, {4, 5}), B({4, 3}, {3, 2})});
  ASSERT_TRUE(overlap);
  EXPECT_EQ(overlap->kind, TilingError::Kind::overlap);
  EXPECT_EQ(overlap->a, 0u);
  EXPECT_EQ(overlap->b, 1u);
  // Equal sizes but one element twice and one never: still an overlap, never "exact".
  overlap = check_tiling({2, 2}, {B({0, 0}, {1, 2}), B({0, 1}, {1, 1}), B({1, 1}, {1, 1})});
  ASSERT_TRUE(overlap);
  EXPECT_EQ(overlap->kind, TilingError::Kind::overlap);

  const auto gap = check_tiling({7, 5}, {B({0, 0}, {2, 5}), B({2, 0}, {1, 2}), B({3, 0}, {4, 5})});
  ASSERT_TRUE(gap);
  EXPECT_EQ(gap->kind, TilingError::Kind::gap);
  EXPECT_EQ(gap->gap_begin, 12);
  EXPECT_EQ(gap->gap_end, 15);
  const auto tail = check_tiling({7, 5}, {B({0, 0}, {6, 5}), B({6, 0}, {1, 4})});
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->gap_begin, 34);
  EXPECT_EQ(tail->gap_end, 35);
  const auto none = check_tiling({}, {});
  ASSERT_TRUE(none);
  EXPECT_EQ(none->kind, TilingError::Kind::gap);

  const auto outside = check_tiling({7, 5}, {B({0, 0}, {7, 5}), B({5, 3}, {2, 3})});
  ASSERT_TRUE(outside);
  EXPECT_EQ(outside->kind, TilingError::Kind::outside);
  EXPECT_EQ(outside->a, 1u);
  EXPECT_EQ(check_tiling({7, 5}, {B({0}, {35})})->kind, TilingError::Kind::outside);  // wrong rank
}

// for_each_copy_run against an element-by-element copy, for random box pairs.
TEST(CheckpointBox, CopyRunsMatchElementwiseCopy) {
  const Shape shape{4, 5, 6};
  std::mt19937 rng(7);
  auto random_box = [&] {
    Box b{std::vector<int64_t>(3), std::vector<int64_t>(3)};
    for (size_t d = 0; d < 3; ++d) {
      b.offsets[d] = std::uniform_int_distribution<int64_t>(0, shape[d] - 1)(rng);
      b.lengths[d] = std::uniform_int_distribution<int64_t>(1, shape[d] - b.offsets[d])(rng);
    }
    return b;
  };
  auto global_index = [&](const Box& b, int64_t local) {  // element `local` of b (row-major) -> flat index
    int64_t g = 0, stride = 1;
    for (size_t d = 3; d-- > 0;) {
      g += (b.offsets[d] + local % b.lengths[d]) * stride;
      local /= b.lengths[d];
      stride *= shape[d];
    }
    return g;
  };
  int tested = 0;
  for (int rep = 0; rep < 400; ++rep) {
    const Box src = rep % 10 == 0 ? whole_box(shape) : random_box(), dst = random_box();
    const auto inter = intersect(src, dst);
    if (!inter) continue;
    std::vector<int64_t> s(size_t(src.numel())), d(size_t(dst.numel()), -1);
    for (int64_t i = 0; i < src.numel(); ++i) s[size_t(i)] = global_index(src, i);
    int64_t copied = 0, last_src = -1, runs = 0;
    for_each_copy_run(*inter, src, dst, [&](int64_t so, int64_t doff, int64_t n) {
      ASSERT_GT(so, last_src);
      last_src = so;
      ++runs;
      for (int64_t k = 0; k < n; ++k) d[size_t(doff + k)] = s[size_t(so + k)];
      copied += n;
    });
    ASSERT_EQ(copied, inter->numel());
    for (int64_t i = 0; i < dst.numel(); ++i) {
      const int64_t g = global_index(dst, i);
      const int64_t z = g / 30, y = g / 6 % 5, x = g % 6;
      const bool in = z >= inter->offsets[0] && z < inter->offsets[0] + inter->lengths[0] && y >= inter->offsets[1] &&
                      y < inter->offsets[1] + inter->lengths[1] && x >= inter->offsets[2] &&
                      x < inter->offsets[2] + inter->lengths[2];
      ASSERT_EQ(d[size_t(i)], in ? g : -1) << box_str(src) << " -> " << box_str(dst) << " element " << i;
    }
    if (src == dst) {
      EXPECT_EQ(runs, 1);  // identical boxes copy in one run
    }
    ++tested;
  }
  EXPECT_GT(tested, 100);
}

}  // namespace
}  // namespace strata::parallel
