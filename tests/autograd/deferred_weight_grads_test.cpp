// DeferWeightGrads (zero-bubble pipelines): inside the scope, linear, linear_gelu and
// linear_residual leave their weight's gradient to the deferred work; the input, bias and
// residual gradients arrive at once, and after run_deferred() every gradient is the one a
// plain backward gives, bit for bit, with the weight's post-accumulate hook fired then.
#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/tensor/ops.h>
#include "tests/test_tensors.h"

using namespace strata;

namespace {

struct Leaves {
  Tensor x, w, b, r;
};

Leaves leaves() {
  return {strata::testing::leaf64({2, 3, 4}, 1), strata::testing::leaf64({5, 4}, 2, -1, 1),
          strata::testing::leaf64({5}, 3), strata::testing::leaf64({2, 3, 5}, 4)};
}

// y = f(leaves); loss = sum(y * y): a gradient that depends on y.
Tensor loss_of(int which, const Leaves& l) {
  Tensor y = which == 0   ? linear(l.x, l.w, l.b)
             : which == 1 ? linear_gelu(l.x, l.w, l.b, /*tanh_approx=*/true)
                          : linear_residual(l.x, l.w, l.b, l.r);
  return sum(mul(y, y));
}

std::vector<double> values(const Tensor& t) { return t.defined() ? t.to_vector<double>() : std::vector<double>{}; }

}  // namespace

TEST(DeferWeightGrads, WeightGradientWaitsForRunDeferredAndEqualsThePlainBackward) {
  for (int which : {0, 1, 2}) {
    SCOPED_TRACE(which == 0 ? "linear" : which == 1 ? "linear_gelu" : "linear_residual");
    const Leaves a = leaves();
    backward(loss_of(which, a));

    Leaves b = leaves();
    int hooked = 0;
    b.w.register_post_accumulate_grad_hook([&](const Tensor&) { ++hooked; });
    DeferredGrads work;
    {
      DeferWeightGrads scope(work);
      EXPECT_EQ(DeferWeightGrads::active(), &work);
      backward(loss_of(which, b));
    }
    EXPECT_EQ(DeferWeightGrads::active(), nullptr);
    ASSERT_EQ(work.size(), 1u);
    EXPECT_FALSE(b.w.grad().defined()) << "the weight's gradient came before W";
    EXPECT_EQ(hooked, 0);
    EXPECT_EQ(values(b.x.grad()), values(a.x.grad()));
    EXPECT_EQ(values(b.b.grad()), values(a.b.grad()));
    if (which == 2) {
      EXPECT_EQ(values(b.r.grad()), values(a.r.grad()));
    }
    run_deferred(work);
    EXPECT_TRUE(work.empty());
    EXPECT_EQ(hooked, 1);
    EXPECT_EQ(values(b.w.grad()), values(a.w.grad()));
  }
}

TEST(DeferWeightGrads, ANonLeafWeightIsNotDeferred) {
  // A weight computed from a leaf (as an autocast copy is) gets its gradient in the
  // backward: the engine must carry it on to the leaf.
  const Leaves a = leaves();
  Tensor w2 = mul(a.w, 2.0);
  DeferredGrads work;
  {
    DeferWeightGrads scope(work);
    backward(sum(linear(a.x, w2, a.b)));
  }
  EXPECT_TRUE(work.empty());
  EXPECT_TRUE(a.w.grad().defined());
}
