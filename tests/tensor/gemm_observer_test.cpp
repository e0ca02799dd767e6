// cpu::set_gemm_observer (what `strata bench gemm --shapes model` records a training step's
// GEMMs with) sees each CPU GEMM with its shape, transposes, leading dimensions and beta,
// for ops::matmul, ops::gemm_ and the kernels that call cpu::gemm themselves (conv).
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

TEST(GemmObserver, TheAttentionKernelsCallNoGemm) {
  // The causal attention runs its per-head products in its own register tiles
  // (tensor/cpu/attention.cpp), forward and backward: no BLAS call to observe.
  const int64_t B = 2, T = 5, H = 2, hd = 4;
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor qkv = strata::testing::rnd({B, T, 3 * H * hd}, dt, 3);
    const Tensor dy = strata::testing::rnd({B, T, H * hd}, dt, 4);
    Recording rec;
    auto [y, probs] = ops::causal_attention(qkv, hd);
    (void)ops::causal_attention_backward(dy, qkv, probs, hd);
    EXPECT_TRUE(g_calls.empty()) << dtype_name(dt) << ": " << g_calls.size() << " GEMM calls";
  }
}
