// The CUDA kernels' strided index math (tensor/cuda/indexing.h), checked on the host
// against plain coordinate arithmetic and the CPU loops' broadcast strides.
#include <strata/tensor/cuda/indexing.h>

#include <gtest/gtest.h>

#include <strata/tensor/cpu/loops.h>
#include <strata/tensor/ops.h>

namespace strata {
namespace {

using cuda::make_offset_calc;

// Offset of row-major linear index i of t's shape under t's strides (no coalescing).
int64_t naive_offset(const Tensor& t, int64_t i) {
  int64_t off = t.offset();
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t c = i % t.shape()[size_t(d)];
    i /= t.shape()[size_t(d)];
    off += c * t.strides()[size_t(d)];
  }
  return off;
}

// Every element of view `v` through an OffsetCalc<2> paired with a contiguous output.
void expect_matches(const Tensor& v, const char* what) {
  const auto oc = make_offset_calc<2>(v.shape(), {contiguous_strides(v.shape()), v.strides()}, "test");
  for (int64_t i = 0; i < v.numel(); ++i) {
    int64_t off[2];
    oc.get(i, off);
    ASSERT_EQ(off[0], i) << what << " element " << i;
    ASSERT_EQ(off[1] + v.offset(), naive_offset(v, i)) << what << " element " << i;
  }
}

TEST(CudaIndexing, ViewsMatchCoordinateArithmetic) {
  const Tensor base = ops::zeros({4, 5, 6, 3});
  expect_matches(base, "contiguous");
  expect_matches(ops::permute(base, {2, 0, 3, 1}), "permuted");
  expect_matches(ops::transpose(base, 1, 3), "transposed");
  expect_matches(ops::slice(base, 1, 1, 5, 2), "stepped slice");
  expect_matches(ops::narrow(ops::select(base, 3, 1), 2, 2, 3), "select + narrow");
  expect_matches(ops::expand(ops::narrow(base, 0, 1, 1), {7, 5, 6, 3}), "expanded (stride 0)");
  expect_matches(ops::unsqueeze(ops::transpose(base, 0, 2), 1), "unsqueezed size-1 dim");
  expect_matches(ops::zeros({}), "0-d");
}

// Shapes under 2^31 elements index in 32 bits; the 64-bit path gives the same offsets,
// and a shape of 2^31 elements or more takes it.
TEST(CudaIndexing, ThirtyTwoBitIndexingMatchesSixtyFour) {
  const Tensor v = ops::permute(ops::zeros({3, 7, 5, 4}), {2, 0, 3, 1});
  auto oc = make_offset_calc<2>(v.shape(), {contiguous_strides(v.shape()), v.strides()}, "test");
  ASSERT_TRUE(oc.index32);
  auto wide = oc;
  wide.index32 = false;
  for (int64_t i = 0; i < v.numel(); ++i) {
    int64_t a[2], b[2];
    oc.get(i, a);
    wide.get(i, b);
    ASSERT_EQ(a[0], b[0]) << i;
    ASSERT_EQ(a[1], b[1]) << i;
  }
  const std::vector<int64_t> big = {int64_t(1) << 20, 4096}, big_strides = {1, int64_t(1) << 20};
  EXPECT_FALSE(make_offset_calc<1>(big, {big_strides}, "test").index32);
}

TEST(CudaIndexing, CoalescesLikeTheCpuPlan) {
  const Tensor t = ops::zeros({2, 3, 4});
  auto oc = make_offset_calc<1>(t.shape(), {t.strides()}, "test");
  EXPECT_EQ(oc.ndim, 1);
  EXPECT_TRUE(oc.contiguous);
  const Tensor tt = ops::transpose(t, 0, 2);
  oc = make_offset_calc<1>(tt.shape(), {tt.strides()}, "test");
  EXPECT_FALSE(oc.contiguous);
  const auto plan = cpu::make_plan<1>(tt.shape(), {tt.strides()});
  EXPECT_EQ(oc.ndim, int(plan.shape.size()));
  for (int d = 0; d < oc.ndim; ++d) {
    EXPECT_EQ(oc.sizes[d], plan.shape[size_t(d)]);
    EXPECT_EQ(oc.strides[0][d], plan.strides[0][size_t(d)]);
  }
}

TEST(CudaIndexing, BroadcastStridesMatchCpu) {
  const Tensor a = ops::zeros({3, 1, 5});
  const Shape out{2, 3, 4, 5};
  EXPECT_EQ(cuda::broadcast_strides(a.shape(), a.strides(), out), cpu::broadcast_strides(a, out));
  // broadcasting operand through a 3-operand calc: b (4,1) against a (2,1,3) -> (2,4,3)
  const Tensor b = ops::zeros({4, 1}), c = ops::zeros({2, 1, 3});
  const Shape s = ops::broadcast_shapes(b.shape(), c.shape());
  const auto oc = make_offset_calc<3>(s, {contiguous_strides(s), cuda::broadcast_strides(b.shape(), b.strides(), s),
                                          cuda::broadcast_strides(c.shape(), c.strides(), s)},
                                      "test");
  for (int64_t i = 0; i < shape_numel(s); ++i) {
    int64_t off[3];
    oc.get(i, off);
    const int64_t n = i / 12, r = (i / 3) % 4, k = i % 3;
    EXPECT_EQ(off[1], r);
    EXPECT_EQ(off[2], n * 3 + k);
  }
}

TEST(CudaIndexing, TooManyDimsIsAnErrorNamingTheOp) {
  Shape shape(size_t(cuda::kMaxDims + 1), 2), strides(shape.size());
  int64_t st = 1;
  for (size_t d = 0; d < shape.size(); ++d) {  // every dim non-mergeable: strides grow by 3x
    strides[shape.size() - 1 - d] = st;
    st *= 3;
  }
  try {
    (void)make_offset_calc<1>(shape, {strides}, "myop");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[myop]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("non-mergeable dims"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
