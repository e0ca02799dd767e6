// config.json <-> HfModelSpec. Field names and defaults follow transformers 4.46's
// GPT2Config and LlamaConfig (a field absent from the file takes the class default, as
// from_pretrained does).
#include "apps/hf/hf_config.h"

#include <cmath>
#include <filesystem>

#include <strata/core/error.h>
#include <strata/core/json_limits.h>
#include <strata/tensor/file_io.h>

namespace strata::apps::hf {
namespace {

using json = nlohmann::json;

// Reads typed fields of one config.json, naming the file and field in every error.
class Fields {
 public:
  Fields(const json& j, std::string file) : j_(j), file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& msg) const {
    STRATA_THROW(DataError, "Hugging Face config '", file_, "': field '", key, "': ", msg);
  }
  bool present(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }
  const json& at(const std::string& key) const { return j_[key]; }

  int64_t positive_int(const std::string& key, std::optional<int64_t> def = std::nullopt) const {
    if (!present(key)) {
      if (def) return *def;
      fail(key, "is missing");
    }
    const json& v = j_[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t(1) << 40))
      fail(key, "is " + json_brief(v) + ", not a positive integer");
    return v.get<int64_t>();
  }
  double positive_number(const std::string& key, double def) const {
    if (!present(key)) return def;
    const json& v = j_[key];
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
      fail(key, "is " + json_brief(v) + ", not a positive number");
    return v.get<double>();
  }
  bool boolean(const std::string& key, bool def) const {
    if (!present(key)) return def;
    if (!j_[key].is_boolean()) fail(key, "is " + json_brief(j_[key]) + ", not true or false");
    return j_[key].get<bool>();
  }
  std::string string(const std::string& key, const std::string& def) const {
    if (!present(key)) return def;
    if (!j_[key].is_string()) fail(key, "is " + json_brief(j_[key]) + ", not a string");
    return j_[key].get<std::string>();
  }
  // Refuses `key` unless absent or equal to `want` (a feature strata's module lacks).
  void require_value(const std::string& key, const json& want, const std::string& why) const {
    if (present(key) && j_[key] != want) fail(key, "is " + json_brief(j_[key]) + ": " + why);
  }
  // Refuses `key` when present with a value other than null / false / 0.
  void refuse_set(const std::string& key, const std::string& why) const {
    if (!present(key)) return;
    const json& v = j_[key];
    if ((v.is_boolean() && !v.get<bool>()) || (v.is_number() && v.get<double>() == 0)) return;
    fail(key, "is " + json_brief(v) + ": " + why);
  }

 private:
  const json& j_;
  std::string file_;
};

HfModelSpec parse_gpt2(const Fields& f) {
  HfModelSpec s;
  s.architecture = "GPT2LMHeadModel";
  s.model_type = "gpt";
  s.vocab = f.positive_int("vocab_size", 50257);
  s.block_size = f.positive_int("n_positions", f.positive_int("n_ctx", 1024));
  s.n_embd = f.positive_int("n_embd", 768);
  s.n_layer = f.positive_int("n_layer", 12);
  s.n_head = f.positive_int("n_head", 12);
  s.n_kv_head = s.n_head;
  if (s.n_embd % s.n_head != 0)
    f.fail("n_head", std::to_string(s.n_head) + " does not divide n_embd " + std::to_string(s.n_embd));
  s.intermediate_size = 4 * s.n_embd;
  // strata's GPT block: MLP width 4C, tanh-approximated GELU, LayerNorm eps 1e-5,
  // attention scaled by 1/sqrt(head_dim), no cross-attention.
  if (f.present("n_inner") && f.positive_int("n_inner") != 4 * s.n_embd)
    f.fail("n_inner", "is " + f.at("n_inner").dump() + ": strata's GPT MLP is 4 * n_embd = " +
                          std::to_string(4 * s.n_embd) + " wide");
  const std::string act = f.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    f.fail("activation_function", "is '" + act + "': strata's GPT uses the tanh-approximated GELU (gelu_new)");
  s.norm_eps = f.positive_number("layer_norm_epsilon", 1e-5);
  if (s.norm_eps != 1e-5)
    f.fail("layer_norm_epsilon", "is " + f.at("layer_norm_epsilon").dump() + ": strata's GPT LayerNorm uses 1e-5");
  f.require_value("scale_attn_weights", true, "strata's attention always scales by 1/sqrt(head_dim)");
  f.refuse_set("scale_attn_by_inverse_layer_idx", "not implemented by strata's GPT");
  f.refuse_set("reorder_and_upcast_attn", "not implemented by strata's GPT");
  f.refuse_set("add_cross_attention", "strata's GPT is decoder-only");
  s.tie_weights = f.boolean("tie_word_embeddings", true);
  return s;
}

HfModelSpec parse_llama(const Fields& f) {
  HfModelSpec s;
  s.architecture = "LlamaForCausalLM";
  s.model_type = "llama";
  s.vocab = f.positive_int("vocab_size", 32000);
  s.n_embd = f.positive_int("hidden_size", 4096);
  s.intermediate_size = f.positive_int("intermediate_size", 11008);
  s.n_layer = f.positive_int("num_hidden_layers", 32);
  s.n_head = f.positive_int("num_attention_heads", 32);
  s.n_kv_head = f.positive_int("num_key_value_heads", s.n_head);
  s.block_size = f.positive_int("max_position_embeddings", 2048);
  s.norm_eps = f.positive_number("rms_norm_eps", 1e-6);
  s.rope_theta = f.positive_number("rope_theta", 10000.0);
  s.tie_weights = f.boolean("tie_word_embeddings", false);
  if (s.n_embd % s.n_head != 0)
    f.fail("num_attention_heads", std::to_string(s.n_head) + " does not divide hidden_size " + std::to_string(s.n_embd));
  if (s.n_head % s.n_kv_head != 0)
    f.fail("num_key_value_heads", std::to_string(s.n_kv_head) + " does not divide num_attention_heads " +
                                      std::to_string(s.n_head));
  if (f.present("head_dim") && f.positive_int("head_dim") != s.n_embd / s.n_head)
    f.fail("head_dim", "is " + f.at("head_dim").dump() + ": strata's Llama has head_dim = hidden_size / "
                       "num_attention_heads = " + std::to_string(s.n_embd / s.n_head));
  const std::string act = f.string("hidden_act", "silu");
  if (act != "silu") f.fail("hidden_act", "is '" + act + "': strata's Llama MLP is SwiGLU (silu)");
  f.refuse_set("attention_bias", "strata's Llama has no biases in its attention projections");
  f.refuse_set("mlp_bias", "strata's Llama has no biases in its MLP");
  f.refuse_set("sliding_window", "strata's Llama attends to the whole causal context");
  f.refuse_set("use_sliding_window", "strata's Llama attends to the whole causal context");
  if (f.present("pretraining_tp") && f.positive_int("pretraining_tp") != 1)
    f.fail("pretraining_tp", "is " + f.at("pretraining_tp").dump() + ": only 1 is supported");
  if (f.present("rope_scaling")) {
    const json& r = f.at("rope_scaling");
    if (!r.is_object()) f.fail("rope_scaling", "is " + json_brief(r) + ", not an object or null");
    const Fields rf(r, "");
    const std::string type = r.contains("rope_type") ? rf.string("rope_type", "") : rf.string("type", "default");
    if (type == "llama3") {
      RopeScaling rs;
      auto num = [&](const char* k) {
        if (!r.contains(k) || !r[k].is_number() || !(r[k].get<double>() > 0))
          f.fail(std::string("rope_scaling.") + k, "must be a positive number for rope_type llama3");
        return r[k].get<double>();
      };
      rs.factor = num("factor");
      rs.low_freq_factor = num("low_freq_factor");
      rs.high_freq_factor = num("high_freq_factor");
      if (!r.contains("original_max_position_embeddings") || !r["original_max_position_embeddings"].is_number_integer() ||
          r["original_max_position_embeddings"].get<int64_t>() < 1)
        f.fail("rope_scaling.original_max_position_embeddings", "must be a positive integer for rope_type llama3");
      rs.original_max_position_embeddings = r["original_max_position_embeddings"].get<int64_t>();
      s.rope_scaling = rs;
    } else if (type != "default") {
      f.fail("rope_scaling", "rope_type '" + type + "' is not implemented by strata's Llama (default and llama3 are)");
    }
  }
  return s;
}

}  // namespace

HfModelSpec parse_hf_config(const nlohmann::json& j, const std::string& file) {
  if (!j.is_object()) STRATA_THROW(DataError, "Hugging Face config '", file, "': not a JSON object");
  const Fields f(j, file);
  if (!f.present("architectures") || !j["architectures"].is_array() || j["architectures"].size() != 1 ||
      !j["architectures"][0].is_string())
    f.fail("architectures", "must list one architecture, e.g. [\"GPT2LMHeadModel\"]; got " +
                                (f.present("architectures") ? json_brief(j["architectures"]) : std::string("nothing")));
  const std::string arch = j["architectures"][0].get<std::string>();
  if (arch == "GPT2LMHeadModel") return parse_gpt2(f);
  if (arch == "LlamaForCausalLM") return parse_llama(f);
  f.fail("architectures", "'" + arch + "' is not supported (GPT2LMHeadModel and LlamaForCausalLM are)");
}

HfModelSpec read_hf_config(const std::string& dir) {
  const std::string file = (std::filesystem::path(dir) / kConfigFile).string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    STRATA_THROW(DataError, "Hugging Face model directory '", dir, "': no ", kConfigFile,
                 std::filesystem::is_directory(dir, ec) ? "" : " (the directory does not exist)");
  return parse_hf_config(parse_json_file_text(read_file_text(file), "Hugging Face config '" + file + "'"), file);
}

nlohmann::ordered_json hf_config_json(const HfModelSpec& s, const std::string& torch_dtype) {
  nlohmann::ordered_json j;
  j["architectures"] = {s.architecture};
  if (s.architecture == "GPT2LMHeadModel") {
    j["model_type"] = "gpt2";
    j["vocab_size"] = s.vocab;
    j["n_positions"] = s.block_size;
    j["n_embd"] = s.n_embd;
    j["n_layer"] = s.n_layer;
    j["n_head"] = s.n_head;
    j["n_inner"] = nullptr;
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = s.norm_eps;
    j["resid_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["attn_pdrop"] = 0.0;
    j["scale_attn_weights"] = true;
  } else {
    STRATA_CHECK(s.architecture == "LlamaForCausalLM", "[hf_config_json] unknown architecture '", s.architecture, "'");
    j["model_type"] = "llama";
    j["vocab_size"] = s.vocab;
    j["hidden_size"] = s.n_embd;
    j["intermediate_size"] = s.intermediate_size;
    j["num_hidden_layers"] = s.n_layer;
    j["num_attention_heads"] = s.n_head;
    j["num_key_value_heads"] = s.n_kv_head;
    j["max_position_embeddings"] = s.block_size;
    j["rms_norm_eps"] = s.norm_eps;
    j["rope_theta"] = s.rope_theta;
    if (s.rope_scaling)
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", s.rope_scaling->factor},
                           {"low_freq_factor", s.rope_scaling->low_freq_factor},
                           {"high_freq_factor", s.rope_scaling->high_freq_factor},
                           {"original_max_position_embeddings", s.rope_scaling->original_max_position_embeddings}};
    else
      j["rope_scaling"] = nullptr;
    j["hidden_act"] = "silu";
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    j["attention_dropout"] = 0.0;
  }
  j["tie_word_embeddings"] = s.tie_weights;
  j["torch_dtype"] = torch_dtype;
  return j;
}

}  // namespace strata::apps::hf
