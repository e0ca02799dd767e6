// conv2d whose input needs no gradient (a network's first layer): the node asks the raw
// op to skip dx; the weight and bias gradients must still match finite differences,
// and the input must get no gradient.
#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/gradcheck.h>

using namespace strata;

namespace {

Tensor rnd(const Shape& s, uint64_t seed, bool grad) {
  Generator g(seed);
  Tensor t = ops::normal(s, 0, 1, g, DType::f64);
  if (grad) t.set_requires_grad(true);
  return t;
}

}  // namespace

TEST(ConvInputGrad, WeightAndBiasGradientsWithoutInputGradient) {
  const Tensor x = rnd({3, 2, 6, 5}, 1, false);
  for (const ops::Conv2dParams& p : {ops::Conv2dParams{1, 1, 1, 1}, ops::Conv2dParams{2, 1, 0, 1}}) {
    const GradcheckResult r = gradcheck(
        [&x, p](const std::vector<Tensor>& in) { return strata::conv2d(x, in[0], in[1], p); },
        std::vector<Tensor>{rnd({4, 2, 3, 3}, 2, true), rnd({4}, 3, true)});
    EXPECT_TRUE(r.ok) << r.message;
  }
  Tensor w = rnd({4, 2, 3, 3}, 4, true);
  backward(sum(strata::conv2d(x, w, Tensor(), {1, 1, 1, 1})));
  EXPECT_FALSE(x.grad().defined());
  ASSERT_TRUE(w.grad().defined());
  // the same weight gradient as with the input gradient computed
  auto [dx, dw, db] = ops::conv2d_backward(ops::ones({3, 4, 6, 5}, DType::f64), x, w.detach(), false, {1, 1, 1, 1});
  EXPECT_EQ(w.grad().to_vector<double>(), dw.to_vector<double>());
}
