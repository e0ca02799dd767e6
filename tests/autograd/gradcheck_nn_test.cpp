// Finite-difference gradient checks (f64, small odd sizes) of every differentiable
// function in autograd/fn_nn.cpp, plus the recording rules (no node without grad,
// gradients only for inputs that asked for one).
#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/gradcheck.h>
#include <strata/autograd/grad_mode.h>

using namespace strata;

namespace {

Tensor rnd(const Shape& s, uint64_t seed, bool grad = true, double scale = 1.0) {
  Generator g(seed);
  Tensor t = ops::normal(s, 0, scale, g, DType::f64);
  if (grad) t.set_requires_grad(true);
  return t;
}

void expect_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(fn, inputs);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(GradcheckNn, SoftmaxAndLogSoftmax) {
  for (int64_t dim : {0, 1, -1}) {
    expect_gradcheck([dim](const std::vector<Tensor>& in) { return softmax(in[0], dim); },
                     std::vector<Tensor>{rnd({3, 4, 5}, 1)});
    expect_gradcheck([dim](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); },
                     std::vector<Tensor>{rnd({3, 4, 5}, 2)});
  }
}

TEST(GradcheckNn, CausalAttention) {
  // qkv (B=2, T=4, 3 * H=2 * hd=3); sizes where a head or position mix-up changes the result
  expect_gradcheck([](const std::vector<Tensor>& in) { return causal_attention(in[0], 3); },
                   std::vector<Tensor>{rnd({2, 4, 18}, 30)});
  // one head of width 2 through a strided (transposed) qkv
  expect_gradcheck([](const std::vector<Tensor>& in) { return causal_attention(transpose(in[0], 1, 2), 2); },
                   std::vector<Tensor>{rnd({1, 6, 5}, 31)});
}

TEST(GradcheckNn, LayerNormWithAndWithoutAffine) {
  expect_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], 1e-5); },
                   std::vector<Tensor>{rnd({2, 3, 7}, 3), rnd({7}, 4), rnd({7}, 5)});
  expect_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], Tensor(), Tensor(), 1e-5); },
                   std::vector<Tensor>{rnd({4, 6}, 6)});
  // weight only, x not differentiated
  expect_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], Tensor(), 1e-5); },
                   std::vector<Tensor>{rnd({3, 5}, 7, false), rnd({5}, 8)});
}

// With relu, the ReLU in the same op (BatchNormReluBackward masks by its saved output).
TEST(GradcheckNn, BatchNormTrainingOn4dAnd2dAndEvalWithAndWithoutRelu) {
  for (const Shape& s : {Shape{3, 2, 3, 2}, Shape{5, 3}}) {
    const int64_t C = s[1];
    for (bool training : {true, false})
      for (bool relu : {false, true}) {
        auto fn = [C, training, relu](const std::vector<Tensor>& in) {
          Tensor rm = ops::full({C}, 0.2, DType::f64), rv = ops::full({C}, 1.7, DType::f64);
          return batch_norm(in[0], in[1], in[2], rm, rv, training, 0.1, 1e-5, relu);
        };
        expect_gradcheck(fn, (std::vector<Tensor>{rnd(s, 9), rnd({C}, 10), rnd({C}, 11)}));
      }
  }
}

// BatchNorm, ReLU and a 2x2 max pool in one op (odd sizes: the last row and column feed
// the statistics only).
TEST(GradcheckNn, BatchNormReluMaxPoolTrainingAndEval) {
  for (bool training : {true, false}) {
    auto fn = [training](const std::vector<Tensor>& in) {
      Tensor rm = ops::full({2}, 0.2, DType::f64), rv = ops::full({2}, 1.7, DType::f64);
      return batch_norm_relu_max_pool2(in[0], in[1], in[2], rm, rv, training, 0.1, 1e-5);
    };
    expect_gradcheck(fn, (std::vector<Tensor>{rnd({3, 2, 5, 4}, 22), rnd({2}, 23), rnd({2}, 24)}));
  }
}

TEST(GradcheckNn, Conv2dStridePaddingBias) {
  const ops::Conv2dParams p{2, 1, 1, 1};
  expect_gradcheck([p](const std::vector<Tensor>& in) { return strata::conv2d(in[0], in[1], in[2], p); },
                   (std::vector<Tensor>{rnd({3, 2, 5, 4}, 12), rnd({3, 2, 3, 2}, 13), rnd({3}, 14)}));
  // pointwise without bias
  expect_gradcheck([](const std::vector<Tensor>& in) { return strata::conv2d(in[0], in[1], Tensor(), {}); },
                   (std::vector<Tensor>{rnd({2, 3, 3, 2}, 15), rnd({4, 3, 1, 1}, 16)}));
}

TEST(GradcheckNn, MaxAndAvgPool) {
  const ops::Pool2dParams p{3, 2, 2, 1, 1, 1};
  expect_gradcheck([p](const std::vector<Tensor>& in) { return strata::max_pool2d(in[0], p); },
                   std::vector<Tensor>{rnd({3, 2, 5, 4}, 17)});
  expect_gradcheck([p](const std::vector<Tensor>& in) { return strata::avg_pool2d(in[0], p); },
                   std::vector<Tensor>{rnd({3, 2, 5, 4}, 18)});
}

TEST(GradcheckNn, EmbeddingWithRepeatedIndices) {
  Tensor idx = ops::from_vector<int64_t>({1, 4, 1, 0, 4, 4}, {2, 3});
  expect_gradcheck([](const std::vector<Tensor>& in) { return embedding(in[0], in[1]); },
                   (std::vector<Tensor>{rnd({5, 3}, 19), idx}));
}

TEST(GradcheckNn, CrossEntropyFlattensLeadingDimsAndIgnores) {
  Tensor target = ops::from_vector<int64_t>({2, -100, 0, 4, 1, -100}, {2, 3});
  expect_gradcheck([](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], -100); },
                   (std::vector<Tensor>{rnd({2, 3, 5}, 20, true, 2.0), target}));
  Tensor t2 = ops::from_vector<int64_t>({3, 3, 0}, {3});
  expect_gradcheck([](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], 0); },
                   (std::vector<Tensor>{rnd({3, 4}, 21), t2}));
}

TEST(GradcheckNn, DropoutWithAFixedGenerator) {
  auto fn = [](const std::vector<Tensor>& in) {
    Generator g(77);  // same mask on every call
    return dropout(in[0], 0.4, true, g);
  };
  expect_gradcheck(fn, std::vector<Tensor>{rnd({4, 7}, 22)});
  // eval / p = 0 is the identity (the same tensor)
  Generator g(1);
  Tensor x = rnd({3}, 23);
  EXPECT_EQ(dropout(x, 0.5, false, g).impl(), x.impl());
  EXPECT_EQ(dropout(x, 0.0, true, g).impl(), x.impl());
}

TEST(GradcheckNn, RecordsOnlyWhenNeeded) {
  Tensor x = rnd({3, 4}, 24, false);
  EXPECT_FALSE(softmax(x, 1).requires_grad());
  Tensor w = rnd({4}, 25);
  {
    NoGradGuard ng;
    EXPECT_FALSE(layer_norm(x, w, Tensor()).requires_grad());
  }
  // only w asked for a gradient: x gets none, w gets one
  Tensor y = layer_norm(x, w, Tensor());
  ASSERT_TRUE(y.requires_grad());
  backward(sum(y));
  EXPECT_FALSE(x.grad().defined());
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().shape(), (Shape{4}));
}

TEST(GradcheckNn, BackwardDetectsInPlaceChangeOfSavedInput) {
  Tensor x = rnd({2, 3, 4, 4}, 26);
  Tensor w = rnd({2, 3, 3, 3}, 27);
  Tensor y = strata::conv2d(x, w, Tensor(), {});
  Tensor xd = x.detach();
  ops::fill_(xd, 0.0);  // bumps the shared storage's version
  EXPECT_THROW(backward(y, ops::ones_like(y)), Error);
}

}  // namespace
