// Backward formulas that write their result over a saved activation (SavedTensor::take):
// the attention's d qkv over qkv, the GELU's and SwiGLU's gradients over their inputs, a
// linear's input gradient over its saved input rows. They may do so only where nobody can
// see it, and the gradients are the same bit for bit as with fresh buffers.
#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/tensor/cpu_allocator.h>

using namespace strata;

namespace {

constexpr int64_t kB = 2, kT = 24, kC = 32, kHd = 8;

struct Params {
  std::vector<Tensor> all;
  Tensor add(const Shape& s, Generator& g) {
    Tensor t = ops::uniform(s, -0.3, 0.3, g);
    t.set_requires_grad(true);
    all.push_back(t);
    return t;
  }
};

// A GPT block, then a grouped-query attention over a packed projection and a SwiGLU MLP:
// every backward that may take a saved buffer over runs. `keep`: where not null, gets the
// first attention's qkv, which the caller then holds through the backward.
struct Model {
  Params p;
  Tensor x, w_qkv, b_qkv, w_o, b_o, w_fc, b_fc, w_pr, b_pr, wq, wk, wv, w1, w3, w2, r;
  Model() {
    Generator g(7);
    x = p.add({kB, kT, kC}, g);
    w_qkv = p.add({3 * kC, kC}, g), b_qkv = p.add({3 * kC}, g);
    w_o = p.add({kC, kC}, g), b_o = p.add({kC}, g);
    w_fc = p.add({4 * kC, kC}, g), b_fc = p.add({4 * kC}, g);
    w_pr = p.add({kC, 4 * kC}, g), b_pr = p.add({kC}, g);
    wq = p.add({kC, kC}, g), wk = p.add({kC / 2, kC}, g), wv = p.add({kC / 2, kC}, g);
    w1 = p.add({48, kC}, g), w3 = p.add({48, kC}, g), w2 = p.add({kC, 48}, g);
    r = ops::uniform({kB, kT, kC}, -1, 1, g);
  }
  Tensor loss(Tensor* keep = nullptr) const {
    const Tensor qkv = linear(x, w_qkv, b_qkv);
    if (keep) *keep = qkv;
    const Tensor h = linear_residual(causal_attention(qkv, kHd), w_o, b_o, x);
    const Tensor h2 = linear_residual(linear_gelu(h, w_fc, b_fc, true), w_pr, b_pr, h);
    const Tensor a2 = causal_attention(linear_packed(h2, {wq, wk, wv}), kHd, /*kv_heads=*/2);
    const Tensor out = linear(swiglu(linear(a2, w1, Tensor()), linear(a2, w3, Tensor())), w2, Tensor());
    return sum(mul(out, r));
  }
  std::vector<std::vector<float>> grads() const {
    std::vector<std::vector<float>> gs;
    for (const Tensor& t : p.all) gs.push_back(t.grad().to_vector<float>());
    return gs;
  }
  void zero_grads() {
    for (Tensor& t : p.all) t.set_grad(Tensor());
  }
};

// The CPU tensor allocations the backward of `loss` makes.
int64_t backward_allocations(const Tensor& loss, bool retain_graph) {
  const int64_t before = cpu_allocator_stats().requests;
  backward(loss, Tensor(), retain_graph);
  return cpu_allocator_stats().requests - before;
}

}  // namespace

TEST(SavedBuffers, GradientsAreBitForBitThoseOfFreshBuffersWithElevenFewerAllocations) {
  Model m;
  // retain_graph keeps every saved tensor for a second pass: nothing is written over
  const int64_t kept_allocs = backward_allocations(m.loss(), /*retain_graph=*/true);
  const auto kept = m.grads();
  m.zero_grads();
  const int64_t taken_allocs = backward_allocations(m.loss(), /*retain_graph=*/false);
  EXPECT_EQ(m.grads(), kept);
  // Written over: both attentions' qkv, the GELU's pre-activation, the SwiGLU's gate and
  // up, and the input rows of six linears (the first attention's output, h, the GELU's
  // output, h2, the second attention's output once (the second of its two linears to run
  // backward; the first still shares it), the SwiGLU's output). Not: x, a leaf held here.
  EXPECT_EQ(kept_allocs - taken_allocs, 11) << kept_allocs << " allocations kept, " << taken_allocs << " taken";
}

TEST(SavedBuffers, ATensorTheCallerStillHoldsIsNeverWrittenOver) {
  Model m;
  backward(m.loss(), Tensor(), /*retain_graph=*/true);
  const auto want = m.grads();
  m.zero_grads();
  Tensor qkv;  // the first attention's input, held here through the backward
  const Tensor loss = m.loss(&qkv);
  const std::vector<float> before = qkv.to_vector<float>();
  backward(loss);
  EXPECT_EQ(qkv.to_vector<float>(), before);
  EXPECT_EQ(m.grads(), want);
}

TEST(SavedBuffers, ActivationsOfAGraphKeptForASecondBackwardStayIntact) {
  Model m;
  const Tensor loss = m.loss();
  backward(loss, Tensor(), /*retain_graph=*/true);
  const auto first = m.grads();
  m.zero_grads();
  backward(loss);  // the saved tensors the first pass kept are the forward's, unchanged
  EXPECT_EQ(m.grads(), first);
}

TEST(SavedBuffers, OpsWriteOverTheirInputOnlyWhereAsked) {
  Generator g(3);
  const Tensor qkv = ops::uniform({kB, kT, 3 * kC}, -1, 1, g), dy = ops::uniform({kB, kT, kC}, -1, 1, g);
  const Tensor lse = ops::causal_attention(qkv, kHd).second;
  const Tensor want = ops::causal_attention_backward(dy, qkv, lse, kHd);
  EXPECT_FALSE(want.shares_storage(qkv));
  const Tensor own = ops::clone(qkv);
  const Tensor got = ops::causal_attention_backward(dy, own, lse, kHd, 0, /*overwrite_qkv=*/true);
  EXPECT_TRUE(got.shares_storage(own));
  EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>());

  const Tensor y = ops::uniform({kB * kT, 4 * kC}, -3, 3, g), b = ops::uniform({4 * kC}, -1, 1, g);
  const Tensor dout = ops::uniform({kB * kT, 4 * kC}, -1, 1, g);
  const auto [dh, db] = ops::bias_gelu_backward(dout, y, b, true, true);
  const Tensor y2 = ops::clone(y);
  const auto [dh2, db2] = ops::bias_gelu_backward(dout, y2, b, true, true, /*overwrite_y=*/true);
  EXPECT_TRUE(dh2.shares_storage(y2));
  EXPECT_EQ(dh2.to_vector<float>(), dh.to_vector<float>());
  EXPECT_EQ(db2.to_vector<float>(), db.to_vector<float>());

  const Tensor gate = ops::clone(y), up = ops::clone(dout);
  const auto [dg, du] = ops::swiglu_backward(dout, gate, up);
  const Tensor gate2 = ops::clone(gate), up2 = ops::clone(up);
  const auto [dg2, du2] = ops::swiglu_backward(dout, gate2, up2, true, true);
  EXPECT_TRUE(dg2.shares_storage(gate2));
  EXPECT_TRUE(du2.shares_storage(up2));
  EXPECT_EQ(dg2.to_vector<float>(), dg.to_vector<float>());
  EXPECT_EQ(du2.to_vector<float>(), du.to_vector<float>());
}
