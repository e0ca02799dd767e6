// The smallest strata program: fit y = 3x - 1 with autograd and plain SGD, using
// only the installed headers and libraries. Exits 0 when the fit converged.
#include <cmath>
#include <cstdio>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"

int main() {
  using namespace strata;
  Generator gen(0);
  Tensor x = ops::uniform({64, 1}, -1, 1, gen);
  Tensor y = ops::binary_scalar(ops::BinaryOp::sub, ops::binary_scalar(ops::BinaryOp::mul, x, 3.0), 1.0);
  Tensor w = ops::zeros({1, 1});
  Tensor b = ops::zeros({1});
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  double loss_v = 0;
  for (int step = 0; step < 200; ++step) {
    Tensor err = linear(x, w, b) - y;
    Tensor loss = mean(err * err);
    loss_v = loss.item<double>();
    backward(loss);
    NoGradGuard ng;
    for (Tensor* p : {&w, &b}) {
      ops::add_(*p, p->grad(), -0.5);
      p->set_grad(Tensor());
    }
  }
  std::printf("w=%.4f b=%.4f loss=%.2e\n", w.item<double>(), b.item<double>(), loss_v);
  return (std::abs(w.item<double>() - 3) < 1e-3 && std::abs(b.item<double>() + 1) < 1e-3) ? 0 : 1;
}
