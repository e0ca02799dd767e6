// Tensor parallelism trains the same model as one process: the MLP and the GPT at tp 2
// and 4 (vocabulary-parallel wte and head, tied and untied, with and without sequence
// parallelism and activation checkpointing), and dp 2 x tp 2 with DDP and ZeRO, after k
// AdamW steps with global-norm clipping (gathered parameters, losses and norms to 1e-5),
// all on local ranks.
#include <gtest/gtest.h>

#include "tp_harness.h"

namespace strata::parallel {
namespace {

namespace st = strata::testing;
using namespace strata::testing::tp;  // NOLINT: test harness

TEST(TensorParallel, MlpEqualsOneProcess) {
  check({.model = "mlp", .tp = 2});
  check({.model = "mlp", .tp = 4});
}

TEST(TensorParallel, MlpDp2Tp2WithDdpAndZero) {
  for (int stage : {0, 1, 3}) check({.model = "mlp", .dp = 2, .tp = 2, .stage = stage});
}

TEST(TensorParallel, GptEqualsOneProcess) {
  check({.model = "gpt", .tp = 2});  // the tied wte/head vocabulary-parallel
  check({.model = "gpt", .tp = 4});
  check({.model = "gpt", .vocab = false, .tp = 2});  // blocks only, embeddings replicated
}

TEST(TensorParallel, GptUntiedVocabParallelHead) {
  check({.model = "gpt_untied", .tp = 2});
  check({.model = "gpt_untied", .tp = 4});
}

TEST(TensorParallel, GptWithActivationCheckpointing) {
  check({.model = "gpt_ckpt", .tp = 2});
  check({.model = "gpt_ckpt", .tp = 4});
}

TEST(TensorParallel, GptSequenceParallel) {
  check({.model = "gpt", .sp = true, .tp = 2});
  check({.model = "gpt", .sp = true, .tp = 4});
  check({.model = "gpt_untied", .sp = true, .tp = 2});
  check({.model = "gpt_untied", .sp = true, .tp = 4});
}

TEST(TensorParallel, GptSequenceParallelWithActivationCheckpointing) {
  check({.model = "gpt_ckpt", .sp = true, .tp = 2});
  check({.model = "gpt_untied_ckpt", .sp = true, .tp = 4});
}

TEST(TensorParallel, GptDp2Tp2WithZero1) {
  check({.model = "gpt", .dp = 2, .tp = 2, .stage = 1});
  check({.model = "gpt", .sp = true, .dp = 2, .tp = 2, .stage = 1});
}

// The Llama under its family's plan: wq, wk, wv, w1, w3 column-parallel, wo, w2
// row-parallel, 4 query heads on 2 key/value heads (one kv head per rank at tp 2), the
// untied output and tok_embeddings vocabulary-parallel; with sequence parallelism (every
// RMSNorm on sequence shards), the tied head, activation checkpointing and dp 2 x tp 2.
TEST(TensorParallel, LlamaGqaWithSequenceParallel) {
  check({.model = "llama", .tp = 2});
  check({.model = "llama", .sp = true, .tp = 2});
  check({.model = "llama_tied", .sp = true, .tp = 2});
  check({.model = "llama_ckpt", .sp = true, .tp = 2});
  check({.model = "llama", .sp = true, .dp = 2, .tp = 2, .stage = 1});
}

TEST(TensorParallel, SequenceParallelNeedsAVocabParallelHead) {
  comm::run_local(2, [](comm::ProcessGroup& w) {
    std::shared_ptr<comm::ProcessGroup> tp(&w, [](comm::ProcessGroup*) {});
    auto m = tp_model("gpt_untied", 1);
    TpPlan plan = tp_plan("gpt_untied", true, true);
    plan.erase("lm_head");
    EXPECT_THROW(apply_tp(*m, plan, tp), Error);
    EXPECT_EQ(m->child("ln_f")->type_name(), "LayerNorm");  // untouched
    EXPECT_THROW(apply_tp(*st::make_model("mlp", 1), {{"net.1", TpStyle::sequence_norm}}, tp), Error);
  });
}

// Megatron's RNG rule: dropout inside a tp region (attention probabilities of this rank's
// heads) draws different masks on each tp rank, dropout on the replicated residual stream
// identical ones, so the replicated parameters stay equal over tp while training. Under
// sequence parallelism the residual stream is split along T, and its dropouts (drop,
// resid_dropout, mlp.dropout) draw masks of their own per rank too (Megatron forks the
// tracker there); the replicated parameters still stay equal (their gradients are summed).
TEST(TensorParallel, DropoutMasksDifferInsideRegionsAndAgreeOutside) {
  for (bool sp : {false, true})
    comm::run_local(2, [sp](comm::ProcessGroup& w) {
      std::shared_ptr<comm::ProcessGroup> world(&w, [](comm::ProcessGroup*) {});
      Generator gen(100 + uint64_t(w.rank()));  // different generators on each rank before apply_tp
      auto model = std::make_shared<nn::GPT>(
          nn::GPTConfig{.vocab = 16, .block_size = 8, .n_layer = 2, .n_head = 4, .n_embd = 16, .dropout = 0.3}, gen);
      const ParallelDims dims = ParallelDims{.tp = 2}.resolve(2);
      auto pm = parallelize(model, comm::DeviceMesh(world, dims.mesh_shape()),
                            {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {},
                             .tp_plan = tp_plan("gpt", true, sp), .make_optimizer = adamw});
      const auto same_over_tp = [&](const Tensor& t) {
        const auto all = comm::all_gather_host(w, ops::contiguous(t)).to_vector<float>();
        return std::equal(all.begin(), all.begin() + long(all.size() / 2), all.begin() + long(all.size() / 2));
      };
      const Tensor ones = ops::full({4, 64}, 1.0);
      EXPECT_FALSE(same_over_tp(model->child("h.0.attn.attn_dropout")->forward(ones)));
      EXPECT_EQ(same_over_tp(model->child("h.0.attn.resid_dropout")->forward(ones)), !sp);
      EXPECT_EQ(same_over_tp(model->child("h.1.mlp.dropout")->forward(ones)), !sp);
      EXPECT_EQ(same_over_tp(model->child("drop")->forward(ones)), !sp);
      for (int s = 0; s < 2; ++s) {
        auto [x, y] = st::make_batch("gpt", 4, s);
        backward(pm->forward_with([&] { return model->loss(x, y); }));
        pm->finalize();
        pm->step();
        pm->zero_grad();
      }
      for (const char* name : {"ln_f.weight", "wpe.weight", "h.1.attn.c_proj.bias", "h.1.ln_2.bias"})
        EXPECT_TRUE(same_over_tp(model->parameter(name))) << name << (sp ? " (sp)" : "");
      EXPECT_FALSE(same_over_tp(model->parameter("h.1.mlp.c_fc.weight")));  // a shard: different
    });
}

TEST(TensorParallel, AModelWithoutAPlanIsAConfigError) {
  comm::run_local(2, [](comm::ProcessGroup& w) {
    std::shared_ptr<comm::ProcessGroup> world(&w, [](comm::ProcessGroup*) {});
    const ParallelDims dims = ParallelDims{.tp = 2}.resolve(2);
    try {
      parallelize(st::make_model("cnn", 1), comm::DeviceMesh(world, dims.mesh_shape()),
                  {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {}, .tp_plan = {}, .make_optimizer = adamw});
      ADD_FAILURE() << "no error";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), "parallel.tp: is 2 but the model (CNN) has no tensor-parallel plan (use tp: 1)");
    }
  });
}

TEST(TensorParallel, APlanEntryMustNameALinear) {
  comm::run_local(2, [](comm::ProcessGroup& w) {
    std::shared_ptr<comm::ProcessGroup> tp(&w, [](comm::ProcessGroup*) {});
    auto m = st::make_model("mlp", 1);
    EXPECT_THROW(apply_tp(*m, {{"net.2", TpStyle::colwise}}, tp), Error);  // the activation
    EXPECT_THROW(apply_tp(*m, {{"net.9", TpStyle::colwise}}, tp), Error);  // absent
    // A bad entry anywhere in the plan leaves the model untouched.
    EXPECT_THROW(apply_tp(*m, {{"net.1", TpStyle::colwise}, {"net.3", TpStyle::colwise_qkv}}, tp), Error);
    EXPECT_EQ(m->child("net.1")->type_name(), "Linear");
  });
}

}  // namespace
}  // namespace strata::parallel
