// Analytic FLOP counts per sample and a quick GEMM peak (see flops.h).
#include "apps/flops.h"

#include "apps/model_family.h"

#include <algorithm>
#include <chrono>

#include <strata/tensor/ops.h>

namespace strata::apps {

double train_flops_per_sample(const TrainConfig& cfg) { return model_family(cfg).spec(cfg).flops_per_sample; }

double measured_gemm_flops() {
  constexpr int64_t n = 1024;
  Generator g(0);
  const Tensor a = ops::normal({n, n}, 0, 1, g), b = ops::normal({n, n}, 0, 1, g);
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor c = ops::matmul(a, b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0 && s > 0) best = std::max(best, 2.0 * double(n * n * n) / s);  // the first warms up
  }
  return best;
}

}  // namespace strata::apps
