// cpu::set_gemm_observer (what `strata bench gemm --shapes model` records a training step's
// GEMMs with) sees each CPU GEMM with its shape, transposes, leading dimensions and beta,
// for ops::matmul, ops::gemm_ and the kernels that call cpu::gemm themselves (attention).
#include <gtest/gtest.h>

#include <mutex>
#include <tuple>
#include <vector>

#include <strata/tensor/cpu/gemm.h>
#include <strata/tensor/ops.h>
#include "tests/test_tensors.h"

using namespace strata;

namespace {

using Call = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, double>;  // m n k lda ldb ta tb beta
std::mutex g_mu;
std::vector<Call> g_calls;

void record(DType, int64_t m, int64_t n, int64_t k, cpu::MatRef a, cpu::MatRef b, double beta) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_calls.emplace_back(m, n, k, a.ld, b.ld, a.trans, b.trans, beta);
}

struct Recording {
  Recording() {
    g_calls.clear();
    cpu::set_gemm_observer(&record);
  }
  ~Recording() { cpu::set_gemm_observer(nullptr); }
};

}  // namespace

TEST(GemmObserver, SeesShapesLayoutsAndBeta) {
  const Tensor a = strata::testing::rnd({5, 7}, DType::f32, 1);
  const Tensor b = strata::testing::rnd({3, 7}, DType::f32, 2);  // used transposed: (7, 3)
  Tensor acc = ops::zeros({5, 3});
  {
    Recording rec;
    (void)ops::matmul(a, ops::transpose(b, 0, 1));
    ops::gemm_(acc, a, ops::transpose(b, 0, 1), 1.0, 1.0);
  }
  ASSERT_EQ(g_calls.size(), 2u);
  EXPECT_EQ(g_calls[0], Call(5, 3, 7, 7, 7, false, true, 0.0));
  EXPECT_EQ(g_calls[1], Call(5, 3, 7, 7, 7, false, true, 1.0));
  // off again: nothing more is recorded
  (void)ops::matmul(a, ops::transpose(b, 0, 1));
  EXPECT_EQ(g_calls.size(), 2u);
}

TEST(GemmObserver, SeesTheAttentionKernelsPerHeadGemms) {
  const int64_t B = 2, T = 5, H = 2, hd = 4;
  const Tensor qkv = strata::testing::rnd({B, T, 3 * H * hd}, DType::f32, 3);
  {
    Recording rec;
    (void)ops::causal_attention(qkv, hd);
  }
  // per (batch, head): scores q k^T (T x T x hd) and y = p v (T x hd x T), q and v read in
  // place from the packed projection (leading dimension 3 H hd)
  int scores = 0, values = 0;
  for (const Call& c : g_calls) {
    if (std::get<0>(c) == T && std::get<1>(c) == T && std::get<2>(c) == hd && std::get<3>(c) == 3 * H * hd) ++scores;
    if (std::get<0>(c) == T && std::get<1>(c) == hd && std::get<2>(c) == T && std::get<4>(c) == 3 * H * hd) ++values;
  }
  EXPECT_EQ(scores, B * H);
  EXPECT_EQ(values, B * H);
}
