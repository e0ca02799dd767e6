// model.type gpt: the config's model keys as an nn::GPTConfig, and the GPT's plans,
// limits and description from nn/ (registered in model_family.cpp).
#include "apps/factory.h"
#include "apps/model_family.h"
#include <strata/autograd/functions.h>
#include <strata/nn/gpt.h>
#include <strata/nn/gpt_plans.h>
#include <strata/nn/gpt_spec.h>

namespace strata::apps {
namespace {

nn::GPTConfig gpt_config(const TrainConfig& cfg) {
  const auto& m = cfg.model;
  nn::GPTConfig c;
  c.vocab = gpt_vocab(cfg);
  c.block_size = m.block_size;
  c.n_layer = m.n_layer;
  c.n_head = m.n_head;
  c.n_embd = m.n_embd;
  c.dropout = m.dropout;
  c.bias = m.bias;
  c.tie_weights = m.tie_weights;
  c.checkpoint = m.checkpoint_activations == nn::Recompute::full;
  c.selective = m.checkpoint_activations == nn::Recompute::selective;
  c.moe = m.moe;
  return c;
}

}  // namespace

ModelFamily gpt_family() {
  return {.type = "gpt",
          .build = [](const TrainConfig& cfg, Generator& gen) -> std::shared_ptr<nn::Module> {
            return std::make_shared<nn::GPT>(gpt_config(cfg), gen);
          },
          .spec = [](const TrainConfig& cfg) { return nn::gpt_spec(gpt_config(cfg)); },
          .limits = [](const TrainConfig& cfg) { return nn::gpt_limits(gpt_config(cfg)); },
          .tp_plan = [](const TrainConfig& cfg, bool sp) { return nn::gpt_tp_plan(gpt_config(cfg), sp); },
          .pp_plan =
              [](const nn::Module& model, const std::vector<int64_t>& layers, int64_t seq_shards, int64_t cp) {
                return nn::gpt_pp_plan(family_module<const nn::GPT>(model, "gpt"), layers, seq_shards, cp);
              },
          // The mean next-token cross-entropy over the B*T positions; through a wrapper
          // that runs the GPT (thread replicas), on the (B, T, vocab) logits it gathers.
          .loss = [](nn::Module& model, const data::Batch& b) {
            if (auto* gpt = dynamic_cast<nn::GPT*>(&model)) return gpt->loss(b.input, b.target);
            const Tensor out = model.forward(b.input);
            return cross_entropy(reshape(out, {-1, out.size(2)}), ops::reshape(b.target, {-1}), -1);
          },
          .sequences = nn::gpt_sequence_splits()};
}

}  // namespace strata::apps
