// The GPT-2 and Llama convention tables (transformers 4.46's modeling_gpt2.py and
// modeling_llama.py parameter names).
#include "apps/hf/hf_names.h"

#include <strata/core/error.h>

namespace strata::apps::hf {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::vector<TensorMapping> gpt2_table(const HfModelSpec& s) {
  const int64_t V = s.vocab, T = s.block_size, C = s.n_embd, F = 4 * s.n_embd;
  std::vector<TensorMapping> t;
  auto add = [&](const std::string& strata, const std::string& hf, Shape shape, bool transposed = false) {
    t.push_back({strata, "transformer." + hf, std::move(shape), transposed});
  };
  add("wte.weight", "wte.weight", {V, C});
  add("wpe.weight", "wpe.weight", {T, C});
  for (int64_t i = 0; i < s.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    add(h + "ln_1.weight", h + "ln_1.weight", {C});
    add(h + "ln_1.bias", h + "ln_1.bias", {C});
    add(h + "attn.c_attn.weight", h + "attn.c_attn.weight", {3 * C, C}, true);  // file: (C, 3C)
    add(h + "attn.c_attn.bias", h + "attn.c_attn.bias", {3 * C});
    add(h + "attn.c_proj.weight", h + "attn.c_proj.weight", {C, C}, true);
    add(h + "attn.c_proj.bias", h + "attn.c_proj.bias", {C});
    add(h + "ln_2.weight", h + "ln_2.weight", {C});
    add(h + "ln_2.bias", h + "ln_2.bias", {C});
    add(h + "mlp.c_fc.weight", h + "mlp.c_fc.weight", {F, C}, true);  // file: (C, 4C)
    add(h + "mlp.c_fc.bias", h + "mlp.c_fc.bias", {F});
    add(h + "mlp.c_proj.weight", h + "mlp.c_proj.weight", {C, F}, true);  // file: (4C, C)
    add(h + "mlp.c_proj.bias", h + "mlp.c_proj.bias", {C});
  }
  add("ln_f.weight", "ln_f.weight", {C});
  add("ln_f.bias", "ln_f.bias", {C});
  if (!s.tie_weights) t.push_back({"lm_head.weight", "lm_head.weight", {V, C}, false});  // nn.Linear (V, C)
  return t;
}

std::vector<TensorMapping> llama_table(const HfModelSpec& s) {
  const int64_t V = s.vocab, C = s.n_embd, F = s.intermediate_size, D = s.n_embd / s.n_head;
  const int64_t Q = s.n_head * D, KV = s.n_kv_head * D;
  std::vector<TensorMapping> t;
  t.push_back({"tok_embeddings.weight", "model.embed_tokens.weight", {V, C}});
  for (int64_t i = 0; i < s.n_layer; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".", m = "model.layers." + std::to_string(i) + ".";
    t.push_back({l + "attention_norm.weight", m + "input_layernorm.weight", {C}});
    t.push_back({l + "attention.wq.weight", m + "self_attn.q_proj.weight", {Q, C}});
    t.push_back({l + "attention.wk.weight", m + "self_attn.k_proj.weight", {KV, C}});
    t.push_back({l + "attention.wv.weight", m + "self_attn.v_proj.weight", {KV, C}});
    t.push_back({l + "attention.wo.weight", m + "self_attn.o_proj.weight", {C, Q}});
    t.push_back({l + "ffn_norm.weight", m + "post_attention_layernorm.weight", {C}});
    t.push_back({l + "feed_forward.w1.weight", m + "mlp.gate_proj.weight", {F, C}});
    t.push_back({l + "feed_forward.w2.weight", m + "mlp.down_proj.weight", {C, F}});
    t.push_back({l + "feed_forward.w3.weight", m + "mlp.up_proj.weight", {F, C}});
  }
  t.push_back({"norm.weight", "model.norm.weight", {C}});
  if (!s.tie_weights) t.push_back({"output.weight", "lm_head.weight", {V, C}});
  return t;
}

}  // namespace

std::vector<TensorMapping> tensor_table(const HfModelSpec& spec) {
  if (spec.architecture == "GPT2LMHeadModel") return gpt2_table(spec);
  if (spec.architecture == "LlamaForCausalLM") return llama_table(spec);
  STRATA_THROW(Error, "[hf::tensor_table] unknown architecture '", spec.architecture, "'");
}

std::vector<std::string> hf_aliases(const HfModelSpec& spec, const std::string& hf_name) {
  const std::string prefix = "transformer.";
  if (spec.architecture == "GPT2LMHeadModel" && hf_name.rfind(prefix, 0) == 0) return {hf_name.substr(prefix.size())};
  return {};
}

bool ignored_hf_tensor(const HfModelSpec& spec, const std::string& name) {
  if (spec.architecture == "GPT2LMHeadModel")
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
           (spec.tie_weights && name == "lm_head.weight");
  if (spec.architecture == "LlamaForCausalLM")
    return ends_with(name, ".rotary_emb.inv_freq") || (spec.tie_weights && name == "lm_head.weight");
  return false;
}

}  // namespace strata::apps::hf
