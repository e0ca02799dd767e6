// Context parallelism's memory promise measured with the allocator: the activations a
// rank keeps from forward to backward at cp 2 are about half of cp 1's at the same global
// batch (less: cp 1's fused attention keeps B H T^2 probabilities, ring attention none),
// and each measurement is close to the planner's formula (cp_activation_bytes).
#include <gtest/gtest.h>

#include <cstdio>

#include <strata/autograd/engine.h>
#include <strata/comm/local.h>
#include <strata/core/memory.h>
#include <strata/nn/gpt.h>
#include <strata/optim/adam.h>
#include <strata/parallel/parallelize.h>

namespace strata::parallel {
namespace {

// Activation bytes per rank held after the forward (the graph alive) and the peak over a
// whole step (forward, backward, step), both the ranks' totals / cp.
std::pair<int64_t, int64_t> activations_at(int cp, const nn::GPTConfig& cfg, int64_t batch) {
  int64_t held = 0, peak = 0;
  comm::run_local(cp, [&](comm::ProcessGroup& w) {
    std::shared_ptr<comm::ProcessGroup> world(&w, [](comm::ProcessGroup*) {});
    Generator gen(3);
    auto model = std::make_shared<nn::GPT>(cfg, gen);
    const ParallelDims dims = ParallelDims{.cp = cp}.resolve(cp);
    auto pm = parallelize(model, comm::DeviceMesh(world, dims.mesh_shape()),
                          {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {}, .tp_plan = {},
                           .make_optimizer = [](optim::NamedTensors p) {
                             return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{});
                           }});
    Generator d(4);
    const double v = double(cfg.vocab);
    const Tensor idx = ops::to_dtype(ops::uniform({batch, cfg.block_size}, 0, v - 0.5, d), DType::i64);
    const Tensor tgt = ops::to_dtype(ops::uniform({batch, cfg.block_size}, 0, v - 0.5, d), DType::i64);
    auto step = [&](bool measure) {
      w.barrier().wait();
      const int64_t before = cpu_memory().stats(MemCategory::activations).current;
      if (measure && w.rank() == 0) cpu_memory().reset_peaks();
      w.barrier().wait();
      Tensor loss = pm->forward_with([&] { return model->loss(idx, tgt); });
      w.barrier().wait();
      if (measure && w.rank() == 0) held = (cpu_memory().stats(MemCategory::activations).current - before) / cp;
      w.barrier().wait();
      backward(loss);
      pm->finalize();
      pm->step();
      pm->zero_grad();
      w.barrier().wait();
      if (measure && w.rank() == 0) peak = (cpu_memory().stats(MemCategory::activations).peak - before) / cp;
      w.barrier().wait();
    };
    step(false);  // optimizer state and gradients allocated once
    step(true);
  });
  return {held, peak};
}

TEST(CpMemory, Cp2HalvesTheActivationsAndMatchesThePlan) {
  const nn::GPTConfig cfg{.vocab = 64, .block_size = 128, .n_layer = 2, .n_head = 4, .n_embd = 32};
  const int64_t batch = 2;
  const auto [held1, peak1] = activations_at(1, cfg, batch);
  const auto [held2, peak2] = activations_at(2, cfg, batch);
  CpActivationInput in{.batch = batch, .seq = cfg.block_size, .embd = cfg.n_embd, .heads = cfg.n_head,
                       .layers = cfg.n_layer, .vocab = cfg.vocab, .bytes_per_element = 4, .cp = 1};
  const int64_t plan1 = cp_activation_bytes(in);
  in.cp = 2;
  const int64_t plan2 = cp_activation_bytes(in);
  std::printf("activations per rank held after forward: cp 1 %lld (plan %lld), cp 2 %lld (plan %lld); step peak cp 1 "
              "%lld, cp 2 %lld\n",
              (long long)held1, (long long)plan1, (long long)held2, (long long)plan2, (long long)peak1, (long long)peak2);
  // Not quite half: each rank's ring attention keeps its own copy of q|k|v per layer (3 N C),
  // where cp 1's fused op keeps only the rows' log-sum-exp.
  EXPECT_LT(double(held2), 0.6 * double(held1));
  EXPECT_LT(double(peak2), 0.6 * double(peak1));
  // The plan within 3% at both degrees (measured: +2.9% at cp 1, -2.0% at cp 2).
  EXPECT_NEAR(double(held1), double(plan1), 0.03 * double(plan1));
  EXPECT_NEAR(double(held2), double(plan2), 0.03 * double(plan2));
}

}  // namespace
}  // namespace strata::parallel
