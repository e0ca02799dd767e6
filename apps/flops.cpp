// Analytic FLOP counts per sample and a quick GEMM peak (see flops.h).
#include "apps/flops.h"

#include "apps/factory.h"

#include <algorithm>
#include <chrono>

#include <strata/tensor/ops.h>

namespace strata::apps {

double train_flops_per_sample(const TrainConfig& cfg, const nn::Module& model) {
  const auto& m = cfg.model;
  if (m.type == "gpt") {
    const double n = double(model.num_parameters()), t = double(m.block_size);
    return (6.0 * n + 12.0 * double(m.n_layer) * double(m.n_embd) * t) * t;
  }
  double forward = 0;
  int64_t spatial = 28;  // Fashion-MNIST (and the CNN's image_size default)
  if (m.type == "cnn") {  // the image side: from the config, or the images file's header (idx, npy)
    const Shape in = input_shape(cfg);
    if (in.size() == 3) spatial = in[2];
  }
  for (const auto& [name, p] : model.named_parameters()) {
    if (p.dim() == 2) {
      forward += 2.0 * double(p.numel());  // Linear: 2·in·out
    } else if (p.dim() == 4) {
      forward += 2.0 * double(p.numel()) * double(spatial * spatial);  // conv at this block's resolution
      spatial /= 2;                                                    // then pooled
    }
  }
  return 3.0 * forward;
}

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
