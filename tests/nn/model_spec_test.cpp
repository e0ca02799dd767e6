// Each family's planner description (nn/gpt_spec.h, llama_spec.h, mlp_spec.h, cnn_spec.h)
// equals the module it describes: names, shapes and order of named_parameters(), the TP
// plan's sharded set, the pipeline parts, the FLOPs of a sample, and for a mixture of
// experts the expert weights and the active parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <strata/nn/cnn.h>
#include <strata/nn/cnn_spec.h>
#include <strata/nn/gpt.h>
#include <strata/nn/gpt_plans.h>
#include <strata/nn/gpt_spec.h>
#include <strata/nn/llama.h>
#include <strata/nn/llama_plans.h>
#include <strata/nn/llama_spec.h>
#include <strata/nn/mlp.h>
#include <strata/nn/mlp_plans.h>
#include <strata/nn/mlp_spec.h>

using namespace strata;

namespace {

// The spec lists `model`'s parameters, in order, with their shapes, and counts them.
void expect_matches(const nn::ModelSpec& spec, const nn::Module& model, const std::string& what) {
  const auto named = model.named_parameters();
  ASSERT_EQ(spec.params.size(), named.size()) << what;
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(spec.params[i].name, named[i].first) << what;
    EXPECT_EQ(spec.params[i].shape, named[i].second.shape()) << what << " " << named[i].first;
  }
  EXPECT_EQ(spec.total, model.num_parameters()) << what;
}

// The elements of the parameters `plan` names (every parameter of a colwise, colwise_qkv
// or vocab_parallel module, a rowwise module's weight), read from the built model.
int64_t plan_elements(const nn::Module& model, const nn::TpPlan& plan) {
  int64_t n = 0;
  for (const auto& [path, style] : plan) {
    if (style == nn::TpStyle::parallel_rng || style == nn::TpStyle::sequence_norm) continue;
    for (const auto& [name, t] : model.child(path)->named_parameters())
      if (style != nn::TpStyle::rowwise || name == "weight") n += t.numel();
  }
  return n;
}

std::vector<nn::GPTConfig> gpt_configs() {
  return {{.vocab = 16, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 8},
          {.vocab = 30, .block_size = 6, .n_layer = 3, .n_head = 4, .n_embd = 16, .tie_weights = false},
          {.vocab = 12, .block_size = 4, .n_layer = 1, .n_head = 1, .n_embd = 4, .dropout = 0.1, .bias = false},
          {.vocab = 12, .block_size = 4, .n_layer = 2, .n_head = 2, .n_embd = 4, .tie_weights = false, .bias = false}};
}

}  // namespace

TEST(ModelSpec, GptEqualsTheBuiltModel) {
  for (const nn::GPTConfig& c : gpt_configs()) {
    const std::string what = "GPT L" + std::to_string(c.n_layer) + (c.tie_weights ? " tied" : " untied") +
                             (c.bias ? "" : " no bias");
    Generator gen(0);
    const nn::GPT model(c, gen);
    const nn::ModelSpec spec = nn::gpt_spec(c);
    expect_matches(spec, model, what);
    EXPECT_EQ(spec.tp_sharded, plan_elements(model, nn::gpt_tp_plan(c))) << what;
    // The pipeline parts: block h.i's parameters in block i; wte and wpe first; ln_f and the
    // head last; a tied wte on both ends.
    ASSERT_EQ(spec.block_params.size(), size_t(c.n_layer)) << what;
    const auto blocks = model.blocks()->named_children();
    for (size_t l = 0; l < blocks.size(); ++l) EXPECT_EQ(spec.block_params[l], blocks[l].second->num_parameters()) << what;
    const int64_t wte = c.vocab * c.n_embd, wpe = c.block_size * c.n_embd, ln_f = (c.bias ? 2 : 1) * c.n_embd;
    EXPECT_EQ(spec.first_params, wte + wpe) << what;
    EXPECT_EQ(spec.last_params, ln_f + wte) << what;  // the tied wte, or an untied lm_head of the same shape
    EXPECT_EQ(spec.tied_params, c.tie_weights ? wte : 0) << what;
    const double t = double(c.block_size);
    EXPECT_DOUBLE_EQ(spec.flops_per_sample,
                     (6.0 * double(model.num_parameters()) + 12.0 * double(c.n_layer * c.n_embd) * t) * t)
        << what;
    EXPECT_EQ(spec.stage_output_per_sample, c.block_size * c.n_embd) << what;
  }
}

TEST(ModelSpec, MlpEqualsTheBuiltModel) {
  const std::vector<nn::MLPConfig> configs = {
      {.input = 16, .hidden = {32}, .classes = 4},
      {.input = 12, .hidden = {8, 6}, .classes = 3, .dropout = 0.2},
      {.input = 10, .hidden = {8, 6, 4, 2}, .classes = 5, .activation = "gelu"},
      {.input = 9, .hidden = {}, .classes = 2},
  };
  for (const nn::MLPConfig& c : configs) {
    const std::string what = "MLP with " + std::to_string(c.hidden.size()) + " hidden layer(s)";
    Generator gen(0);
    const nn::MLP model(c, gen);
    const nn::ModelSpec spec = nn::mlp_spec(c);
    expect_matches(spec, model, what);
    const nn::TpPlan plan = nn::mlp_tp_plan(c);
    EXPECT_EQ(spec.tp_sharded, plan_elements(model, plan)) << what;
    EXPECT_EQ(spec.has_tp_plan(), c.hidden.size() >= 2) << what;
    EXPECT_FALSE(spec.has_pp_plan()) << what;
    double forward = 0;
    int64_t in = c.input;
    for (int64_t h : c.hidden) forward += 2.0 * double(in * h), in = h;
    forward += 2.0 * double(in * c.classes);
    EXPECT_DOUBLE_EQ(spec.flops_per_sample, 3.0 * forward) << what;
  }
}

TEST(ModelSpec, CnnEqualsTheBuiltModel) {
  const std::vector<nn::CNNConfig> configs = {
      {},
      {.in_channels = 3, .channels = {4, 8}, .classes = 5, .batch_norm = false, .dropout = 0.3, .image_size = 8,
       .hidden = 20},
      {.in_channels = 1, .channels = {3}, .classes = 2, .batch_norm = true, .image_size = 4, .hidden = 7},
  };
  for (const nn::CNNConfig& c : configs) {
    const std::string what = "CNN " + std::to_string(c.channels.size()) + " block(s)" + (c.batch_norm ? " BN" : "");
    Generator gen(0);
    const nn::CNN model(c, gen);
    const nn::ModelSpec spec = nn::cnn_spec(c);
    expect_matches(spec, model, what);
    EXPECT_FALSE(spec.has_tp_plan()) << what;
    EXPECT_FALSE(spec.has_pp_plan()) << what;
    double forward = 0;
    int64_t side = c.image_size, ch = c.in_channels;
    for (int64_t out : c.channels) forward += 2.0 * double(out * ch * 9) * double(side * side), ch = out, side /= 2;
    forward += 2.0 * double(ch * side * side * c.hidden) + 2.0 * double(c.hidden * c.classes);
    EXPECT_DOUBLE_EQ(spec.flops_per_sample, 3.0 * forward) << what;
  }
}

// A mixture of experts: the spec lists the MoE layers' parameters as nn::MoE registers them
// (router, experts.w1/w2[/w3], shared_experts.*), marks exactly experts.* as expert weights
// and none of them tp-sharded, and counts the active parameters and FLOPs by hand.
// GPT: C 8, 4 experts of H 16 (moe.hidden), top 2, every 2nd block of 4, 1 shared expert.
TEST(ModelSpec, GptMoEEqualsTheBuiltModel) {
  nn::GPTConfig c{.vocab = 16, .block_size = 8, .n_layer = 4, .n_head = 2, .n_embd = 8};
  c.moe = {.experts = 4, .top_k = 2, .every = 2, .shared_experts = 1, .hidden = 16};
  Generator gen(0);
  const nn::GPT model(c, gen);
  const nn::ModelSpec spec = nn::gpt_spec(c);
  expect_matches(spec, model, "GPT MoE");
  EXPECT_EQ(spec.tp_sharded, plan_elements(model, nn::gpt_tp_plan(c)));
  // Blocks 1 and 3 carry the MoE: router (4, 8), experts w1 (4, 16, 8), w2 (4, 8, 16),
  // shared w1 (1, 16, 8), w2 (1, 8, 16).
  const std::vector<std::pair<std::string, Shape>> moe_params = {
      {"h.1.mlp.router.weight", {4, 8}},          {"h.1.mlp.experts.w1", {4, 16, 8}},
      {"h.1.mlp.experts.w2", {4, 8, 16}},         {"h.1.mlp.shared_experts.w1", {1, 16, 8}},
      {"h.1.mlp.shared_experts.w2", {1, 8, 16}},
  };
  for (const auto& [name, shape] : moe_params) {
    const auto it = std::find_if(spec.params.begin(), spec.params.end(), [&](const nn::ParamSpec& p) { return p.name == name; });
    ASSERT_NE(it, spec.params.end()) << name;
    EXPECT_EQ(it->shape, shape) << name;
  }
  int experts = 0;
  for (const nn::ParamSpec& p : spec.params) {
    const bool want = p.name.find(".mlp.experts.") != std::string::npos;
    EXPECT_EQ(p.expert, want) << p.name;
    if (p.name.find(".mlp.") != std::string::npos && (p.block == 1 || p.block == 3)) {
      EXPECT_FALSE(p.tp_sharded) << p.name;
    }
    experts += want;
  }
  EXPECT_EQ(experts, 4);  // w1, w2 of blocks 1 and 3
  const int64_t per_layer_experts = 2 * 4 * 16 * 8;  // w1 + w2 of 4 experts
  EXPECT_EQ(spec.expert_params, 2 * per_layer_experts);
  EXPECT_EQ(spec.block_expert_params, (std::vector<int64_t>{0, per_layer_experts, 0, per_layer_experts}));
  EXPECT_EQ(spec.moe_layers(), 2);
  EXPECT_EQ(spec.experts, 4);
  EXPECT_EQ(spec.top_k, 2);
  // A token uses 2 of the 4 experts: half of each layer's expert weights, 2 x 512 left out.
  EXPECT_EQ(spec.active_params, model.num_parameters() - 2 * 512);
  const double t = double(c.block_size);
  EXPECT_DOUBLE_EQ(spec.flops_per_sample, (6.0 * double(spec.active_params) + 12.0 * 4 * 8 * t) * t);
  EXPECT_EQ(spec.a2a_per_sample, 8 * 2 * 8);  // T·top_k·C
  ASSERT_EQ(spec.block_params.size(), 4u);
  const auto blocks = model.blocks()->named_children();
  for (size_t l = 0; l < blocks.size(); ++l) EXPECT_EQ(spec.block_params[l], blocks[l].second->num_parameters());
}

// Llama: C 16, F from intermediate_size 32 (the experts' width, moe.hidden 0), SwiGLU
// experts with w3, 4 experts, top 2, every 2nd block, 1 shared expert; GQA 4/2 heads.
TEST(ModelSpec, LlamaMoEEqualsTheBuiltModel) {
  nn::LlamaConfig c{.vocab = 20, .block_size = 8, .n_layer = 4, .n_head = 4, .n_kv_head = 2, .n_embd = 16,
                    .intermediate_size = 32};
  c.moe = {.experts = 4, .top_k = 2, .every = 2, .shared_experts = 1};
  Generator gen(0);
  const nn::Llama model(c, gen);
  const nn::ModelSpec spec = nn::llama_spec(c);
  expect_matches(spec, model, "Llama MoE");
  EXPECT_EQ(spec.tp_sharded, plan_elements(model, nn::llama_tp_plan(c)));
  for (const nn::ParamSpec& p : spec.params) {
    EXPECT_EQ(p.expert, p.name.find(".feed_forward.experts.") != std::string::npos) << p.name;
    if (p.name.find(".feed_forward.") != std::string::npos && (p.block == 1 || p.block == 3)) {
      EXPECT_FALSE(p.tp_sharded) << p.name;
    }
  }
  const int64_t layer_experts = 3 * 4 * 32 * 16;  // w1, w2, w3 of 4 experts of 32
  EXPECT_EQ(spec.expert_params, 2 * layer_experts);
  // By hand: Ψ = embedding 20·16 + output 20·16 + norm 16; per block q, o 2·16·16, k, v
  // 2·16·8, norms 2·16; a dense block's SwiGLU 3·16·32, an MoE block's router 4·16, experts
  // 3·4·32·16 and shared expert 3·32·16.
  const int64_t attn = 2 * 16 * 16 + 2 * 16 * 8 + 2 * 16, dense = attn + 3 * 16 * 32;
  const int64_t moe = attn + 4 * 16 + layer_experts + 3 * 32 * 16;
  EXPECT_EQ(spec.total, 2 * 20 * 16 + 16 + 2 * dense + 2 * moe);
  EXPECT_EQ(spec.active_params, spec.total - 2 * (3 * 2 * 32 * 16));  // 2 of 4 experts left out per layer
  EXPECT_EQ(spec.a2a_per_sample, 8 * 2 * 16);
}

// The sharding rule of a plan, per parameter name.
TEST(ModelSpec, TpShardsFollowsTheStyles) {
  const nn::TpPlan plan = {{"a", nn::TpStyle::colwise},        {"b", nn::TpStyle::rowwise},
                           {"c", nn::TpStyle::vocab_parallel}, {"d", nn::TpStyle::parallel_rng},
                           {"e", nn::TpStyle::sequence_norm},  {"f", nn::TpStyle::colwise_qkv}};
  EXPECT_TRUE(nn::tp_shards(plan, "a.weight"));
  EXPECT_TRUE(nn::tp_shards(plan, "a.bias"));
  EXPECT_TRUE(nn::tp_shards(plan, "b.weight"));
  EXPECT_FALSE(nn::tp_shards(plan, "b.bias"));  // a row layer's bias is whole
  EXPECT_TRUE(nn::tp_shards(plan, "c.weight"));
  EXPECT_FALSE(nn::tp_shards(plan, "d.weight"));
  EXPECT_FALSE(nn::tp_shards(plan, "e.weight"));
  EXPECT_TRUE(nn::tp_shards(plan, "f.bias"));
  EXPECT_FALSE(nn::tp_shards(plan, "g.weight"));   // not in the plan
  EXPECT_FALSE(nn::tp_shards(plan, "x.a.weight"));  // a module under another path
  EXPECT_FALSE(nn::tp_shards(plan, "weight"));
}
