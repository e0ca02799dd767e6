// cpu::op_profile (what `strata bench train --ops` records): every KernelTable call is a
// scope named after the table's op (with the enum for binary/unary), every cpu::gemm a
// scope keyed by its shape with 2mnk FLOPs, nested scopes' time is taken out of the
// caller's self time, Phase files scopes under its name, and nothing is recorded while off.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <strata/core/threads.h>
#include <strata/tensor/cpu/op_profile.h>
#include <strata/tensor/ops.h>
#include "tests/test_tensors.h"

using namespace strata;
namespace prof = strata::cpu::op_profile;

namespace {
const prof::Stat* find(const std::vector<prof::Stat>& s, const std::string& phase, const std::string& name,
                       int sub = -1) {
  for (const auto& x : s)
    if (x.phase == phase && x.name == name && x.sub == sub) return &x;
  return nullptr;
}
}  // namespace

TEST(OpProfile, RecordsKernelsGemmShapesAndPhases) {
  const Tensor a = strata::testing::rnd({6, 8}, DType::f32, 1);
  const Tensor b = strata::testing::rnd({8, 5}, DType::f32, 2);
  // a 1x1 convolution: one GEMM per sample, called from inside the conv2d kernel
  const int64_t N = 3;
  const Tensor img = strata::testing::rnd({N, 3, 4, 5}, DType::f32, 3);
  const Tensor w = strata::testing::rnd({2, 3, 1, 1}, DType::f32, 4);
  // Scopes are recorded on the starting thread only: one compute thread, as the bench runs it.
  const int threads = get_num_threads();
  set_num_threads(1);
  prof::start();
  (void)ops::matmul(a, b);
  (void)ops::binary(ops::BinaryOp::mul, a, a);
  (void)ops::conv2d(img, w, Tensor(), {});
  {
    prof::Phase phase("backward");
    (void)ops::matmul(a, b);
  }
  prof::stop();
  (void)ops::matmul(a, b);  // off: not recorded
  set_num_threads(threads);
  const auto stats = prof::results();

  const prof::Stat* mm = find(stats, "forward", "matmul");
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->calls, 1);
  const std::string key = prof::gemm_key(6, 5, 8, 8, 5, false, false, false);
  const prof::Stat* g = find(stats, "forward", key);
  ASSERT_NE(g, nullptr) << key;
  EXPECT_EQ(g->calls, 1);
  EXPECT_DOUBLE_EQ(g->flops, 2.0 * 6 * 5 * 8);
  const prof::Stat* gb = find(stats, "backward", key);
  ASSERT_NE(gb, nullptr);
  EXPECT_EQ(gb->calls, 1);
  ASSERT_NE(find(stats, "backward", "matmul"), nullptr);

  const prof::Stat* mul = find(stats, "forward", "binary", int(ops::BinaryOp::mul));
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(mul->calls, 1);

  // The conv kernel's own GEMMs (one per sample) are nested in it: its self time excludes them.
  const prof::Stat* at = find(stats, "forward", "conv2d");
  ASSERT_NE(at, nullptr);
  int64_t conv_gemms = 0;
  double conv_time = 0;
  for (const auto& x : stats)
    if (x.phase == "forward" && x.name.rfind("gemm ", 0) == 0 && x.name != key) {
      conv_gemms += x.calls;
      conv_time += x.total_s;
    }
  EXPECT_EQ(conv_gemms, N);
  EXPECT_NEAR(at->self_s, at->total_s - conv_time, 1e-9 + 1e-6 * at->total_s);
  for (const auto& x : stats) {
    EXPECT_GE(x.self_s, 0.0) << x.name;
    EXPECT_LE(x.self_s, x.total_s + 1e-12) << x.name;
  }
}
