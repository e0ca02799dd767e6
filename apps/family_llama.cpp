// model.type llama: the config's model keys as an nn::LlamaConfig, and the Llama's plans,
// limits and description from nn/ (registered in model_family.cpp).
#include "apps/factory.h"
#include "apps/model_family.h"
#include <strata/autograd/functions.h>
#include <strata/core/config.h>
#include <strata/nn/llama.h>
#include <strata/nn/llama_plans.h>
#include <strata/nn/llama_spec.h>

namespace strata::apps {
namespace {

nn::LlamaConfig llama_config(const TrainConfig& cfg) {
  const auto& m = cfg.model;
  nn::LlamaConfig c;
  c.vocab = gpt_vocab(cfg);
  c.block_size = m.block_size;
  c.n_layer = m.n_layer;
  c.n_head = m.n_head;
  c.n_kv_head = m.n_kv_head;
  c.n_embd = m.n_embd;
  c.intermediate_size = m.intermediate_size;
  c.ffn_dim_multiplier = m.ffn_dim_multiplier;
  c.multiple_of = m.multiple_of;
  c.norm_eps = m.norm_eps;
  c.rope_theta = m.rope_theta;
  if (m.rope_scaling)
    c.rope_scaling = nn::RopeScaling{.factor = m.rope_scaling->factor,
                                     .low_freq_factor = m.rope_scaling->low_freq_factor,
                                     .high_freq_factor = m.rope_scaling->high_freq_factor,
                                     .original_max_position_embeddings =
                                         m.rope_scaling->original_max_position_embeddings};
  c.tie_weights = m.tie_weights;
  c.checkpoint = m.checkpoint_activations == nn::Recompute::full;
  c.selective = m.checkpoint_activations == nn::Recompute::selective;
  c.moe = m.moe;
  return c;
}

// Each tp rank holds whole key/value heads and an equal share of the SwiGLU columns (as
// Megatron-LM requires): checked here, where the config's key paths are known.
void check_tp(const TrainConfig& cfg, const nn::LlamaConfig& c) {
  const int64_t tp = cfg.parallel.dims.tp;
  if (tp <= 1) return;
  if (c.kv_heads() % tp != 0)
    config_fail("parallel.tp", "is " + std::to_string(tp) + " but model.n_kv_head = " + std::to_string(c.kv_heads()) +
                                   " is not divisible by it (each tp rank holds whole key/value heads)");
  if (c.hidden_dim() % tp != 0)
    config_fail("parallel.tp", "is " + std::to_string(tp) + " but the feed-forward width " +
                                   std::to_string(c.hidden_dim()) +
                                   " (model.intermediate_size) is not divisible by it");
}

}  // namespace

ModelFamily llama_family() {
  return {.type = "llama",
          .build = [](const TrainConfig& cfg, Generator& gen) -> std::shared_ptr<nn::Module> {
            return std::make_shared<nn::Llama>(llama_config(cfg), gen);
          },
          .spec = [](const TrainConfig& cfg) { return nn::llama_spec(llama_config(cfg)); },
          .limits =
              [](const TrainConfig& cfg) {
                const nn::LlamaConfig c = llama_config(cfg);
                check_tp(cfg, c);
                return nn::llama_limits(c);
              },
          .tp_plan = [](const TrainConfig& cfg, bool sp) { return nn::llama_tp_plan(llama_config(cfg), sp); },
          .pp_plan =
              [](const nn::Module& model, const std::vector<int64_t>& layers, int64_t seq_shards, int64_t cp) {
                return nn::llama_pp_plan(family_module<const nn::Llama>(model, "llama"), layers, seq_shards, cp);
              },
          // The mean next-token cross-entropy over the B*T positions; through a wrapper
          // that runs the Llama (thread replicas), on the (B, T, vocab) logits it gathers.
          .loss = [](nn::Module& model, const data::Batch& b) {
            if (auto* llama = dynamic_cast<nn::Llama*>(&model)) return llama->loss(b.input, b.target);
            const Tensor out = model.forward(b.input);
            return cross_entropy(reshape(out, {-1, out.size(2)}), ops::reshape(b.target, {-1}), -1);
          },
          .sequences = nn::llama_sequence_splits()};
}

}  // namespace strata::apps
