// The optimizers drive a real autograd graph: softmax regression on linearly
// separable data (with per-class offsets, so the bias must be learned) must fit the
// training set with SGD (momentum, nesterov) and AdamW, scored by the trained model.
#include <gtest/gtest.h>

#include <memory>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/grad_mode.h>
#include <strata/optim/adam.h>
#include <strata/optim/clip.h>
#include <strata/optim/sgd.h>

using namespace strata;

namespace {

double train_accuracy(optim::Optimizer& opt, const Tensor& w, const Tensor& b, const Tensor& x, const Tensor& y,
                      int steps, double clip) {
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    backward(cross_entropy(linear(x, w, b), y));
    if (clip > 0) optim::clip_grad_norm({w, b}, clip);
    opt.step();
  }
  NoGradGuard no_grad;
  const auto pred = ops::argmax(linear(x, w, b), 1).to_vector<int64_t>();  // the trained model, bias included
  const auto lab = y.to_vector<int64_t>();
  int correct = 0;
  for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == lab[i];
  return double(correct) / double(lab.size());
}

}  // namespace

TEST(Convergence, SoftmaxRegressionFitsSeparableData) {
  const int64_t n = 400, d = 6, k = 3;
  Generator g(42);
  Tensor x = ops::normal({n, d}, 0, 1, g);
  // Separable with offsets: a model that does not learn its bias scores far below 0.95.
  const Tensor offsets = ops::from_vector(std::vector<float>{1.5f, 0.0f, -1.5f}, {k});
  Tensor logits = ops::matmul(x, ops::normal({d, k}, 0, 1, g));
  ops::add_(logits, offsets);
  const Tensor y = ops::argmax(logits, 1);
  for (int kind = 0; kind < 3; ++kind) {
    Tensor w = ops::zeros({k, d}), b = ops::zeros({k});
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    std::unique_ptr<optim::Optimizer> opt;
    if (kind == 0) opt = std::make_unique<optim::SGD>(optim::NamedTensors{{"w", w}, {"b", b}}, optim::SGDOptions{.lr = 0.5, .momentum = 0.9});
    if (kind == 1)
      opt = std::make_unique<optim::SGD>(optim::NamedTensors{{"w", w}, {"b", b}},
                                         optim::SGDOptions{.lr = 0.5, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true});
    if (kind == 2) opt = std::make_unique<optim::AdamW>(optim::NamedTensors{{"w", w}, {"b", b}}, optim::AdamWOptions{.lr = 0.05});
    const double acc = train_accuracy(*opt, w, b, x, y, 300, kind == 1 ? 5.0 : 0.0);
    EXPECT_GT(acc, 0.95) << opt->type_name() << " kind " << kind;
    EXPECT_EQ(opt->step_count(), 300);
  }
}
