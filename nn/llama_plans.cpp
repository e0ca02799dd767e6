// The Llama's tensor-parallel plan, pipeline split and limits (see llama_plans.h).
#include <strata/nn/llama_plans.h>

#include <string>

namespace strata::nn {

TpPlan llama_tp_plan(const LlamaConfig& cfg, bool sequence_parallel) {
  TpPlan plan;
  for (int64_t i = 0; i < cfg.n_layer; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    for (const char* p : {"attention.wq", "attention.wk", "attention.wv"}) plan[l + p] = TpStyle::colwise;
    plan[l + "attention.wo"] = TpStyle::rowwise;
    if (!cfg.moe.moe_block(i)) {  // an MoE layer stays whole on every tp rank
      plan[l + "feed_forward.w1"] = TpStyle::colwise;
      plan[l + "feed_forward.w3"] = TpStyle::colwise;
      plan[l + "feed_forward.w2"] = TpStyle::rowwise;
    }
    if (!sequence_parallel) continue;
    for (const char* n : {"attention_norm", "ffn_norm"}) plan[l + n] = TpStyle::sequence_norm;
  }
  plan["tok_embeddings"] = TpStyle::vocab_parallel;
  if (!cfg.tie_weights) plan["output"] = TpStyle::vocab_parallel;
  if (sequence_parallel) plan["norm"] = TpStyle::sequence_norm;
  return plan;
}

PipelinePlan llama_pp_plan(const Llama& model, const std::vector<int64_t>& layers, int64_t seq_shards, int64_t cp) {
  const LlamaConfig& c = model.config();
  const Llama* llama = &model;
  return {
      .blocks = "layers",
      .first = {"tok_embeddings"},
      .last = {"norm", c.tie_weights ? "tok_embeddings" : "output"},
      .tied = c.tie_weights ? std::vector<std::string>{"tok_embeddings.weight"} : std::vector<std::string>{},
      .layers = layers,
      .layer_blocks = {},
      .forward =
          [](Module& m, const PipelineStageSpec& s, const Tensor& in) {
            return dynamic_cast<Llama&>(m).forward_stage(in, s.begin, s.end, s.first(), s.last());
          },
      .loss = [llama](const Tensor& out, const Tensor& y) { return llama->stage_loss(out, y); },
      .activation = [n = c.n_embd, seq_shards, cp, llama, act = stage_activation_dtype(model)](
                        const PipelineStageSpec&, const Shape& in) {
        const int64_t t = cp > 1 && llama->lm_hooks().shard_sequence ? in[1] / cp : in[1];  // cp suspended: whole
        return ActivationSpec{{in[0], t / seq_shards, n}, act};
      }};
}

ModelLimits llama_limits(const LlamaConfig& cfg) {
  ModelLimits m{.heads = cfg.n_head, .vocab = cfg.vocab, .layers = cfg.n_layer, .block_size = cfg.block_size};
  if (cfg.moe.enabled()) {
    m.experts = cfg.moe.experts;
    m.moe_capacity = cfg.moe.capacity_factor > 0;
  }
  return m;
}

SequenceSplits llama_sequence_splits() { return {.sequence_parallel = true, .context_parallel = true}; }

}  // namespace strata::nn
