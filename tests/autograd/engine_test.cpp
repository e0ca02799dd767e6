// Backward-engine semantics: accumulation across calls and across uses, hook
// order and timing (the DDP contract), non-scalar roots, retain_graph, no_grad,
// and detection of in-place changes to saved tensors.
#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/grad_mode.h>

using namespace strata;

namespace {

Tensor leaf(const Shape& s, uint64_t seed) {
  Generator g(seed);
  Tensor t = ops::uniform(s, -1, 1, g, DType::f64);
  t.set_requires_grad(true);
  return t;
}

void expect_vec_near(const Tensor& got, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_TRUE(got.defined());
  const auto g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << "at " << i;
}

std::vector<double> scaled(const Tensor& t, double s) {
  auto v = t.to_vector<double>();
  for (auto& x : v) x *= s;
  return v;
}

}  // namespace

TEST(Engine, LeafGradAccumulatesAcrossBackwardCalls) {
  Tensor x = leaf({3, 2}, 1);
  backward(sum(mul(x, x)));
  expect_vec_near(x.grad(), scaled(x, 2));
  backward(sum(mul(x, x)));  // a fresh graph over the same leaf
  expect_vec_near(x.grad(), scaled(x, 4));
}

// A loss computed with the raw ops (no graph) is refused at backward with the cause named,
// not a bare "does not require grad".
TEST(Engine, BackwardOnRawOpsResultNamesTheOpsNamespace) {
  Tensor w = leaf({3, 2}, 2);
  const Tensor x = ops::ones({4, 3}, DType::f64);
  const Tensor raw_loss = ops::sum(ops::matmul(x, w));
  try {
    backward(raw_loss);
    FAIL() << "backward accepted a tensor no parameter reached";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("strata::ops::"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("strata::matmul"), std::string::npos) << e.what();
  }
  backward(sum(matmul(x, w)));  // the differentiable spelling reaches w
  EXPECT_TRUE(w.grad().defined());
}

TEST(Engine, TensorUsedTwiceGetsSummedGradient) {
  Tensor x = leaf({4}, 2);
  backward(sum(add(x, x)));
  expect_vec_near(x.grad(), {2, 2, 2, 2});
  Tensor y = leaf({4}, 3);
  backward(sum(add(mul(y, 3.0), exp(y))));  // two paths through different nodes
  std::vector<double> want;
  for (double v : y.to_vector<double>()) want.push_back(3 + std::exp(v));
  expect_vec_near(y.grad(), want);
}

TEST(Engine, PostAccumulateHooksFireOncePerLeafAfterGradIsFinalInReverseOrder) {
  Tensor x = ops::ones({2, 4}, DType::f64);  // input, no grad
  std::vector<Tensor> params = {leaf({4, 4}, 10), leaf({4}, 11), leaf({4, 4}, 12),
                                leaf({4}, 13), leaf({4, 4}, 14), leaf({4}, 15)};
  std::vector<int> order;
  std::vector<int> fired(params.size(), 0);
  std::vector<Tensor> grad_at_hook(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    params[i].register_post_accumulate_grad_hook([&, i](Tensor& p) {
      order.push_back(int(i));
      ++fired[i];
      grad_at_hook[i] = ops::clone(p.grad());
    });
  auto forward = [&] {
    Tensor h = x;
    for (int l = 0; l < 3; ++l) h = tanh(linear(h, params[size_t(2 * l)], params[size_t(2 * l + 1)]));
    return sum(h);
  };
  backward(forward());
  ASSERT_EQ(order.size(), params.size());
  for (int f : fired) EXPECT_EQ(f, 1);
  // layer 3 (params 4,5) before layer 2 (2,3) before layer 1 (0,1)
  auto layer_of = [](int i) { return i / 2; };
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(layer_of(order[k]), 2);
  for (size_t k = 2; k < 4; ++k) EXPECT_EQ(layer_of(order[k]), 1);
  for (size_t k = 4; k < 6; ++k) EXPECT_EQ(layer_of(order[k]), 0);
  for (size_t i = 0; i < params.size(); ++i)
    expect_vec_near(grad_at_hook[i], params[i].grad().to_vector<double>(), 0);
  // a second backward fires each hook once more
  backward(forward());
  for (int f : fired) EXPECT_EQ(f, 2);
}

TEST(Engine, HookOfSharedParameterSeesTheFullGradient) {
  Tensor w = leaf({3, 3}, 20);
  Tensor x = leaf({2, 3}, 21);
  int fired = 0;
  Tensor seen;
  w.register_post_accumulate_grad_hook([&](Tensor& p) {
    ++fired;
    seen = ops::clone(p.grad());
  });
  backward(sum(linear(tanh(linear(x, w, Tensor())), w, Tensor())));  // w used by two layers
  EXPECT_EQ(fired, 1);
  expect_vec_near(seen, w.grad().to_vector<double>(), 0);
  // the reference: both contributions computed by hand through separate copies of w
  Tensor w1 = ops::clone(w.detach()).set_requires_grad(true);
  Tensor w2 = ops::clone(w.detach()).set_requires_grad(true);
  Tensor x2 = ops::clone(x.detach());
  backward(sum(linear(tanh(linear(x2, w1, Tensor())), w2, Tensor())));
  expect_vec_near(seen, ops::binary(ops::BinaryOp::add, w1.grad(), w2.grad()).to_vector<double>());
}

TEST(Engine, GradientsSharedBetweenEdgesStayIntact) {
  // add() hands the same gradient tensor to both of its inputs, and the engine sums
  // later arrivals into a pending gradient in place when it solely owns it: neither
  // may change a tensor that another pending slot, the caller's grad_output or a
  // leaf's .grad still holds. t = (p + q) + p with p = 2x, q = 3y: dx = 4 g, dy = 3 g.
  Tensor x = leaf({3}, 60), y = leaf({3}, 61), z = leaf({3}, 62);
  Tensor p = mul(x, 2.0), q = mul(y, 3.0);
  Tensor t = add(add(p, q), p);
  Tensor g = ops::from_vector<double>({1, -2, 0.5}, {3});
  backward(t, g);
  expect_vec_near(g, {1, -2, 0.5});  // the caller's gradient is untouched
  expect_vec_near(x.grad(), {4, -8, 2});
  expect_vec_near(y.grad(), {3, -6, 1.5});
  // two leaves fed by one add: each .grad is its own tensor, not shared storage
  backward(sum(add(z, mul(x, 0.0))));
  expect_vec_near(z.grad(), {1, 1, 1});
  expect_vec_near(x.grad(), {4, -8, 2});
  Tensor a = leaf({2}, 63), b = leaf({2}, 64);
  backward(sum(add(a, b)));
  EXPECT_FALSE(a.grad().shares_storage(b.grad()));
  backward(sum(mul(a, 5.0)));  // accumulating into a.grad leaves b.grad alone
  expect_vec_near(a.grad(), {6, 6});
  expect_vec_near(b.grad(), {1, 1});
}

TEST(Engine, NonScalarRootWithGradOutput) {
  Tensor x = leaf({2, 3}, 30);
  Tensor y = mul(x, 3.0);
  Tensor g = ops::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  backward(y, g);
  expect_vec_near(x.grad(), {3, 6, 9, 12, 15, 18});
  Tensor y2 = mul(x, 3.0);
  EXPECT_THROW(backward(y2), Error);                                  // needs grad_output
  EXPECT_THROW(backward(y2, ops::ones({3, 2}, DType::f64)), Error);  // wrong shape
}

TEST(Engine, BackwardTwiceNeedsRetainGraph) {
  Tensor x = leaf({3}, 40);
  Tensor once = sum(exp(x));
  backward(once);
  EXPECT_THROW(backward(once), Error);  // graph freed by the first call
  x.set_grad(Tensor());
  Tensor loss = sum(mul(x, x));
  backward(loss, Tensor(), /*retain_graph=*/true);
  backward(loss);
  expect_vec_near(x.grad(), scaled(x, 4));
  try {
    backward(loss);
    FAIL() << "a third backward over a freed graph must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
}

TEST(Engine, NoGradGuardRecordsNothing) {
  Tensor x = leaf({3}, 50);
  {
    NoGradGuard ng;
    Tensor y = add(mul(exp(x), x), 1.0);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_FALSE(sum(y).requires_grad());
    EXPECT_FALSE(matmul(unsqueeze(x, 0), unsqueeze(x, 1)).requires_grad());
  }
  Tensor z = exp(x);
  EXPECT_TRUE(z.requires_grad());
  EXPECT_NE(z.grad_fn(), nullptr);
  // ops on tensors that need no grad record nothing either
  EXPECT_FALSE(exp(ops::ones({2}, DType::f64)).requires_grad());
}

TEST(Engine, InPlaceChangeOfSavedTensorIsDetected) {
  Tensor x = leaf({3}, 60);
  Tensor w = ops::ones({3}, DType::f64);  // saved by mul for x's gradient
  Tensor loss = sum(mul(x, w));
  ops::add_(w, ops::ones({3}, DType::f64));
  try {
    backward(loss);
    FAIL() << "backward must detect the in-place change";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("modified in place"), std::string::npos) << e.what();
  }
  // a saved output modified in place (exp saves its result)
  Tensor y = exp(x);
  Tensor l2 = sum(y);
  Tensor yd = y.detach();
  ops::mul_(yd, 2.0);
  EXPECT_THROW(backward(l2), Error);
}
