// TrainConfig loading: one read function per section, keys read only where they apply
// (an mlp config with `n_head` is an unknown-key error), then cross-field validation.
#include "apps/config.h"

#include <optional>
#include <sstream>

#include "apps/hf/hf_config.h"

#include <filesystem>

#include <strata/comm/nccl.h>
#include <strata/core/log.h>
#include <strata/data/registry.h>

namespace strata::apps {

int64_t parse_bytes(const std::string& what, const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  std::string unit(end ? end : "");
  for (const char* tail : {"iB", "B"})
    if (unit.size() > std::string(tail).size() && unit.ends_with(tail)) unit.resize(unit.size() - std::string(tail).size());
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K") scale = 1024.0;
  else if (unit == "M") scale = 1024.0 * 1024;
  else if (unit == "G") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  if (end == s.c_str() || scale == 0 || !(v > 0))
    STRATA_THROW(ConfigError, what, ": expected a positive size such as 80G, 80GiB or 512MiB, got '", s, "'");
  return int64_t(v * scale);
}

namespace {

#ifdef STRATA_WITH_CUDA
constexpr bool kCudaBuild = true;
#else
constexpr bool kCudaBuild = false;
#endif

void read_run(const ConfigNode& n, RunSection& s) {
  s.dir = n.get("dir", s.dir);
  s.seed = n.get("seed", s.seed);
  s.threads = n.get("threads", s.threads);
  n.check_range("threads", s.threads, 0, 4096);
  if (s.dir.empty()) n.fail("dir", "must not be empty");
  s.device = n.get("device", s.device);
  if (!try_parse_device(s.device)) n.fail("device", not_a_device(s.device));
  const std::string precision = n.get("precision", std::string(precision_name(s.precision)));
  n.one_of("precision", precision, {"f32", "bf16", "f16", "bf16_params", "f16_params"});
  s.precision = parse_precision(precision, n.key_path("precision"));
  s.log_level = n.get("log_level", s.log_level);
  if (!s.log_level.empty()) (void)parse_log_level(s.log_level, n.key_path("log_level"));
  s.peak_flops = n.get("peak_flops", s.peak_flops);
  n.check_range("peak_flops", s.peak_flops, 0, 1e21);
  s.tensorboard = n.get("tensorboard", s.tensorboard);
  const std::string memory = n.get("memory_per_rank", std::string("0"));
  if (memory != "0") s.memory_per_rank = parse_bytes(n.key_path("memory_per_rank"), memory);
  n.note_read("memory_per_rank", "size", "0", YAML::Node(memory));
  const ConfigNode trace = n.child("trace");
  s.trace_start_step = trace.get("start_step", s.trace_start_step);
  s.trace_steps = trace.get("steps", s.trace_steps);
  trace.check_range("start_step", double(s.trace_start_step), 0, 1e12);
  trace.check_range("steps", double(s.trace_steps), 0, 1e6);
}

// model.init_from: a key set beside it must agree with config.json's `hf_field` (exit 2
// naming both); `n` is the node holding `key`.
template <class A, class B>
void agree_hf(const ConfigNode& n, const std::string& key, const A& value, const B& hf_value, const std::string& hf_file,
              const std::string& hf_field) {
  if (n.has(key) && value != hf_value) {
    std::ostringstream msg;
    msg << std::boolalpha << "is " << value << " but model.init_from's " << hf_file << " has " << hf_field << " "
        << hf_value << " (remove " << n.key_path(key) << " or make it agree)";
    n.fail(key, msg.str());
  }
}

// The llama keys beside the token-model ones (read_model checked n_embd % n_head).
// `hf` (model.init_from's config.json, or null) gives their defaults, and a key set
// beside it must agree.
void read_llama(const ConfigNode& n, ModelSection& s, const hf::HfModelSpec* hf, const std::string& hf_file) {
  if (hf) {
    s.n_kv_head = hf->n_kv_head;
    s.intermediate_size = hf->intermediate_size;
    s.norm_eps = hf->norm_eps;
    s.rope_theta = hf->rope_theta;
    s.rope_scaling.reset();
    if (hf->rope_scaling) {
      const hf::RopeScaling& r = *hf->rope_scaling;
      s.rope_scaling = RopeScalingSection{r.factor, r.low_freq_factor, r.high_freq_factor,
                                          r.original_max_position_embeddings};
    }
  }
  if (s.dropout > 0) n.fail("dropout", "must be 0 for model.type llama (the Llama has no dropout)");
  // n_kv_head: key/value heads (grouped-query attention); 0 = n_head, 1 = multi-query.
  s.n_kv_head = n.get("n_kv_head", s.n_kv_head);
  n.check_range("n_kv_head", double(s.n_kv_head), 0, 1e4);
  const int64_t kv = s.n_kv_head > 0 ? s.n_kv_head : s.n_head;
  if (s.n_head % kv != 0)
    n.fail("n_kv_head", "must divide model.n_head (" + std::to_string(s.n_head) + " % " + std::to_string(kv) + " != 0)");
  if ((s.n_embd / s.n_head) % 2 != 0)
    n.fail("n_embd", "gives an odd head dimension n_embd / n_head = " + std::to_string(s.n_embd / s.n_head) +
                         " (the rotary embedding turns pairs of it)");
  s.intermediate_size = n.get("intermediate_size", s.intermediate_size);
  n.check_range("intermediate_size", double(s.intermediate_size), 0, 1e7);
  s.ffn_dim_multiplier = n.get("ffn_dim_multiplier", s.ffn_dim_multiplier);
  n.check_range("ffn_dim_multiplier", s.ffn_dim_multiplier, 0, 100);
  s.multiple_of = n.get("multiple_of", s.multiple_of);
  n.check_range("multiple_of", double(s.multiple_of), 1, 1e6);
  s.norm_eps = n.get("norm_eps", s.norm_eps);
  n.check_range("norm_eps", s.norm_eps, 0, 1, /*min_exclusive=*/true);
  s.rope_theta = n.get("rope_theta", s.rope_theta);
  n.check_range("rope_theta", s.rope_theta, 0, 1e12, /*min_exclusive=*/true);
  if (n.has("rope_scaling")) {
    const ConfigNode r = n.child("rope_scaling");
    RopeScalingSection rs;
    rs.factor = r.get("factor", rs.factor);
    r.check_range("factor", rs.factor, 0, 1e6, /*min_exclusive=*/true);
    rs.low_freq_factor = r.get("low_freq_factor", rs.low_freq_factor);
    r.check_range("low_freq_factor", rs.low_freq_factor, 0, 1e6, /*min_exclusive=*/true);
    rs.high_freq_factor = r.get("high_freq_factor", rs.high_freq_factor);
    r.check_range("high_freq_factor", rs.high_freq_factor, 0, 1e6, /*min_exclusive=*/true);
    if (rs.high_freq_factor <= rs.low_freq_factor)
      r.fail("high_freq_factor", "must exceed model.rope_scaling.low_freq_factor");
    rs.original_max_position_embeddings = r.get("original_max_position_embeddings", rs.original_max_position_embeddings);
    r.check_range("original_max_position_embeddings", double(rs.original_max_position_embeddings), 1, 1e9);
    s.rope_scaling = rs;
  }
  if (hf) {
    agree_hf(n, "n_kv_head", s.n_kv_head > 0 ? s.n_kv_head : s.n_head, hf->n_kv_head, hf_file, "num_key_value_heads");
    agree_hf(n, "intermediate_size", s.intermediate_size, hf->intermediate_size, hf_file, "intermediate_size");
    for (const char* k : {"ffn_dim_multiplier", "multiple_of"})
      if (n.has(k))
        n.fail(k, "is not used with model.init_from: " + hf_file + " gives intermediate_size " +
                      std::to_string(hf->intermediate_size) + " (remove " + n.key_path(k) + ")");
    agree_hf(n, "norm_eps", s.norm_eps, hf->norm_eps, hf_file, "rms_norm_eps");
    agree_hf(n, "rope_theta", s.rope_theta, hf->rope_theta, hf_file, "rope_theta");
    if (n.has("rope_scaling")) {
      if (!hf->rope_scaling)
        n.fail("rope_scaling", "is set but model.init_from's " + hf_file + " has rope_scaling null (remove " +
                                   n.key_path("rope_scaling") + " or make it agree)");
      const ConfigNode r = n.child("rope_scaling");
      const RopeScalingSection& rs = *s.rope_scaling;
      const hf::RopeScaling& h = *hf->rope_scaling;
      agree_hf(r, "factor", rs.factor, h.factor, hf_file, "rope_scaling.factor");
      agree_hf(r, "low_freq_factor", rs.low_freq_factor, h.low_freq_factor, hf_file, "rope_scaling.low_freq_factor");
      agree_hf(r, "high_freq_factor", rs.high_freq_factor, h.high_freq_factor, hf_file, "rope_scaling.high_freq_factor");
      agree_hf(r, "original_max_position_embeddings", rs.original_max_position_embeddings,
               h.original_max_position_embeddings, hf_file, "rope_scaling.original_max_position_embeddings");
    }
  }
}

// model.moe (gpt, llama): the mixture-of-experts MLP.
void read_moe(const ConfigNode& n, nn::MoEConfig& m) {
  m.experts = n.require<int64_t>("experts");
  n.check_range("experts", double(m.experts), 1, 1e5);
  m.top_k = n.get("top_k", m.top_k);
  n.check_range("top_k", double(m.top_k), 1, double(m.experts));
  m.every = n.get("every", m.every);
  n.check_range("every", double(m.every), 1, 1e4);
  m.gate = n.get("gate", m.gate);
  n.one_of("gate", m.gate, {"softmax", "sigmoid"});
  m.norm_topk = n.get("norm_topk", m.norm_topk);
  m.aux_loss_coef = n.get("aux_loss_coef", m.aux_loss_coef);
  n.check_range("aux_loss_coef", m.aux_loss_coef, 0, 1e3);
  m.z_loss_coef = n.get("z_loss_coef", m.z_loss_coef);
  n.check_range("z_loss_coef", m.z_loss_coef, 0, 1e3);
  m.shared_experts = n.get("shared_experts", m.shared_experts);
  n.check_range("shared_experts", double(m.shared_experts), 0, 1e3);
  m.capacity_factor = n.get("capacity_factor", m.capacity_factor);
  n.check_range("capacity_factor", m.capacity_factor, 0, 1e3);
  m.hidden = n.get("hidden", m.hidden);
  n.check_range("hidden", double(m.hidden), 0, 1e7);
  m.shared_expert_overlap = n.get("shared_expert_overlap", m.shared_expert_overlap);
}

void read_model(const ConfigNode& n, ModelSection& s) {
  // model.init_from: config.json gives the defaults, and a key set beside it must agree.
  s.init_from = n.get("init_from", s.init_from);
  std::optional<hf::HfModelSpec> hf;
  if (!s.init_from.empty()) hf = hf::read_hf_config(s.init_from);  // DataError naming config.json's field
  const std::string hf_file = s.init_from + "/" + hf::kConfigFile;
  auto agree = [&](const std::string& key, const auto& value, const auto& hf_value, const std::string& hf_field) {
    if (hf) agree_hf(n, key, value, hf_value, hf_file, hf_field);
  };
  s.type = n.get("type", hf ? hf->model_type : s.type);
  agree("type", s.type, hf ? hf->model_type : s.type, "architectures " + (hf ? hf->architecture : std::string()) + ", model.type");
  if (hf && hf->model_type != "gpt" && hf->model_type != "llama")
    n.fail("init_from", hf_file + " is a " + hf->architecture + ", which needs model.type " + hf->model_type +
                            "; this build has mlp, cnn, gpt and llama");
  n.one_of("type", s.type, {"mlp", "cnn", "gpt", "llama"});
  s.dropout = n.get("dropout", s.dropout);
  n.check_range("dropout", s.dropout, 0.0, 1.0, false, true);
  if (s.type == "mlp") {
    s.hidden = n.get("hidden", s.hidden);
    for (int64_t h : s.hidden)
      if (h <= 0) n.fail("hidden", "every hidden width must be positive, got " + std::to_string(h));
    s.activation = n.get("activation", s.activation);
    n.one_of("activation", s.activation, {"relu", "gelu", "gelu_tanh", "tanh"});
  } else if (s.type == "cnn") {
    s.channels = n.get("channels", s.channels);
    if (s.channels.empty()) n.fail("channels", "needs at least one conv block");
    for (int64_t c : s.channels)
      if (c <= 0) n.fail("channels", "every channel count must be positive, got " + std::to_string(c));
    s.batch_norm = n.get("batch_norm", s.batch_norm);
    s.fc_hidden = n.get("hidden", s.fc_hidden);
    n.check_range("hidden", double(s.fc_hidden), 1, 1e9);
  } else {
    s.block_size = n.get("block_size", hf ? hf->block_size : s.block_size);
    s.n_layer = n.get("n_layer", hf ? hf->n_layer : s.n_layer);
    s.n_head = n.get("n_head", hf ? hf->n_head : s.n_head);
    s.n_embd = n.get("n_embd", hf ? hf->n_embd : s.n_embd);
    if (s.type == "gpt") s.bias = n.get("bias", s.bias);
    s.tie_weights = n.get("tie_weights", hf ? hf->tie_weights : (s.type == "llama" ? false : s.tie_weights));
    s.checkpoint_activations =
        nn::parse_recompute(n.get("checkpoint_activations", std::string(nn::recompute_name(s.checkpoint_activations))),
                            n.key_path("checkpoint_activations"));
    n.one_of("checkpoint_activations", nn::recompute_name(s.checkpoint_activations), {"none", "full", "selective"});
    // vocab_size: token ids the GPT embeds; 0 = from the data (required for data.dataset tokens).
    s.vocab_size = n.get("vocab_size", hf ? hf->vocab : s.vocab_size);
    if (hf) {
      const bool llama = s.type == "llama";
      agree("block_size", s.block_size, hf->block_size, llama ? "max_position_embeddings" : "n_positions");
      agree("n_layer", s.n_layer, hf->n_layer, llama ? "num_hidden_layers" : "n_layer");
      agree("n_head", s.n_head, hf->n_head, llama ? "num_attention_heads" : "n_head");
      agree("n_embd", s.n_embd, hf->n_embd, llama ? "hidden_size" : "n_embd");
      agree("tie_weights", s.tie_weights, hf->tie_weights, "tie_word_embeddings");
      agree("vocab_size", s.vocab_size, hf->vocab, "vocab_size");
      if (!llama) agree("bias", s.bias, true, "GPT2LMHeadModel's biases: always");
    }
    n.check_range("vocab_size", double(s.vocab_size), 0, 1e8);
    n.check_range("block_size", double(s.block_size), 1, 1e6);
    n.check_range("n_layer", double(s.n_layer), 1, 1e4);
    n.check_range("n_head", double(s.n_head), 1, 1e4);
    n.check_range("n_embd", double(s.n_embd), 1, 1e6);
    if (s.n_embd % s.n_head != 0)
      n.fail("n_embd", "must be divisible by model.n_head (" + std::to_string(s.n_embd) + " % " +
                           std::to_string(s.n_head) + " != 0)");
    if (s.type == "llama") read_llama(n, s, hf ? &*hf : nullptr, hf_file);
    if (n.has("moe")) {
      if (hf) n.fail("moe", "is not read from model.init_from's " + hf_file + " (a dense model): remove it");
      read_moe(n.child("moe"), s.moe);
    }
  }
}

/// Asks for every key under `n` (recursively), so data.options of a registered dataset
/// passes the unknown-key check here; its factory reads them later (factory.cpp).
void accept_all_keys(const ConfigNode& n) {
  for (auto it = n.yaml().begin(); it != n.yaml().end(); ++it) {
    const std::string key = it->first.Scalar();
    if (it->second.IsMap())
      accept_all_keys(n.child(key));
    else
      (void)n.has(key);
  }
}

/// data.val_fraction in [0, 1) (or (0, 1) when `positive`) with default `def`.
void read_val_fraction(const ConfigNode& n, DataSection& s, double def, bool positive) {
  s.val_fraction = n.get("val_fraction", def);
  n.check_range("val_fraction", s.val_fraction, 0.0, 1.0, positive, true);
}

/// data.sample_shape: at least one dimension, each positive.
void read_sample_shape(const ConfigNode& n, DataSection& s) {
  s.sample_shape = n.get("sample_shape", s.sample_shape);
  if (s.sample_shape.empty()) n.fail("sample_shape", "must have at least one dimension");
  for (int64_t d : s.sample_shape)
    if (d <= 0) n.fail("sample_shape", "every dimension must be positive, got " + std::to_string(d));
}

// data.tokenizer: a missing file is a config error (exit 2) naming the key; a file that
// is not a tokenizer strata can run is a data error (exit 1) naming the file, raised
// when the data is built.
void read_tokenizer(const ConfigNode& n, DataSection& s) {
  s.tokenizer = n.resolve_path("tokenizer", n.get("tokenizer", s.tokenizer));
  if (s.tokenizer.empty()) return;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(s.tokenizer, ec))
    n.fail("tokenizer", "'" + s.tokenizer + "' is not a file (give a tokenizer.json, e.g. one written by "
                        "`strata tokenizer train`)");
}

// One-line meanings for the config reference are the comments on each key below.
void read_data(const ConfigNode& n, DataSection& s) {
  // dataset: which data to train on (built-in name or one registered from C++).
  s.dataset = n.get("dataset", s.dataset);
  const bool registered = !data::is_builtin_dataset(s.dataset);
  if (registered && !data::find_dataset(s.dataset)) {
    std::string names;
    for (const auto& b : data::builtin_dataset_names()) names += (names.empty() ? "" : "|") + b;
    const auto extra = data::registered_datasets();
    for (const auto& r : extra) names += "|" + r;
    n.fail("dataset", "expected one of " + names + " (or a name registered with data::register_dataset), got '" +
                          s.dataset + "'");
  }
  // prefetch: batches built ahead on the loader thread (0 = build on the training thread).
  s.prefetch = n.get("prefetch", s.prefetch);
  n.check_range("prefetch", double(s.prefetch), 0, 64);
  if (s.dataset == "fashion_mnist") {
    s.path = n.get("path", s.path);  // path: directory of the four Fashion-MNIST .gz files
    // val_fraction: share of train held out (seeded) for evaluation during training; 0 = evaluate on test.
    read_val_fraction(n, s, 0.0, false);
    s.seed = n.get("seed", s.seed);  // seed: which train samples form the val split
    return;
  }
  if (s.dataset == "idx" || s.dataset == "npy") {
    s.images = n.require<std::string>("images");  // images: training images file, N first (IDX u8 / .npy)
    s.labels = n.require<std::string>("labels");  // labels: training labels file, 1-d (N)
    s.test_images = n.get("test_images", s.test_images);  // test_images: optional test images, evaluated after training
    s.test_labels = n.get("test_labels", s.test_labels);  // test_labels: labels of test_images
    if (s.test_images.empty() != s.test_labels.empty())
      n.fail(s.test_images.empty() ? "test_labels" : "test_images",
             "data.test_images and data.test_labels go together; set both or neither");
    // num_classes: labels must be in [0, num_classes); the classifier's output width.
    s.num_classes = n.require<int64_t>("num_classes");
    n.check_range("num_classes", double(s.num_classes), 2, 1e6);
    // val_fraction: share of train held out (seeded) for evaluation during training; default 0.1, 0 with a test split.
    read_val_fraction(n, s, s.test_images.empty() ? 0.1 : 0.0, false);
    if (s.test_images.empty() && s.val_fraction == 0.0)
      n.fail("val_fraction", "must be > 0 without data.test_images: something has to be evaluated");
    s.seed = n.get("seed", s.seed);  // seed: which train samples form the val split
    return;
  }
  if (s.dataset == "tokens") {
    // path: a .bin token file (llm.c header or raw uint16), or a directory with train.bin (and val.bin).
    s.path = n.require<std::string>("path");
    s.val_path = n.get("val_path", s.val_path);  // val_path: token file of the val split ("" = <dir>/val.bin or carved)
    if (!s.val_path.empty() && n.has("val_fraction"))
      n.fail("val_fraction", "data.val_path is set, so the val split is that file; remove data.val_fraction");
    // val_fraction: tail of the train tokens held out when there is no val file.
    read_val_fraction(n, s, 0.1, true);
    // stride: tokens between the starts of training windows; 0 = model.block_size (non-overlapping).
    s.stride = n.get("stride", int64_t(0));
    n.check_range("stride", double(s.stride), 0, 1e12);
    read_tokenizer(n, s);  // tokenizer: the tokenizer.json the token files were made with (vocab size, sample)
    return;
  }
  if (registered) {
    s.path = n.get("path", s.path);  // path: handed to the registered dataset's factory
    s.seed = n.get("seed", s.seed);  // seed: handed to the factory; also seeds a carved val split
    // val_fraction: share of train held out (seeded) when the factory returns no val split.
    read_val_fraction(n, s, 0.1, false);
    read_sample_shape(n, s);  // sample_shape: one input's shape (classifiers); each batch is checked against it
    s.num_classes = n.get("num_classes", s.num_classes);  // num_classes: the classifier's output width
    n.check_range("num_classes", double(s.num_classes), 2, 1e6);
    // options: the registered dataset's own keys (a mapping), read by its factory.
    const ConfigNode opts = n.child("options");
    accept_all_keys(opts);
    s.options_yaml = opts.yaml().IsDefined() && !opts.yaml().IsNull() ? opts.dump() : "";
    return;
  }
  read_val_fraction(n, s, s.val_fraction, true);
  if (s.dataset == "text") {
    s.path = n.get("path", s.path);
    s.stride = n.get("stride", s.stride);
    n.check_range("stride", double(s.stride), 1, 1e9);
    read_tokenizer(n, s);  // tokenizer: a tokenizer.json the text is encoded with ("" = bytes)
    return;
  }
  s.kind = n.get("kind", s.kind);
  n.one_of("kind", s.kind, {"classification", "tokens"});
  s.size = n.get("size", s.size);
  n.check_range("size", double(s.size), 2, 1e10);
  s.seed = n.get("seed", s.seed);
  if (s.kind == "classification") {
    read_sample_shape(n, s);
    s.num_classes = n.get("num_classes", s.num_classes);
    n.check_range("num_classes", double(s.num_classes), 2, 1e6);
  } else {
    s.vocab_size = n.get("vocab_size", s.vocab_size);
    n.check_range("vocab_size", double(s.vocab_size), 2, 1e6);
    s.noise = n.get("noise", s.noise);
    n.check_range("noise", s.noise, 0.0, 1.0);
  }
}

void read_optim(const ConfigNode& n, OptimSection& s) {
  s.name = n.get("name", s.name);
  n.one_of("name", s.name, {"sgd", "adam", "adamw"});
  if (s.name == "adamw") s.weight_decay = 0.01;  // torch.optim.AdamW default
  s.lr = n.require<double>("lr");
  n.check_range("lr", s.lr, 0.0, 100.0, true);
  s.weight_decay = n.get("weight_decay", s.weight_decay);
  n.check_range("weight_decay", s.weight_decay, 0.0, 10.0);
  if (s.name == "sgd") {
    s.momentum = n.get("momentum", s.momentum);
    n.check_range("momentum", s.momentum, 0.0, 1.0, false, true);
    s.dampening = n.get("dampening", s.dampening);
    n.check_range("dampening", s.dampening, 0.0, 1.0);
    s.nesterov = n.get("nesterov", s.nesterov);
    if (s.nesterov && (s.momentum <= 0 || s.dampening != 0))
      n.fail("nesterov", "needs momentum > 0 and dampening 0");
  } else {
    s.betas = n.get("betas", s.betas);
    if (s.betas.size() != 2) n.fail("betas", "expected two values [beta1, beta2], got " + std::to_string(s.betas.size()));
    for (double b : s.betas)
      if (!(b >= 0 && b < 1)) n.fail("betas", "each beta must be in [0, 1), got " + std::to_string(b));
    s.eps = n.get("eps", s.eps);
    n.check_range("eps", s.eps, 0.0, 1.0, true);
  }
}

void read_schedule(const ConfigNode& n, ScheduleSection& s) {
  // Every schedule key is read whatever the name, so switching `name` with --set does
  // not turn the other schedule's keys into errors.
  s.name = n.get("name", s.name);
  n.one_of("name", s.name, {"constant", "step", "cosine"});
  s.warmup_steps = n.get("warmup_steps", s.warmup_steps);
  n.check_range("warmup_steps", double(s.warmup_steps), 0, 1e12);
  s.step_size = n.get("step_size", s.step_size);
  n.check_range("step_size", double(s.step_size), 1, 1e12);
  s.gamma = n.get("gamma", s.gamma);
  n.check_range("gamma", s.gamma, 0.0, 1.0, true);
  s.min_lr = n.get("min_lr", s.min_lr);
  n.check_range("min_lr", s.min_lr, 0.0, 100.0);
}

void read_train(const ConfigNode& n, TrainSection& s) {
  s.epochs = n.get("epochs", s.epochs);
  s.max_steps = n.get("max_steps", s.max_steps);
  n.check_range("epochs", double(s.epochs), 0, 1e9);
  n.check_range("max_steps", double(s.max_steps), 0, 1e15);
  if (s.epochs == 0 && s.max_steps == 0) n.fail("epochs", "must be > 0 when train.max_steps is 0");
  s.batch_size = n.get("batch_size", s.batch_size);
  n.check_range("batch_size", double(s.batch_size), 1, 1e9);
  s.grad_clip = n.get("grad_clip", s.grad_clip);
  n.check_range("grad_clip", s.grad_clip, 0.0, 1e30);
  s.eval_every = n.get("eval_every", s.eval_every);
  n.check_range("eval_every", double(s.eval_every), 0, 1e15);
  s.eval_batches = n.get("eval_batches", s.eval_batches);
  n.check_range("eval_batches", double(s.eval_batches), 0, 1e15);
  s.log_every = n.get("log_every", s.log_every);
  n.check_range("log_every", double(s.log_every), 1, 1e15);
  s.checkpoint_every = n.get("checkpoint_every", s.checkpoint_every);
  n.check_range("checkpoint_every", double(s.checkpoint_every), 0, 1e15);
  s.keep_checkpoints = n.get("keep_checkpoints", s.keep_checkpoints);
  n.check_range("keep_checkpoints", double(s.keep_checkpoints), 0, 1e9);
  s.save_final = n.get("save_final", s.save_final);
  s.checkpoint_async = n.get("checkpoint_async", s.checkpoint_async);
  s.resume = n.get("resume", s.resume);
  s.grad_accum_steps = n.get("grad_accum_steps", s.grad_accum_steps);
  n.check_range("grad_accum_steps", double(s.grad_accum_steps), 1, 1e6);
}

void read_parallel(const ConfigNode& n, parallel::ParallelConfig& s) { s = parallel::ParallelConfig::from_node(n); }

void read_comm(const ConfigNode& n, comm::CommOptions& s, std::string& backend) {
  backend = n.get("backend", backend);
  n.one_of("backend", backend, {"auto", "mpi", "nccl"});
  std::string algo = comm::algorithm_name(s.algorithm);
  algo = n.get("algorithm", algo);
  n.one_of("algorithm", algo, {"native", "ring", "tree", "recursive", "auto"});
  s.algorithm = comm::parse_algorithm(algo);
  s.timeout_s = n.get("timeout_s", s.timeout_s);
  n.check_range("timeout_s", s.timeout_s, 0.0, 1e9, true);
  s.debug = n.get("debug", s.debug);
  s.chunk_bytes = n.get("chunk_bytes", s.chunk_bytes);
  n.check_range("chunk_bytes", double(s.chunk_bytes), 1024, 1e12);
  s.small_message_bytes = n.get("small_message_bytes", s.small_message_bytes);
  n.check_range("small_message_bytes", double(s.small_message_bytes), 0, 1e12);
  std::string reduce_dtype = comm::reduce_dtype_name(s.reduce_dtype);
  reduce_dtype = n.get("reduce_dtype", reduce_dtype);
  n.one_of("reduce_dtype", reduce_dtype, {"param", "f32"});
  s.reduce_dtype = comm::parse_reduce_dtype(reduce_dtype);
  s.validate();
}

}  // namespace

TrainConfig TrainConfig::from_node(const ConfigNode& root) {
  TrainConfig c;
  read_run(root.child("run"), c.run);
  read_model(root.child("model"), c.model);
  read_data(root.child("data"), c.data);
  read_optim(root.child("optim"), c.optim);
  read_schedule(root.child("schedule"), c.schedule);
  read_train(root.child("train"), c.train);
  if (root.has("parallel") && root.yaml()["parallel"].IsScalar()) {
    // `parallel: auto`: the layout is chosen when the world size is known (auto_layout.h).
    // Read from the YAML itself: `parallel` is documented as a section, not as a key.
    if (const std::string v = root.yaml()["parallel"].Scalar(); v != "auto")
      root.fail("parallel", "expected a mapping of layout keys or 'auto', got '" + v + "'");
    c.parallel.auto_layout = true;
  } else {
    read_parallel(root.child("parallel"), c.parallel);
  }
  read_comm(root.child("comm"), c.comm, c.comm_backend);
  root.check_unknown_keys();
  c.yaml = root.dump();
  if (!c.data.tokenizer.empty()) {
    // The config a checkpoint echoes names the tokenizer wherever it is run from.
    YAML::Node y = YAML::Load(c.yaml);
    y["data"]["tokenizer"] = std::filesystem::absolute(c.data.tokenizer).lexically_normal().string();
    c.yaml = YAML::Dump(y);
  }
  if (!c.model.init_from.empty()) {
    // The config a checkpoint echoes must rebuild the model without the directory it was
    // initialised from: the keys config.json filled are written out, init_from dropped.
    YAML::Node y = YAML::Load(c.yaml);
    YAML::Node m = y["model"];
    m.remove("init_from");
    m["type"] = c.model.type;
    m["block_size"] = c.model.block_size;
    m["n_layer"] = c.model.n_layer;
    m["n_head"] = c.model.n_head;
    m["n_embd"] = c.model.n_embd;
    if (c.model.type == "gpt") m["bias"] = c.model.bias;
    m["tie_weights"] = c.model.tie_weights;
    m["vocab_size"] = c.model.vocab_size;
    if (c.model.type == "llama") {
      m["n_kv_head"] = c.model.n_kv_head;
      m["intermediate_size"] = c.model.intermediate_size;
      m["norm_eps"] = c.model.norm_eps;
      m["rope_theta"] = c.model.rope_theta;
      m.remove("rope_scaling");
      if (c.model.rope_scaling) {
        const RopeScalingSection& r = *c.model.rope_scaling;
        YAML::Node rs;
        rs["factor"] = r.factor;
        rs["low_freq_factor"] = r.low_freq_factor;
        rs["high_freq_factor"] = r.high_freq_factor;
        rs["original_max_position_embeddings"] = r.original_max_position_embeddings;
        m["rope_scaling"] = rs;
      }
    }
    c.yaml = YAML::Dump(y);
  }
  c.validate();
  return c;
}

TrainConfig TrainConfig::load(const std::string& path, const std::vector<std::string>& overrides) {
  TrainConfig c = from_node(ConfigNode::load_file(path, overrides));
  c.source = path;
  return c;
}

void TrainConfig::validate() const {
  const Device dev = parse_device(run.device);
  if (!dev.is_cpu() && !kCudaBuild)
    config_fail("run.device", "'" + run.device + "' needs a CUDA build of strata; this one was built without CUDA "
                              "(configure with -DSTRATA_CUDA=ON where the CUDA toolkit is installed)");
  if (!parallel.devices.empty() && parallel.devices[0] != dev)
    config_fail("parallel.devices", "devices[0] is " + parallel.devices[0].str() + " but run.device is '" + run.device +
                                        "': the model, its optimizer and the loss live on devices[0], so set "
                                        "run.device: " + parallel.devices[0].str());
  if (comm_backend == "nccl" && dev.is_cpu())
    config_fail("comm.backend", "nccl moves CUDA tensors only, but run.device is '" + run.device +
                                    "' (set run.device: cuda, or comm.backend: mpi)");
  if (comm_backend == "nccl" && !comm::nccl_available())
    config_fail("comm.backend", "nccl is not in this build (it needs CUDA and NCCL >= 2.18 at configure time)");
  if (comm_backend == "mpi" && !dev.is_cpu())
    config_fail("comm.backend", "mpi cannot move CUDA tensors (run.device is '" + run.device +
                                    "'); use nccl, the default for a CUDA device");
  // f16 steps through the GradScaler, whose found-inf flag ParallelModel::unscale_ agrees
  // over every rank (ZeRO and tp shard the gradients). The pipeline does not scale its
  // micro-batch losses, and ring attention runs in f32 only.
  if (run.precision == Precision::f16_params && (parallel.dims.pp > 1 || parallel.dims.cp > 1 || parallel.thread_replicas()))
    config_fail("run.precision", "f16_params (dynamic loss scaling) works on one process, with DDP, ZeRO-1/2/3 and "
                                 "tensor parallelism; the pipeline does not scale its micro-batch losses and "
                                 "parallel.replicas is not implemented with it: use bf16_params there");
  if (run.precision == Precision::bf16_params && parallel.thread_replicas())
    config_fail("run.precision", "bf16_params works with DDP, ZeRO-1/2/3, tensor and pipeline parallelism; with "
                                 "parallel.replicas it is not implemented yet");
  const bool registered = !data::is_builtin_dataset(data.dataset);
  // A registered dataset serves whichever model the config asks for (its batches are checked).
  const bool tokens = data.dataset == "text" || data.dataset == "tokens" ||
                      (data.dataset == "synthetic" && data.kind == "tokens") || (registered && model.token_model());
  if (model.token_model() && !tokens)
    config_fail("data.dataset", "model.type " + model.type +
                                    " needs token data (text, tokens, or synthetic with kind: tokens), got '" +
                                    data.dataset + "'");
  if (!model.token_model() && tokens)
    config_fail("model.type", "token data needs model.type gpt or llama, got '" + model.type + "'");
  if (model.token_model()) {
    const bool need = data.dataset == "tokens" || registered;
    const int64_t least = data.dataset == "text" ? 256 : data.dataset == "synthetic" ? data.vocab_size : 2;
    if (need && model.vocab_size == 0 && data.tokenizer.empty())
      config_fail("model.vocab_size", "data.dataset " + data.dataset +
                                          " needs the tokenizer's vocabulary size (50257 for GPT-2's, 256 for "
                                          "bytes); the data's largest token id is checked against it");
    if (model.vocab_size != 0 && model.vocab_size < least && data.tokenizer.empty())
      config_fail("model.vocab_size", "is " + std::to_string(model.vocab_size) + " but data.dataset " + data.dataset +
                                          " has ids up to " + std::to_string(least - 1));
  }
  const bool shape_from_config = data.dataset == "synthetic" || registered;
  if (model.type == "cnn" && shape_from_config && data.sample_shape.size() != 3)
    config_fail("data.sample_shape", "model.type cnn needs an image shape [C, H, W]");
  if (model.type == "cnn" && shape_from_config) {
    const int64_t blocks = int64_t(model.channels.size());
    if (data.sample_shape[1] != data.sample_shape[2] || data.sample_shape[1] % (int64_t(1) << blocks) != 0)
      config_fail("data.sample_shape", "model.type cnn needs square images whose side is divisible by 2^" +
                                           std::to_string(blocks));
  }
  if (schedule.name == "cosine" && schedule.min_lr > optim.lr)
    config_fail("schedule.min_lr", "must not exceed optim.lr");
  if (model.type == "cnn" && data.dataset == "fashion_mnist" && 28 % (int64_t(1) << model.channels.size()) != 0)
    config_fail("model.channels", "28x28 images allow at most 2 pooling blocks, got " +
                                      std::to_string(model.channels.size()));
}

}  // namespace strata::apps
