// The GPT's tensor-parallel plan, pipeline split and limits (see gpt_plans.h).
#include <strata/nn/gpt_plans.h>

#include <string>

namespace strata::nn {

TpPlan gpt_tp_plan(const GPTConfig& cfg, bool sequence_parallel) {
  TpPlan plan;
  for (int64_t i = 0; i < cfg.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    plan[h + "attn.c_attn"] = TpStyle::colwise_qkv;
    plan[h + "attn.c_proj"] = TpStyle::rowwise;
    if (!cfg.moe.moe_block(i)) {  // an MoE layer stays whole on every tp rank
      plan[h + "mlp.c_fc"] = TpStyle::colwise;
      plan[h + "mlp.c_proj"] = TpStyle::rowwise;
    }
    plan[h + "attn.attn_dropout"] = TpStyle::parallel_rng;  // on this rank's heads
    if (!sequence_parallel) continue;
    for (const char* ln : {"ln_1", "ln_2"}) plan[h + ln] = TpStyle::sequence_norm;
    // On this rank's sequence shard: masks of its own (Megatron forks the tracker there).
    plan[h + "attn.resid_dropout"] = TpStyle::parallel_rng;
    if (!cfg.moe.moe_block(i)) plan[h + "mlp.dropout"] = TpStyle::parallel_rng;
  }
  plan["wte"] = TpStyle::vocab_parallel;  // with the tied head
  if (!cfg.tie_weights) plan["lm_head"] = TpStyle::vocab_parallel;
  if (sequence_parallel) {
    plan["ln_f"] = TpStyle::sequence_norm;
    plan["drop"] = TpStyle::parallel_rng;
  }
  return plan;
}

PipelinePlan gpt_pp_plan(const GPT& model, const std::vector<int64_t>& layers, int64_t seq_shards, int64_t cp) {
  const GPTConfig& c = model.config();
  const GPT* gpt = &model;
  return {
      .blocks = "h",
      .first = {"wte", "wpe", "drop"},
      .last = {"ln_f", c.tie_weights ? "wte" : "lm_head"},
      .tied = c.tie_weights ? std::vector<std::string>{"wte.weight"} : std::vector<std::string>{},
      .layers = layers,
      .layer_blocks = {},
      .forward =
          [](Module& m, const PipelineStageSpec& s, const Tensor& in) {
            return dynamic_cast<GPT&>(m).forward_stage(in, s.begin, s.end, s.first(), s.last());
          },
      // As GPT::loss: the mean over the B*T positions (from the vocabulary shards under tp).
      .loss = [gpt](const Tensor& out, const Tensor& y) { return gpt->stage_loss(out, y); },
      .activation = [n = c.n_embd, seq_shards, cp, gpt, act = stage_activation_dtype(model)](const PipelineStageSpec&,
                                                                                              const Shape& in) {
        const int64_t t = cp > 1 && gpt->lm_hooks().shard_sequence ? in[1] / cp : in[1];  // cp suspended: whole
        return ActivationSpec{{in[0], t / seq_shards, n}, act};
      }};
}

ModelLimits gpt_limits(const GPTConfig& cfg) {
  ModelLimits m{.heads = cfg.n_head, .vocab = cfg.vocab, .layers = cfg.n_layer, .block_size = cfg.block_size};
  if (cfg.moe.enabled()) {
    m.experts = cfg.moe.experts;
    m.moe_capacity = cfg.moe.capacity_factor > 0;
  }
  return m;
}

SequenceSplits gpt_sequence_splits() { return {.sequence_parallel = true, .context_parallel = true}; }

}  // namespace strata::nn
