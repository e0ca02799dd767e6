// The config.json of a Hugging Face causal-LM directory, as far as it defines the shape
// of a model strata can build: GPT2LMHeadModel (strata's gpt) and LlamaForCausalLM
// (strata's llama). Anything that would change the computation beyond those fields
// (biases on Llama, sliding windows, another activation, ...) is refused by name.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace strata::apps::hf {

/// config.json's file name inside a model directory.
inline constexpr const char* kConfigFile = "config.json";

/// Llama 3's frequency-dependent RoPE scaling (rope_scaling with rope_type "llama3").
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  bool operator==(const RopeScaling&) const = default;
};

/// A model's architecture and shape in strata's terms (model.* keys).
struct HfModelSpec {
  std::string architecture;  // GPT2LMHeadModel | LlamaForCausalLM
  std::string model_type;    // strata model.type: gpt | llama
  int64_t vocab = 0;
  int64_t block_size = 0;    // n_positions | max_position_embeddings
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;     // llama: key/value heads (grouped-query attention); gpt: n_head
  int64_t n_embd = 0;
  int64_t intermediate_size = 0;  // llama: SwiGLU width; gpt: 4 n_embd
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;            // llama
  std::optional<RopeScaling> rope_scaling;  // llama
  bool tie_weights = true;
  bool operator==(const HfModelSpec&) const = default;
};

/// Reads `dir`/config.json. DataError naming the file and the field for a missing or
/// mistyped field, an architecture other than the two above, or a field whose value
/// strata's modules do not implement (e.g. "attention_bias": true, "sliding_window").
HfModelSpec read_hf_config(const std::string& dir);
/// As read_hf_config, from parsed JSON; `file` names it in errors.
HfModelSpec parse_hf_config(const nlohmann::json& j, const std::string& file);

/// The config.json that transformers reads back as `spec` (with "torch_dtype" `dtype`,
/// e.g. "float32"); dropout probabilities are 0 (strata's dropout is a training setting).
nlohmann::ordered_json hf_config_json(const HfModelSpec& spec, const std::string& torch_dtype);

}  // namespace strata::apps::hf
