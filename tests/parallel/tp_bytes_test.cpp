// What the tp group sends per training step of the GPT, counted message by message on
// the ring algorithm: Megatron's 2 all-reduces of B*T*C per block in forward (after the
// row-parallel attn.c_proj and mlp.c_proj) and 2 in backward (into the column-parallel
// c_attn and c_fc inputs), and nothing else.
#include <gtest/gtest.h>

#include "tp_harness.h"

namespace strata::parallel {
namespace {

TEST(TensorParallelBytes, TwoAllReducesOfBTCPerBlockEachWay) {
  constexpr int64_t kLayers = 2, kB = 3, kT = 8, kC = 16;
  for (int n : {2, 4})
    comm::run_local(
        n,
        [n](comm::ProcessGroup& w) {
          std::shared_ptr<comm::ProcessGroup> world(&w, [](comm::ProcessGroup*) {});
          Generator gen(5);
          auto model = std::make_shared<nn::GPT>(
              nn::GPTConfig{.vocab = 16, .block_size = kT, .n_layer = kLayers, .n_head = 4, .n_embd = kC}, gen);
          const TpPlan plan = strata::testing::tp::tp_plan("gpt");  // kLayers blocks
          const ParallelDims dims = ParallelDims{.tp = n}.resolve(n);
          auto pm = parallelize(model, comm::DeviceMesh(world, dims.mesh_shape()),
                                {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {}, .tp_plan = plan,
                                 .make_optimizer = [](optim::NamedTensors p) {
                                   return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{});
                                 }});
          comm::ProcessGroup& tp = *pm->mesh()["tp"];
          ASSERT_EQ(tp.algorithm(), comm::Algorithm::ring);
          auto [x, y] = strata::testing::make_batch("gpt", kB, 0);
          // A ring all-reduce of K bytes sends 2 (N-1)/N K from every rank.
          const int64_t per_all_reduce = 2 * (n - 1) * (kB * kT * kC * 4) / n;
          tp.reset_stats();
          Tensor loss = pm->forward_with([&] { return model->loss(x, y); });
          comm::CommStats fwd = tp.stats();
          EXPECT_EQ(fwd[comm::OpKind::all_reduce].calls, 2 * kLayers);
          EXPECT_EQ(fwd[comm::OpKind::all_reduce].payload_bytes, 2 * kLayers * kB * kT * kC * 4);
          EXPECT_EQ(fwd.total_bytes_sent(), 2 * kLayers * per_all_reduce);
          EXPECT_STREQ(fwd.total_bytes_kind(), "counted");
          tp.reset_stats();
          backward(loss);
          pm->finalize();
          pm->step();
          comm::CommStats bwd = tp.stats();
          EXPECT_EQ(bwd[comm::OpKind::all_reduce].calls, 2 * kLayers);
          EXPECT_EQ(bwd.total_bytes_sent(), 2 * kLayers * per_all_reduce);
        },
        comm::CommOptions{.algorithm = comm::Algorithm::ring});
}

}  // namespace
}  // namespace strata::parallel
