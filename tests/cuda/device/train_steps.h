// Training steps of one model on the GPU and its twin on the CPU (same init), shared by
// the CUDA model tests: the same batches through AdamW, losses compared every step.
#pragma once
#include <functional>
#include <string>

#include "tests/test_tensors.h"
#include "../cuda_test_util.h"
#include <strata/autograd/engine.h>
#include <strata/nn/module.h>
#include <strata/optim/adam.h>

namespace strata::test {

/// Every parameter of gpu_m (on the GPU) equals cpu_m's within tol.
inline void expect_same_params(const nn::Module& gpu_m, const nn::Module& cpu_m, Tol tol, const std::string& when) {
  const auto g = gpu_m.named_parameters(), c = cpu_m.named_parameters();
  ASSERT_EQ(g.size(), c.size());
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(g[i].first, c[i].first);
    EXPECT_EQ(g[i].second.device(), kGpu) << g[i].first;
    expect_close(g[i].second, c[i].second, tol, when + " param " + g[i].first);
  }
}

/// Three AdamW steps of a token model (loss(idx, targets)) on (4, 16) random batches of
/// `vocab` tokens, both models alike; the losses agree to 1e-5 relative at every step.
/// after_backward(step) runs once both backward passes are done (gradient checks).
template <class Model>
void expect_adamw_steps_match(Model& cpu_m, Model& gpu_m, int64_t vocab,
                              const std::function<void(int)>& after_backward = {}) {
  // eps 1e-6: an update must not flip with the sign of a gradient that is ~0 up to rounding
  const optim::AdamWOptions opt{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .weight_decay = 0.1};
  optim::AdamW oc(cpu_m.named_parameters(), opt), og(gpu_m.named_parameters(), opt);
  for (int step = 0; step < 3; ++step) {
    const Tensor idx = testing::random_tokens({4, 16}, vocab, 100 + uint64_t(step));
    const Tensor tgt = testing::random_tokens({4, 16}, vocab, 200 + uint64_t(step));
    oc.zero_grad();
    og.zero_grad();
    const Tensor lc = cpu_m.loss(idx, tgt);
    const Tensor lg = gpu_m.loss(idx.to(kGpu), tgt.to(kGpu));
    EXPECT_EQ(lg.device(), kGpu);
    EXPECT_NEAR(lg.template item<double>(), lc.template item<double>(), 1e-5 * std::abs(lc.template item<double>()))
        << "loss at step " << step;
    backward(lc);
    backward(lg);
    if (after_backward) after_backward(step);
    oc.step();
    og.step();
  }
}

}  // namespace strata::test
