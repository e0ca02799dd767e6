// The Hugging Face converter below the transformers proofs (tests/interop/): config.json
// parsing and its refusals, the convention tables, ranged reads of a directory against
// whole reads (the transposed Conv1D weights included), dtype conversion, export and its
// output-directory rules.
#include <gtest/gtest.h>

#include <filesystem>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <tuple>
#include <vector>

#include "apps/config.h"
#include "apps/hf/hf_config.h"
#include "apps/hf/hf_names.h"
#include "apps/hf/hf_reader.h"
#include "apps/hf/hf_writer.h"
#include "apps/output_file.h"
#include "tests/temp_dir_fixture.h"
#include <strata/core/rng.h>
#include <strata/tensor/ops.h>
#include <strata/tensor/safetensors.h>

namespace strata::apps::hf {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

// Same shape, dtype and bytes.
bool same(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = ops::contiguous(a), y = ops::contiguous(b);
  return std::memcmp(x.raw_data(), y.raw_data(), size_t(x.nbytes())) == 0;
}

json gpt2_json() {
  return {{"architectures", {"GPT2LMHeadModel"}}, {"vocab_size", 50}, {"n_positions", 16}, {"n_embd", 8},
          {"n_layer", 2}, {"n_head", 2}, {"n_inner", nullptr}, {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5}};
}

json llama_json() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 60}, {"hidden_size", 16},
          {"intermediate_size", 40}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"max_position_embeddings", 32}, {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0}, {"tie_word_embeddings", false},
          {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8}}}};
}

// The DataError message of parsing `j`, or "" when it parses.
std::string parse_error(const json& j) {
  try {
    parse_hf_config(j, "dir/config.json");
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

TEST(HfConfig, ReadsGpt2Shape) {
  const HfModelSpec s = parse_hf_config(gpt2_json(), "config.json");
  EXPECT_EQ(s.model_type, "gpt");
  EXPECT_EQ(s.vocab, 50);
  EXPECT_EQ(s.block_size, 16);
  EXPECT_EQ(s.n_embd, 8);
  EXPECT_EQ(s.n_layer, 2);
  EXPECT_EQ(s.n_head, 2);
  EXPECT_EQ(s.intermediate_size, 32);
  EXPECT_TRUE(s.tie_weights);  // GPT2Config's default
}

TEST(HfConfig, ReadsLlamaShape) {
  const HfModelSpec s = parse_hf_config(llama_json(), "config.json");
  EXPECT_EQ(s.model_type, "llama");
  EXPECT_EQ(s.n_kv_head, 2);
  EXPECT_EQ(s.intermediate_size, 40);
  EXPECT_DOUBLE_EQ(s.rope_theta, 500000.0);
  ASSERT_TRUE(s.rope_scaling.has_value());
  EXPECT_EQ(s.rope_scaling->original_max_position_embeddings, 8);
  EXPECT_FALSE(s.tie_weights);
}

TEST(HfConfig, RefusesWhatStrataDoesNotComputeNamingFileAndField) {
  const std::vector<std::tuple<json, std::string, json>> cases = {
      {gpt2_json(), "n_inner", 64},
      {gpt2_json(), "activation_function", "relu"},
      {gpt2_json(), "layer_norm_epsilon", 1e-6},
      {gpt2_json(), "scale_attn_by_inverse_layer_idx", true},
      {gpt2_json(), "n_head", 3},
      {gpt2_json(), "n_layer", "2"},
      {llama_json(), "attention_bias", true},
      {llama_json(), "mlp_bias", true},
      {llama_json(), "sliding_window", 4096},
      {llama_json(), "hidden_act", "gelu"},
      {llama_json(), "head_dim", 8},
      {llama_json(), "num_key_value_heads", 3},
      {llama_json(), "rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}},
      {llama_json(), "architectures", {"MistralForCausalLM"}},
  };
  for (const auto& [base, key, value] : cases) {
    json j = base;
    j[key] = value;
    const std::string msg = parse_error(j);
    EXPECT_NE(msg.find("dir/config.json"), std::string::npos) << key << ": " << msg;
    EXPECT_NE(msg.find("'" + key + "'"), std::string::npos) << key << ": " << msg;
  }
  json j = gpt2_json();
  j.erase("architectures");
  EXPECT_NE(parse_error(j).find("architectures"), std::string::npos);
  EXPECT_EQ(parse_error(gpt2_json()), "");
}

TEST(HfConfig, WrittenConfigReadsBackAsTheSameSpec) {
  for (const json& j : {gpt2_json(), llama_json()}) {
    const HfModelSpec s = parse_hf_config(j, "a");
    const json written = json::parse(hf_config_json(s, "float32").dump());
    EXPECT_EQ(parse_hf_config(written, "b"), s) << j.dump();
  }
  HfModelSpec untied = parse_hf_config(gpt2_json(), "a");
  untied.tie_weights = false;
  EXPECT_FALSE(parse_hf_config(json::parse(hf_config_json(untied, "float32").dump()), "b").tie_weights);
}

TEST(HfNames, Gpt2TableTransposesExactlyTheConv1DWeights) {
  HfModelSpec s = parse_hf_config(gpt2_json(), "a");
  std::vector<TensorMapping> t = tensor_table(s);
  ASSERT_EQ(t.size(), 2u + 12u * 2u + 2u);  // wte, wpe, 12 per block, ln_f
  int transposed = 0;
  for (const auto& m : t) {
    EXPECT_EQ(m.hf, "transformer." + m.strata);
    transposed += m.transposed;
    if (m.strata == "h.1.attn.c_attn.weight") {
      EXPECT_TRUE(m.transposed);
      EXPECT_EQ(m.shape, (Shape{24, 8}));  // (3C, C): q | k | v along the output
    }
  }
  EXPECT_EQ(transposed, 4 * 2);
  s.tie_weights = false;
  t = tensor_table(s);
  EXPECT_EQ(t.back().strata, "lm_head.weight");
  EXPECT_EQ(t.back().hf, "lm_head.weight");
  EXPECT_FALSE(t.back().transposed);
  EXPECT_EQ(hf_aliases(s, "transformer.h.0.ln_1.weight"), std::vector<std::string>{"h.0.ln_1.weight"});
  EXPECT_TRUE(ignored_hf_tensor(s, "h.0.attn.bias"));
  EXPECT_TRUE(ignored_hf_tensor(s, "transformer.h.1.attn.masked_bias"));
  EXPECT_FALSE(ignored_hf_tensor(s, "transformer.h.1.attn.c_attn.bias"));
}

TEST(HfNames, LlamaTableMapsGroupedQueryShapesWithoutTransposes) {
  const HfModelSpec s = parse_hf_config(llama_json(), "a");
  const std::vector<TensorMapping> t = tensor_table(s);
  ASSERT_EQ(t.size(), 1u + 9u * 2u + 2u);
  std::map<std::string, TensorMapping> by;
  for (const auto& m : t) {
    EXPECT_FALSE(m.transposed) << m.hf;
    by[m.strata] = m;
  }
  EXPECT_EQ(by.at("layers.1.attention.wq.weight").hf, "model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(by.at("layers.1.attention.wk.weight").shape, (Shape{8, 16}));  // 2 kv heads of 4
  EXPECT_EQ(by.at("layers.0.feed_forward.w1.weight").hf, "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(by.at("layers.0.feed_forward.w2.weight").hf, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(by.at("layers.0.feed_forward.w2.weight").shape, (Shape{16, 40}));
  EXPECT_EQ(by.at("layers.0.feed_forward.w3.weight").hf, "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(by.at("output.weight").hf, "lm_head.weight");
  EXPECT_TRUE(ignored_hf_tensor(s, "model.layers.0.self_attn.rotary_emb.inv_freq"));
}

TEST(HfWriter, ParsesShardSizes) {
  EXPECT_EQ(parse_shard_size("5GB", "x"), 5'000'000'000ull);
  EXPECT_EQ(parse_shard_size("200MB", "x"), 200'000'000ull);
  EXPECT_EQ(parse_shard_size("10KB", "x"), 10'000ull);
  EXPECT_EQ(parse_shard_size("1234", "x"), 1234ull);
  for (const char* bad : {"", "5XB", "-1", "GB", "0"}) EXPECT_THROW(parse_shard_size(bad, "x"), ConfigError) << bad;
}

class HfDirTest : public strata::testing::TempDirTest {
 protected:
  // A GPT-2 directory as save_pretrained lays it out, random tensors of `dtype`; returns
  // the strata-layout values (f32) by strata name.
  std::map<std::string, Tensor> write_gpt2(const std::string& dir, DType dtype) {
    fs::create_directories(dir);
    const HfModelSpec s = parse_hf_config(gpt2_json(), "a");
    std::ofstream(dir + "/config.json") << hf_config_json(s, torch_dtype_name(dtype)).dump(2);
    Generator gen(7);
    NamedTensors file;
    std::map<std::string, Tensor> want;
    for (const TensorMapping& m : tensor_table(s)) {
      const Tensor v = ops::to_dtype(ops::normal(m.shape, 0.0, 1.0, gen), dtype);  // strata layout
      want[m.strata] = ops::to_dtype(v, DType::f32);
      file.emplace_back(m.hf, m.transposed ? ops::contiguous(ops::transpose(v, 0, 1)) : v);
    }
    file.emplace_back("transformer.h.0.attn.bias", ops::full({1, 1, 16, 16}, 1.0, DType::f32));  // a buffer: skipped
    save_safetensors(dir + "/model.safetensors", file, {{"format", "pt"}});
    return want;
  }
};

TEST_F(HfDirTest, RangedReadsEqualSlicesOfWholeReads) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const std::string dir = path(std::string("m_") + dtype_name(dt));
    const auto want = write_gpt2(dir, dt);
    const HfModelDir src(dir, DType::f32);
    ASSERT_EQ(src.names().size(), want.size());
    for (const auto& [name, w] : want) {
      const Tensor full = src.read_full(name);
      ASSERT_EQ(full.shape(), w.shape()) << name;
      EXPECT_TRUE(same(full, w)) << name << " (" << dtype_name(dt) << ")";
      const int64_t n = w.numel();
      // ranges that start and end mid-row, a single element, one whole row
      for (auto [b, e] : std::vector<std::pair<int64_t, int64_t>>{{3, n - 5}, {n / 2, n / 2 + 1}, {0, n}, {5, 13}}) {
        if (e <= b || e > n) continue;
        const Tensor part = src.read(name, b, e);
        EXPECT_TRUE(same(part, ops::narrow(ops::flatten(w), 0, b, e - b))) << name << " [" << b << ", " << e << ")";
      }
    }
  }
}

// Bytes read by this process through read(2)/pread(2) (Linux /proc/self/io "rchar").
int64_t bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t v = 0;
  while (io >> key >> v)
    if (key == "rchar:") return v;
  return -1;
}

TEST_F(HfDirTest, ARangeReadsOnlyItsBytes) {
  if (bytes_read_so_far() < 0) GTEST_SKIP() << "no /proc/self/io on this system";
  json j = gpt2_json();
  j["vocab_size"] = 2048;
  j["n_embd"] = 256;
  const HfModelSpec s = parse_hf_config(j, "a");
  fs::create_directories(path("big"));
  std::ofstream(path("big/config.json")) << hf_config_json(s, "float32").dump(2);
  Generator gen(3);
  NamedTensors file;
  for (const TensorMapping& m : tensor_table(s)) {
    Shape shape = m.shape;
    if (m.transposed) std::reverse(shape.begin(), shape.end());
    file.emplace_back(m.hf, ops::normal(shape, 0.0, 1.0, gen));
  }
  save_safetensors(path("big/model.safetensors"), file, {{"format", "pt"}});
  const HfModelDir src(path("big"));
  const int64_t probe = bytes_read_so_far();
  const int64_t overhead = bytes_read_so_far() - probe;  // reading /proc/self/io counts too
  constexpr int64_t kSlack = 32;
  const int64_t row = 256;  // wte (2048, 256) f32: 2 MiB, rows of 1 KiB
  const int64_t before = bytes_read_so_far();
  const Tensor got = src.read("wte.weight", 1000 * row + 7, 1040 * row);
  const int64_t used = bytes_read_so_far() - before - overhead;
  EXPECT_TRUE(same(got, ops::narrow(ops::flatten(file[0].second), 0, 1000 * row + 7, 40 * row - 7)));
  EXPECT_GE(used + kSlack, (40 * row - 7) * 4);
  EXPECT_LE(used, (40 * row - 7) * 4 + kSlack) << "read " << used << " bytes of a 2 MiB tensor for 40 rows";
}

TEST_F(HfDirTest, DeliversTheRunsDtype) {
  const auto want = write_gpt2(path("m"), DType::f32);
  const HfModelDir src(path("m"), DType::bf16);
  const Tensor t = src.read_full("h.0.mlp.c_fc.weight");
  EXPECT_EQ(t.dtype(), DType::bf16);
  EXPECT_TRUE(same(t, ops::to_dtype(want.at("h.0.mlp.c_fc.weight"), DType::bf16)));
}

TEST_F(HfDirTest, ExportWritesWhatTheReaderReadsAndShards) {
  write_gpt2(path("m"), DType::f32);
  const HfModelDir src(path("m"));
  const HfExportSummary one = export_hf(src, src.spec(), path("out1"), {});
  EXPECT_EQ(one.files, 1);
  EXPECT_TRUE(fs::exists(path("out1/model.safetensors")));
  const HfExportSummary many = export_hf(src, src.spec(), path("out2"), {.max_shard_bytes = 2000});
  EXPECT_GT(many.files, 2);
  EXPECT_TRUE(fs::exists(path("out2/model.safetensors.index.json")));
  EXPECT_EQ(many.bytes, one.bytes);
  for (const std::string& d : {path("out1"), path("out2")}) {
    const HfModelDir back(d);
    EXPECT_EQ(back.spec(), src.spec());
    for (const std::string& n : src.names()) EXPECT_TRUE(same(back.read_full(n), src.read_full(n))) << d << " " << n;
  }
  // the original's buffer is not a parameter: not written
  EXPECT_EQ(SafetensorsFile(path("out1/model.safetensors")).find("transformer.h.0.attn.bias"), nullptr);
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos);
}

TEST_F(HfDirTest, OutputDirectoryRules) {
  fs::create_directories(path("empty"));
  EXPECT_NO_THROW(check_output_dir(path("empty"), "--out", false));
  EXPECT_NO_THROW(check_output_dir(path("new"), "--out", false));
  write_gpt2(path("full"), DType::f32);
  EXPECT_THROW(check_output_dir(path("full"), "--out", false), ConfigError);
  EXPECT_NO_THROW(check_output_dir(path("full"), "--out", true));
  std::ofstream(path("file")) << "x";
  EXPECT_THROW(check_output_dir(path("file"), "--out", true), ConfigError);
  fs::create_symlink(path("empty"), path("link"));
  EXPECT_THROW(check_output_dir(path("link"), "--out", true), ConfigError);
  EXPECT_THROW(check_output_dir(path("nowhere/out"), "--out", false), ConfigError);
}

TEST_F(HfDirTest, InitFromFillsTheModelKeysAndRefusesContradictions) {
  write_gpt2(path("m"), DType::f32);
  const std::string base = "model: {init_from: " + path("m") + "}\ndata: {dataset: synthetic, kind: tokens, vocab_size: 50}\n"
                           "optim: {lr: 0.001}\n";
  const TrainConfig c = TrainConfig::from_node(ConfigNode::load_string(base));
  EXPECT_EQ(c.model.type, "gpt");
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.n_embd, 8);
  EXPECT_EQ(c.model.block_size, 16);
  EXPECT_EQ(c.model.vocab_size, 50);
  // the echo a checkpoint stores rebuilds the model without the directory
  const YAML::Node echoed = YAML::Load(c.yaml);
  EXPECT_FALSE(echoed["model"]["init_from"].IsDefined());
  EXPECT_EQ(echoed["model"]["n_layer"].as<int>(), 2);
  EXPECT_EQ(echoed["model"]["type"].as<std::string>(), "gpt");
  // a key that agrees is fine; one that contradicts names both
  EXPECT_NO_THROW(TrainConfig::from_node(ConfigNode::load_string(base, {"model.n_head=2"})));
  for (const auto& [set, key, field] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"model.n_layer=3", "model.n_layer", "n_layer 2"},
           {"model.block_size=32", "model.block_size", "n_positions 16"},
           {"model.tie_weights=false", "model.tie_weights", "tie_word_embeddings true"},
           {"model.type=mlp", "model.type", "GPT2LMHeadModel"},
           {"model.bias=false", "model.bias", "always"}}) {
    try {
      TrainConfig::from_node(ConfigNode::load_string(base, {set}));
      ADD_FAILURE() << set << " was accepted";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(key), std::string::npos) << msg;
      EXPECT_NE(msg.find(path("m") + "/config.json"), std::string::npos) << msg;
      EXPECT_NE(msg.find(field), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(TrainConfig::from_node(ConfigNode::load_string(
                   "model: {init_from: " + path("nowhere") + "}\ndata: {dataset: synthetic, kind: tokens}\noptim: {lr: 0.001}\n")),
               DataError);
}

TEST_F(HfDirTest, InitFromFillsEveryLlamaKeyAndRefusesContradictions) {
  fs::create_directories(path("l"));
  std::ofstream(path("l/config.json")) << llama_json().dump();
  const std::string base = "model: {init_from: " + path("l") + "}\ndata: {dataset: synthetic, kind: tokens, vocab_size: 60}\n"
                           "optim: {lr: 0.001}\n";
  const TrainConfig c = TrainConfig::from_node(ConfigNode::load_string(base));
  EXPECT_EQ(c.model.type, "llama");
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.n_head, 4);
  EXPECT_EQ(c.model.n_kv_head, 2);
  EXPECT_EQ(c.model.n_embd, 16);
  EXPECT_EQ(c.model.intermediate_size, 40);
  EXPECT_EQ(c.model.block_size, 32);
  EXPECT_EQ(c.model.vocab_size, 60);
  EXPECT_EQ(c.model.norm_eps, 1e-5);
  EXPECT_EQ(c.model.rope_theta, 500000.0);
  EXPECT_FALSE(c.model.tie_weights);
  ASSERT_TRUE(c.model.rope_scaling.has_value());
  EXPECT_EQ(c.model.rope_scaling->factor, 8.0);
  EXPECT_EQ(c.model.rope_scaling->low_freq_factor, 1.0);
  EXPECT_EQ(c.model.rope_scaling->high_freq_factor, 4.0);
  EXPECT_EQ(c.model.rope_scaling->original_max_position_embeddings, 8);
  // The echo rebuilds the same model keys without the directory.
  fs::remove_all(path("l"));
  const YAML::Node echoed = YAML::Load(c.yaml);
  EXPECT_FALSE(echoed["model"]["init_from"].IsDefined());
  EXPECT_FALSE(echoed["model"]["bias"].IsDefined());
  const TrainConfig e = TrainConfig::from_node(ConfigNode::load_string(c.yaml));
  EXPECT_EQ(e.model.type, "llama");
  EXPECT_EQ(e.model.n_kv_head, 2);
  EXPECT_EQ(e.model.intermediate_size, 40);
  EXPECT_EQ(e.model.norm_eps, 1e-5);
  EXPECT_EQ(e.model.rope_theta, 500000.0);
  EXPECT_EQ(e.model.block_size, 32);
  EXPECT_FALSE(e.model.tie_weights);
  ASSERT_TRUE(e.model.rope_scaling.has_value());
  EXPECT_EQ(e.model.rope_scaling->original_max_position_embeddings, 8);
  EXPECT_EQ(e.model.rope_scaling->factor, 8.0);
  // Agreeing keys are fine; a contradicting one names its path, the file and the field.
  fs::create_directories(path("l"));
  std::ofstream(path("l/config.json")) << llama_json().dump();
  EXPECT_NO_THROW(TrainConfig::from_node(ConfigNode::load_string(base, {"model.n_kv_head=2", "model.rope_theta=500000"})));
  for (const auto& [set, key, field] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"model.n_kv_head=4", "model.n_kv_head", "num_key_value_heads 2"},
           {"model.intermediate_size=32", "model.intermediate_size", "intermediate_size 40"},
           {"model.multiple_of=64", "model.multiple_of", "intermediate_size 40"},
           {"model.norm_eps=1e-6", "model.norm_eps", "rms_norm_eps"},
           {"model.rope_theta=10000", "model.rope_theta", "rope_theta 500000"},
           {"model.rope_scaling.high_freq_factor=2", "model.rope_scaling.high_freq_factor", "rope_scaling.high_freq_factor 4"},
           {"model.rope_scaling.original_max_position_embeddings=16", "model.rope_scaling.original_max_position_embeddings",
            "rope_scaling.original_max_position_embeddings 8"},
           {"model.n_embd=32", "model.n_embd", "hidden_size 16"},
           {"model.n_layer=3", "model.n_layer", "num_hidden_layers 2"},
           {"model.vocab_size=61", "model.vocab_size", "vocab_size 60"},
           {"model.tie_weights=true", "model.tie_weights", "tie_word_embeddings false"}}) {
    try {
      TrainConfig::from_node(ConfigNode::load_string(base, {set}));
      ADD_FAILURE() << set << " was accepted";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(key), std::string::npos) << msg;
      EXPECT_NE(msg.find(path("l") + "/config.json"), std::string::npos) << msg;
      EXPECT_NE(msg.find(field), std::string::npos) << msg;
    }
  }
}

TEST_F(HfDirTest, ShardIndexMustAgreeWithTheFiles) {
  write_gpt2(path("m"), DType::f32);
  const HfModelDir src(path("m"));
  export_hf(src, src.spec(), path("s"), {.max_shard_bytes = 2000});
  // move one tensor's entry in the index to another shard: refused naming the tensor
  const std::string idx = path("s/model.safetensors.index.json");
  json j = json::parse(std::ifstream(idx));
  ASSERT_NE(j["weight_map"]["transformer.wte.weight"], j["weight_map"]["transformer.ln_f.weight"]);
  j["weight_map"]["transformer.wte.weight"] = j["weight_map"]["transformer.ln_f.weight"];
  std::ofstream(idx) << j.dump();
  try {
    HfModelDir bad(path("s"));
    FAIL() << "a wrong index was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("transformer.wte.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::apps::hf
