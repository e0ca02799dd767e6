// What the tp group sends per training step of the GPT, counted message by message on
// the ring algorithm: Megatron's 2 all-reduces of B*T*C per block in forward (after the
// row-parallel attn.c_proj and mlp.c_proj) and 2 in backward (into the column-parallel
// c_attn and c_fc inputs); with sequence parallelism 2 all-gathers and 2 reduce-scatters
// of B*T*C per block each way in their place, the same volume. Plus the vocabulary-parallel
// embedding and head and their loss, and (SP) the LayerNorm/bias gradient all-reduces.
#include <gtest/gtest.h>

#include "tp_harness.h"

namespace strata::parallel {
namespace {

constexpr int64_t kLayers = 2, kB = 3, kT = 8, kC = 16, kF = 4;  // f32
constexpr int64_t kBTC = kB * kT * kC * kF, kN = kB * kT;          // bytes; rows of the loss

struct StepStats {
  comm::CommStats fwd, bwd;
};

StepStats one_step(comm::ProcessGroup& w, bool sp) {
  std::shared_ptr<comm::ProcessGroup> world(&w, [](comm::ProcessGroup*) {});
  Generator gen(5);
  auto model = std::make_shared<nn::GPT>(
      nn::GPTConfig{.vocab = 16, .block_size = kT, .n_layer = kLayers, .n_head = 4, .n_embd = kC}, gen);
  const TpPlan plan = strata::testing::tp::tp_plan("gpt", /*vocab=*/true, sp);  // kLayers blocks
  const ParallelDims dims = ParallelDims{.tp = w.size()}.resolve(w.size());
  auto pm = parallelize(model, comm::DeviceMesh(world, dims.mesh_shape()),
                        {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {}, .tp_plan = plan,
                         .make_optimizer = [](optim::NamedTensors p) {
                           return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{});
                         }});
  comm::ProcessGroup& tp = *pm->mesh()["tp"];
  EXPECT_EQ(tp.algorithm(), comm::Algorithm::ring);
  auto [x, y] = strata::testing::make_batch("gpt", kB, 0);
  StepStats out;
  tp.reset_stats();
  Tensor loss = pm->forward_with([&] { return model->loss(x, y); });
  out.fwd = tp.stats();
  tp.reset_stats();
  backward(loss);
  pm->finalize();
  pm->step();
  out.bwd = tp.stats();
  return out;
}

// On the ring a rank sends 2 (N-1)/N K of a K-byte all-reduce, (N-1)/N K of an all-gather
// into K bytes and of a reduce-scatter of K bytes.
int64_t ring_all_reduce(int64_t k, int64_t n) { return 2 * (n - 1) * k / n; }
int64_t ring_half(int64_t k, int64_t n) { return (n - 1) * k / n; }

TEST(TensorParallelBytes, TwoAllReducesOfBTCPerBlockEachWay) {
  for (int n : {2, 4})
    comm::run_local(
        n,
        [n](comm::ProcessGroup& w) {
          const StepStats s = one_step(w, /*sp=*/false);
          // Forward: the blocks' 2 per block, the embedding's 1 (its vocabulary ranges
          // summed), and the loss's 3 of N values (max, sum of exp, target logit).
          EXPECT_EQ(s.fwd[comm::OpKind::all_reduce].calls, 2 * kLayers + 1 + 3);
          EXPECT_EQ(s.fwd[comm::OpKind::all_reduce].payload_bytes, (2 * kLayers + 1) * kBTC + 3 * kN * kF);
          EXPECT_EQ(s.fwd.total_bytes_sent(), (2 * kLayers + 1) * ring_all_reduce(kBTC, n) + 3 * ring_all_reduce(kN * kF, n));
          EXPECT_STREQ(s.fwd.total_bytes_kind(), "counted");
          // Backward: the blocks' 2 per block and the head's input (copy_to_tp), nothing else.
          EXPECT_EQ(s.bwd[comm::OpKind::all_reduce].calls, 2 * kLayers + 1);
          EXPECT_EQ(s.bwd.total_bytes_sent(), (2 * kLayers + 1) * ring_all_reduce(kBTC, n));
        },
        comm::CommOptions{.algorithm = comm::Algorithm::ring});
}

TEST(TensorParallelBytes, SequenceParallelGathersAndScattersTheSameVolume) {
  for (int n : {2, 4})
    comm::run_local(
        n,
        [n](comm::ProcessGroup& w) {
          const StepStats s = one_step(w, /*sp=*/true);
          const auto& ag_f = s.fwd[comm::OpKind::all_gather];
          const auto& rs_f = s.fwd[comm::OpKind::reduce_scatter];
          // Forward: per block an all-gather before each column-parallel linear and a
          // reduce-scatter after each row-parallel one; one all-gather after ln_f.
          EXPECT_EQ(ag_f.calls, 2 * kLayers + 1);
          EXPECT_EQ(rs_f.calls, 2 * kLayers);
          EXPECT_EQ(ag_f.bytes_sent, (2 * kLayers + 1) * ring_half(kBTC, n));
          EXPECT_EQ(rs_f.bytes_sent, 2 * kLayers * ring_half(kBTC, n));
          // The blocks' pairs carry what the plain scheme's all-reduces carry.
          EXPECT_EQ(ag_f.bytes_sent - ring_half(kBTC, n) + rs_f.bytes_sent, 2 * kLayers * ring_all_reduce(kBTC, n));
          // The embedding and the loss all-reduce as without SP; the head's input needs no
          // copy_to_tp (the all-gather's backward sums its gradient).
          EXPECT_EQ(s.fwd[comm::OpKind::all_reduce].calls, 1 + 3);
          EXPECT_EQ(s.fwd.total_bytes_sent(), ag_f.bytes_sent + rs_f.bytes_sent + ring_all_reduce(kBTC, n) +
                                                  3 * ring_all_reduce(kN * kF, n));
          // Backward: the conjugates (the gathers' reduce-scatters, the scatters' gathers,
          // the embedding scatter's gather), then the gradients of the parameters applied
          // on sequence shards, summed over tp: weight and bias of 2 LayerNorms per block
          // and of ln_f, and the 2 row-parallel biases per block, C values each.
          const auto& ag_b = s.bwd[comm::OpKind::all_gather];
          const auto& rs_b = s.bwd[comm::OpKind::reduce_scatter];
          EXPECT_EQ(ag_b.calls, 2 * kLayers + 1);
          EXPECT_EQ(rs_b.calls, 2 * kLayers + 1);
          EXPECT_EQ(ag_b.bytes_sent, (2 * kLayers + 1) * ring_half(kBTC, n));
          EXPECT_EQ(rs_b.bytes_sent, (2 * kLayers + 1) * ring_half(kBTC, n));
          const int64_t small = 2 * (2 * kLayers + 1) + 2 * kLayers;
          EXPECT_EQ(s.bwd[comm::OpKind::all_reduce].calls, small);
          EXPECT_EQ(s.bwd.total_bytes_sent(),
                    ag_b.bytes_sent + rs_b.bytes_sent + small * ring_all_reduce(kC * kF, n));
          EXPECT_STREQ(s.bwd.total_bytes_kind(), "counted");
        },
        comm::CommOptions{.algorithm = comm::Algorithm::ring});
}

}  // namespace
}  // namespace strata::parallel
