// The convention table of each architecture: which Hugging Face tensor holds which
// strata parameter, and how its layout differs. The one place that knows both naming
// schemes; the reader and the writer only follow it.
#pragma once
#include <string>
#include <vector>

#include "apps/hf/hf_config.h"
#include <strata/tensor/tensor.h>

namespace strata::apps::hf {

/// One parameter: strata's name and shape, the Hugging Face name, and whether the
/// file stores the 2-D weight transposed, (in, out) (GPT-2's Conv1D), where strata's
/// Linear is (out, in) like torch.nn.Linear.
struct TensorMapping {
  std::string strata;
  std::string hf;
  Shape shape;  // strata's; the file's is reversed when `transposed`
  bool transposed = false;
};

/// Every parameter of `spec`'s model, in the order save_pretrained writes them (the
/// embedding first, the head last). A tied head is absent: it is the embedding.
///   GPT2LMHeadModel: transformer.{wte,wpe}.weight, transformer.h.<i>.{ln_1,attn.c_attn,
///     attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}.{weight,bias}, transformer.ln_f.*,
///     lm_head.weight (untied only) -> wte/wpe/h.<i>.../ln_f/lm_head; the four Conv1D
///     weights transposed. c_attn stays fused: both put q | k | v along the output.
///   LlamaForCausalLM: model.embed_tokens, model.layers.<i>.{input_layernorm,
///     self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,down,up}_proj},
///     model.norm, lm_head -> tok_embeddings, layers.<i>.{attention_norm, attention.w{q,k,v,o},
///     ffn_norm, feed_forward.w{1,2,3}}, norm, output. No permutation of q/k: strata's
///     rotary embedding rotates halves (rotate_half), as transformers' does.
std::vector<TensorMapping> tensor_table(const HfModelSpec& spec);

/// Other names the same tensor has in files transformers reads: GPT-2 files written by
/// the original release have no "transformer." prefix.
std::vector<std::string> hf_aliases(const HfModelSpec& spec, const std::string& hf_name);

/// True for tensors of a file that hold no parameter and are skipped: GPT-2's causal-mask
/// buffers (h.<i>.attn.bias, h.<i>.attn.masked_bias), Llama's rotary inv_freq, and a tied
/// model's stored copy of the head (transformers ties it to the embedding on load).
bool ignored_hf_tensor(const HfModelSpec& spec, const std::string& hf_name);

}  // namespace strata::apps::hf
