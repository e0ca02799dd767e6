// The DDP equivalence harness shared by the local-backend gtests and the mpirun test:
// train the same model on the same data single-process (batch B) and under DDP on N
// ranks (contiguous shards of B/N), then compare the parameters.
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/autograd/grad_mode.h>
#include <strata/comm/process_group.h>
#include <strata/nn/cnn.h>
#include <strata/nn/gpt.h>
#include <strata/nn/llama.h>
#include <strata/nn/mlp.h>
#include <strata/optim/adam.h>
#include <strata/optim/sgd.h>
#include <strata/parallel/data/ddp.h>
#include <strata/parallel/parallelize.h>

namespace strata::testing {

struct EquivCase {
  std::string model = "mlp";  // mlp | cnn | cnn_bn | gpt (tied embeddings, mean token loss) | llama (GQA, untied)
  std::string optim = "sgd";  // sgd | adam
  int steps = 3;
  int64_t batch = 12;  // global batch B (divisible by N * accum)
  int accum = 1;       // micro-batches per step per rank; the first accum-1 under no_sync
  bool optimizer_zero_grad = false;  // zero through the optimizer instead of the DDP handle
  parallel::DDPOptions ddp{};
  Device device = kCPU;  // where each rank's replica trains (the reference always runs on the CPU)
};

inline constexpr uint64_t kModelSeed = 1234;
inline constexpr int64_t kClasses = 5;

inline std::shared_ptr<nn::Module> make_model(const std::string& kind, uint64_t seed) {
  Generator gen(seed);
  if (kind == "gpt" || kind == "gpt_ckpt")  // gpt_ckpt: activation checkpointing of every block
    return std::make_shared<nn::GPT>(
        nn::GPTConfig{.vocab = 16, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 8, .checkpoint = kind == "gpt_ckpt"},
        gen);
  if (kind == "llama" || kind == "llama_ckpt") {  // 4 query heads on 2 key/value heads, untied head
    // In f64, as the context-parallel harness runs: the Llama's small weights (N(0, 0.02),
    // no LayerNorm or bias of size 1 in any tensor) make this harness's relative measure
    // see Adam's amplified f32 rounding (~4e-5 of a tensor's largest element after 3
    // steps at N = 3); in f64 that noise is gone and any layout error stands out.
    auto m = std::make_shared<nn::Llama>(nn::LlamaConfig{.vocab = 16, .block_size = 8, .n_layer = 2, .n_head = 4,
                                                         .n_kv_head = 2, .n_embd = 16, .intermediate_size = 24,
                                                         .checkpoint = kind == "llama_ckpt"},
                                         gen);
    m->to(DType::f64);
    return m;
  }
  if (kind == "mlp") return std::make_shared<nn::MLP>(nn::MLPConfig{.input = 16, .hidden = {12, 10}, .classes = kClasses}, gen);
  nn::CNNConfig c{.in_channels = 1, .channels = {3, 4}, .classes = kClasses, .batch_norm = kind == "cnn_bn",
                  .dropout = 0.0, .image_size = 8, .hidden = 10};
  return std::make_shared<nn::CNN>(c, gen);
}

inline parallel::OptimizerFactory optimizer_factory(const std::string& kind) {
  return [kind](optim::NamedTensors params) -> std::unique_ptr<optim::Optimizer> {
    if (kind == "adam") return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions{.lr = 1e-2});
    return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  };
}

inline std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& kind, const nn::Module& m) {
  return optimizer_factory(kind)(m.named_parameters());
}

/// The layout `dims` over `group` through parallel::parallelize(), as strata train builds
/// it (the mesh borrows the group: it must outlive the result).
inline std::unique_ptr<parallel::ParallelModel> parallelize_on(comm::ProcessGroup& group,
                                                               std::shared_ptr<nn::Module> model, int zero_stage,
                                                               const parallel::DDPOptions& ddp, bool prefetch,
                                                               const std::string& optim) {
  std::shared_ptr<comm::ProcessGroup> world(&group, [](comm::ProcessGroup*) {});
  const parallel::ParallelDims dims = parallel::ParallelDims{.zero_stage = zero_stage}.resolve(group.size());
  return parallel::parallelize(std::move(model), comm::DeviceMesh(world, dims.mesh_shape()),
                               {.dims = dims,
                                .ddp = ddp,
                                .fsdp_prefetch = prefetch,
                                .fsdp_wrap = {},
                                .make_optimizer = optimizer_factory(optim)});
}

/// Deterministic batch of step `step`: inputs (B, 16), (B, 1, 8, 8) or tokens (B, 8),
/// targets (B) or (B, 8) i64.
inline std::pair<Tensor, Tensor> make_batch(const std::string& model, int64_t batch, int step) {
  Generator g(9000 + uint64_t(step));
  auto ints = [&](Shape s, int64_t hi) {
    std::vector<int64_t> t(size_t(shape_numel(s)));
    auto uv = ops::uniform({int64_t(t.size())}, 0.0, double(hi), g).to_vector<float>();
    for (size_t i = 0; i < t.size(); ++i) t[i] = std::min<int64_t>(hi - 1, int64_t(uv[i]));
    return ops::from_vector(t, s);
  };
  if (model.rfind("gpt", 0) == 0 || model.rfind("llama", 0) == 0) return {ints({batch, 8}, 16), ints({batch, 8}, 16)};
  Shape s = model == "mlp" ? Shape{batch, 16} : Shape{batch, 1, 8, 8};
  Tensor x = ops::normal(s, 0.0, 1.0, g);
  return {x, ints({batch}, kClasses)};
}

/// The mean loss of one batch (GPT, Llama: the next-token loss; classifiers: cross-entropy).
inline Tensor batch_loss(nn::Module& m, const Tensor& x, const Tensor& y) {
  if (auto* gpt = dynamic_cast<nn::GPT*>(&m)) return gpt->loss(x, y);
  if (auto* llama = dynamic_cast<nn::Llama*>(&m)) return llama->loss(x, y);
  return cross_entropy(m.forward(x), y);
}

/// Buckets of `plan` holding only parameters with index >= `first`: all of them are ready,
/// and launched, once parameter `first`'s gradient has arrived (gradients come in reverse
/// order of registration).
inline int64_t buckets_only_from(const parallel::BucketPlan& plan, int first) {
  int64_t n = 0;
  for (const auto& b : plan.buckets) n += std::all_of(b.params.begin(), b.params.end(), [&](int i) { return i >= first; });
  return n;
}

/// The loss of one step averaged over the ranks of `group` (collective): with equal
/// shards, the loss of the full batch.
inline double rank_mean(comm::ProcessGroup& group, double v) {
  return comm::all_reduce_host(group, ops::full({1}, v, DType::f64), comm::ReduceOp::avg).item<double>();
}

/// Single-process reference after c.steps steps. Without BatchNorm it trains on the full
/// batch B (its loss per step goes to `losses` when given). With BatchNorm, whose batch
/// statistics DDP takes per rank, it accumulates the N shards' gradients (loss / N each)
/// and keeps the running statistics shard 0 produced, which is what broadcast_buffers
/// leaves on every rank.
inline nn::NamedTensors reference_state(const EquivCase& c, int n, std::vector<double>* losses = nullptr) {
  auto model = make_model(c.model, kModelSeed);
  auto opt = make_optimizer(c.optim, *model);
  const bool bn = c.model == "cnn_bn";
  for (int s = 0; s < c.steps; ++s) {
    auto [x, y] = make_batch(c.model, c.batch, s);
    if (!bn) {
      Tensor loss = batch_loss(*model, x, y);
      if (losses) losses->push_back(loss.item<double>());
      backward(loss);
    } else {
      const int64_t per = c.batch / n;
      nn::NamedTensors after_shard0;
      for (int r = 0; r < n; ++r) {
        Tensor xr = ops::narrow(x, 0, r * per, per), yr = ops::narrow(y, 0, r * per, per);
        backward(cross_entropy(model->forward(xr), yr) * (1.0 / double(n)));
        if (r == 0)
          for (auto& [name, b] : model->named_buffers()) after_shard0.emplace_back(name, ops::clone(b));
      }
      for (auto& [name, b] : model->named_buffers())
        for (auto& [n0, v] : after_shard0)
          if (n0 == name) {
            Tensor dst = b;
            ops::copy_(dst, v);
          }
    }
    opt->step();
    opt->zero_grad();
  }
  return model->state_dict();
}

/// One step's forward and backward on this rank's share of (x, y): `accum` micro-batches of
/// `micro` rows from row rank * per, gradients synchronised only on the last (no_sync
/// before it), as PyTorch's DDP gradient accumulation. `w` is a DDP-like wrapper
/// (forward_with, finalize, no_sync). Returns the sum of the micro-batches' losses / accum
/// when `want_loss` (reading a loss waits for the device), else 0.
template <class Wrapper>
double accumulate_micro_batches(Wrapper& w, nn::Module& model, const Tensor& x, const Tensor& y, int rank,
                                int64_t per, int accum, bool want_loss) {
  const int64_t micro = per / accum;
  double step_loss = 0;
  for (int m = 0; m < accum; ++m) {
    Tensor xm = ops::narrow(x, 0, rank * per + m * micro, micro), ym = ops::narrow(y, 0, rank * per + m * micro, micro);
    auto step_micro = [&] {
      Tensor loss = w.forward_with([&] { return batch_loss(model, xm, ym); }) * (1.0 / double(accum));
      if (want_loss) step_loss += loss.item<double>();
      backward(loss);
      w.finalize();
    };
    if (m + 1 < accum) {
      auto guard = w.no_sync();
      step_micro();
    } else {
      step_micro();
    }
  }
  return step_loss;
}

/// Trains under DDP on this rank of `group` (model and batches on c.device; the layout
/// built by parallelize(), DDP at N > 1) and returns the state (parameters and buffers,
/// after a final buffer sync). Each rank starts from a different init, so the wrap-time
/// broadcast is exercised too. `losses`: the loss of each step averaged over the ranks
/// (collective).
inline nn::NamedTensors ddp_state(comm::ProcessGroup& group, const EquivCase& c,
                                  std::vector<double>* losses = nullptr) {
  const int n = group.size(), r = group.rank();
  auto model = make_model(c.model, r == 0 ? kModelSeed : kModelSeed + 77 * uint64_t(r));
  model->to(c.device);
  auto pm = parallelize_on(group, model, /*zero_stage=*/0, c.ddp, /*prefetch=*/true, c.optim);
  STRATA_CHECK(pm->ddp() != nullptr || n == 1, "[test] parallelize applied no DDP at ", n, " ranks");
  STRATA_CHECK(c.batch % (int64_t(n) * c.accum) == 0, "[test] batch ", c.batch, " does not split into ", n,
               " ranks x ", c.accum, " micro-batches");
  const int64_t per = c.batch / n;
  for (int s = 0; s < c.steps; ++s) {
    auto [xb, yb] = make_batch(c.model, c.batch, s);
    const double step_loss = accumulate_micro_batches(*pm, *model, xb.to(c.device), yb.to(c.device), r, per, c.accum,
                                                     losses != nullptr);
    if (losses) losses->push_back(rank_mean(group, step_loss));
    pm->step();
    if (c.optimizer_zero_grad)
      pm->optimizer().zero_grad();
    else
      pm->zero_grad();
  }
  if (pm->ddp()) pm->ddp()->sync_buffers();
  return model->state_dict();
}

/// Largest over tensors of max|a - b| / max(max|b|, 1e-3); names a mismatch in `worst`.
inline double max_relative_error(const nn::NamedTensors& a, const nn::NamedTensors& b, std::string* worst) {
  double err = 0;
  if (a.size() != b.size()) {
    if (worst) *worst = "different number of tensors";
    return INFINITY;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || a[i].second.shape() != b[i].second.shape()) {
      if (worst) *worst = "mismatched entry " + a[i].first + " vs " + b[i].first;
      return INFINITY;
    }
    auto va = a[i].second.to_vector<double>(), vb = b[i].second.to_vector<double>();
    double diff = 0, scale = 1e-3;
    for (size_t k = 0; k < va.size(); ++k) {
      diff = std::max(diff, std::abs(va[k] - vb[k]));
      scale = std::max(scale, std::abs(vb[k]));
    }
    if (diff / scale > err) {
      err = diff / scale;
      if (worst) *worst = a[i].first;
    }
  }
  return err;
}

inline void expect_close(const Tensor& a, const Tensor& b, double tol, const char* what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i)
    ASSERT_NEAR(va[i], vb[i], tol * (1.0 + std::abs(vb[i]))) << what << " element " << i;
}

}  // namespace strata::testing
