// Config -> datasets, model, optimizer, schedule, loss.
#include "apps/factory.h"

#include "apps/model_family.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>

#include <strata/autograd/functions.h>
#include <strata/data/array_dataset.h>
#include <strata/data/fashion_mnist.h>
#include <strata/data/registry.h>
#include <strata/data/subset.h>
#include <strata/data/synthetic.h>
#include <strata/data/text_dataset.h>
#include <strata/data/token_dataset.h>
#include <strata/data/token_stream.h>
#include <strata/data/tokenizer_json.h>
#include <strata/core/threads.h>
#include <map>
#include <mutex>
#include <strata/optim/adam.h>
#include <strata/optim/sgd.h>

namespace strata::apps {
namespace {
namespace fs = std::filesystem;

/// Train (minus a seeded val_fraction carved from it), val and test into `b`: with a val
/// split, evaluation during training uses it and test is evaluated once at the end;
/// without one, test is the eval split (the classic MNIST setup).
void set_splits(DataBundle& b, std::shared_ptr<const data::Dataset> train_all,
                std::shared_ptr<const data::Dataset> test, double val_fraction, uint64_t seed) {
  if (data::val_count(train_all->size(), val_fraction) >= train_all->size())
    config_fail("data.val_fraction", "leaves no training samples out of " + std::to_string(train_all->size()));
  auto split = data::random_split(std::move(train_all), val_fraction, seed);
  b.train = std::move(split.train);
  if (split.val) {
    b.eval = std::move(split.val);
    b.eval_split = "val";
    b.test = std::move(test);
  } else {
    b.eval = std::move(test);
    b.eval_split = "test";
  }
}

/// data.dataset tokens: train (and val) token files, ids checked against model.vocab_size.
void build_tokens(const TrainConfig& cfg, DataBundle& b) {
  const auto& d = cfg.data;
  std::string train_path = d.path, val_path = d.val_path;
  std::error_code ec;
  if (fs::is_directory(d.path, ec)) {  // nanoGPT's data/<name>/{train,val}.bin
    train_path = (fs::path(d.path) / "train.bin").string();
    const std::string v = (fs::path(d.path) / "val.bin").string();
    if (val_path.empty() && fs::exists(v, ec)) val_path = v;
  }
  const int64_t t = cfg.model.block_size, v = gpt_vocab(cfg);
  const int64_t stride = d.stride > 0 ? d.stride : t;
  auto train = std::make_shared<const data::TokenFile>(train_path);
  train->check_vocab(v, "model.vocab_size");
  if (!val_path.empty()) {
    auto val = std::make_shared<const data::TokenFile>(val_path);
    val->check_vocab(v, "model.vocab_size");
    b.train = std::make_shared<data::TokenDataset>(train, t, stride);
    b.eval = std::make_shared<data::TokenDataset>(val, t, t);  // every val token predicted once
  } else {
    const int64_t n = train->size(), n_val = std::llround(double(n) * d.val_fraction);
    if (n_val < t + 1)
      config_fail("data.val_fraction", "the val tail of " + train_path + " has " + std::to_string(n_val) +
                                           " tokens, fewer than model.block_size + 1 = " + std::to_string(t + 1) +
                                           " (or set data.val_path)");
    b.train = std::make_shared<data::TokenDataset>(train, 0, n - n_val, t, stride);
    b.eval = std::make_shared<data::TokenDataset>(train, n - n_val, n, t, t);
  }
  b.eval_split = "val";
  b.tokens = true;
  b.tokens_per_sample = t;
}

/// data.options of a registered dataset as a ConfigNode whose key paths read "data.options.*".
ConfigNode options_root(const TrainConfig& cfg) {
  YAML::Node root;
  root["data"]["options"] = cfg.data.options_yaml.empty() ? YAML::Node(YAML::NodeType::Map)
                                                          : YAML::Load(cfg.data.options_yaml);
  YAML::Emitter e;
  e << root;
  return ConfigNode::load_string(e.c_str(), {}, cfg.source.empty() ? "<config>" : cfg.source);
}

/// A registered dataset's sample 0 must have the layout the config's model consumes.
void check_layout(const TrainConfig& cfg, const data::Dataset& ds, const char* split) {
  const std::string who = "[dataset] '" + cfg.data.dataset + "' (registered): the " + split + " split";
  if (ds.size() <= 0) STRATA_THROW(DataError, who, " is empty");
  const data::Batch one = ds.get_batch({0});
  Shape in_want{1}, tgt_want{1};
  DType in_dtype = DType::f32;
  if (cfg.model.token_model()) {
    in_want.push_back(cfg.model.block_size);
    tgt_want.push_back(cfg.model.block_size);
    in_dtype = DType::i64;
  } else {
    in_want.insert(in_want.end(), cfg.data.sample_shape.begin(), cfg.data.sample_shape.end());
  }
  if (one.input.shape() != in_want || one.input.dtype() != in_dtype || one.target.shape() != tgt_want ||
      one.target.dtype() != DType::i64)
    STRATA_THROW(DataError, who, " gives input ", dtype_name(one.input.dtype()), shape_str(one.input.shape()),
                 " and target ", dtype_name(one.target.dtype()), shape_str(one.target.shape()),
                 " for one sample; model.type ", cfg.model.type, " needs input ", dtype_name(in_dtype),
                 shape_str(in_want), " and target i64", shape_str(tgt_want),
                 cfg.model.token_model() ? " (model.block_size)" : " (data.sample_shape)");
}

/// A dataset registered with data::register_dataset: its factory, then val carved from
/// train when it returns none.
void build_registered(const TrainConfig& cfg, DataBundle& b) {
  const auto& d = cfg.data;
  const data::DatasetFactory* factory = data::find_dataset(d.dataset);
  if (!factory) config_fail("data.dataset", "'" + d.dataset + "' is not registered in this program");
  const ConfigNode root = options_root(cfg);
  data::DatasetSplits s;
  try {
    s = (*factory)({.name = d.dataset,
                    .path = d.path,
                    .seed = d.seed,
                    .block_size = cfg.model.token_model() ? cfg.model.block_size : 0,
                    .options = root.child("data").child("options")});
    root.check_unknown_keys();
  } catch (const ConfigError& e) {
    // The options were re-parsed from the effective config, so a "(line N)" would not be
    // the user's file's line: keep the key path, drop the line.
    static const std::regex kLine(R"( \(line [0-9]+\)$)");
    throw ConfigError(std::regex_replace(std::string(e.what()), kLine, ""));
  }
  if (!s.train) STRATA_THROW(DataError, "[dataset] '", d.dataset, "' (registered): the factory returned no train split");
  if (s.val) {
    b.train = s.train;
    b.eval = s.val;
    b.eval_split = "val";
    b.test = s.test;
  } else {
    if (!s.test && d.val_fraction == 0.0)
      config_fail("data.val_fraction", "'" + d.dataset + "' returns neither a val nor a test split, so val has to be "
                                       "carved from train: set it above 0");
    set_splits(b, s.train, s.test, d.val_fraction, d.seed);
  }
  for (const auto& [ds, name] : {std::pair{b.train, "train"}, {b.eval, b.eval_split.c_str()}, {b.test, "test"}})
    if (ds) check_layout(cfg, *ds, name);
  if (cfg.model.token_model()) {
    b.tokens = true;
    b.tokens_per_sample = cfg.model.block_size;
  }
}

}  // namespace

std::shared_ptr<const data::Tokenizer> config_tokenizer(const TrainConfig& cfg) {
  if (cfg.data.tokenizer.empty()) return nullptr;
  // The model's vocabulary, the data and `strata sample` all ask: one load per process.
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const data::Tokenizer>> loaded;
  std::lock_guard lock(mu);
  auto& t = loaded[cfg.data.tokenizer];
  if (!t) t = data::load_tokenizer(cfg.data.tokenizer);
  return t;
}

int64_t gpt_vocab(const TrainConfig& cfg) {
  if (cfg.model.vocab_size > 0) return cfg.model.vocab_size;
  if (const auto tok = config_tokenizer(cfg)) return tok->vocab_size();
  return cfg.data.dataset == "text" ? data::TextDataset::kVocabSize : cfg.data.vocab_size;
}

Shape input_shape(const TrainConfig& cfg) {
  const auto& d = cfg.data;
  if (d.dataset == "fashion_mnist") return {1, data::FashionMnist::kRows, data::FashionMnist::kCols};
  if (d.dataset == "idx" || d.dataset == "npy") return data::sample_shape_of(d.dataset, d.images);
  return d.sample_shape;
}

int64_t num_classes(const TrainConfig& cfg) {
  return cfg.data.dataset == "fashion_mnist" ? data::FashionMnist::kNumClasses : cfg.data.num_classes;
}

DataBundle build_data(const TrainConfig& cfg) {
  const auto& d = cfg.data;
  DataBundle b;
  if (d.dataset == "fashion_mnist") {
    const std::string dir = d.path.empty() ? std::string(data::kFashionMnistDir) : d.path;
    auto train = std::make_shared<data::FashionMnist>(data::Split::train, dir);  // train's errors first
    set_splits(b, std::move(train), std::make_shared<data::FashionMnist>(data::Split::test, dir), d.val_fraction,
               d.seed);
    return b;
  }
  if (d.dataset == "idx" || d.dataset == "npy") {
    const auto load = d.dataset == "idx" ? &data::load_idx_classification : &data::load_npy_classification;
    auto train = load(d.images, d.labels, d.num_classes);
    std::shared_ptr<const data::Dataset> test;
    if (!d.test_images.empty()) test = load(d.test_images, d.test_labels, d.num_classes);
    if (test && static_cast<const data::ArrayDataset&>(*test).sample_shape() != train->sample_shape())
      STRATA_THROW(DataError, "[", d.dataset, "] ", d.test_images, ": test samples have shape ",
                   shape_str(static_cast<const data::ArrayDataset&>(*test).sample_shape()), " but ", d.images,
                   " has ", shape_str(train->sample_shape()));
    set_splits(b, std::move(train), std::move(test), d.val_fraction, d.seed);
    return b;
  }
  if (d.dataset == "tokens") {
    build_tokens(cfg, b);
    return b;
  }
  if (!data::is_builtin_dataset(d.dataset)) {
    build_registered(cfg, b);
    return b;
  }
  b.eval_split = "val";
  if (d.dataset == "text" && !d.tokenizer.empty()) {
    const int64_t t = cfg.model.block_size;
    const auto tok = config_tokenizer(cfg);
    const std::string path = d.path.empty() ? std::string(data::kFortunesDir) : d.path;
    auto ids = std::make_shared<const std::vector<uint32_t>>(data::tokenize_text_corpus(path, *tok, get_num_threads()));
    const int64_t vocab = gpt_vocab(cfg);
    if (tok->vocab_size() > vocab)
      config_fail("model.vocab_size", "is " + std::to_string(vocab) + " but data.tokenizer " + d.tokenizer +
                                          " has " + std::to_string(tok->vocab_size()) + " tokens");
    const int64_t n = int64_t(ids->size()), n_val = std::llround(double(n) * d.val_fraction);
    if (n_val < t + 1)
      config_fail("data.val_fraction", "the val split has " + std::to_string(n_val) +
                                           " tokens, fewer than model.block_size + 1 = " + std::to_string(t + 1));
    b.train = std::make_shared<data::TokenStreamDataset>(ids, 0, n - n_val, t, d.stride);
    b.eval = std::make_shared<data::TokenStreamDataset>(ids, n - n_val, n, t, t);  // every val token predicted once
    b.tokens = true;
    b.tokens_per_sample = t;
    return b;
  }
  if (d.dataset == "text") {
    const int64_t t = cfg.model.block_size;
    auto splits = data::load_text_splits(d.path.empty() ? std::string(data::kFortunesDir) : d.path, d.val_fraction);
    if (int64_t(splits.val.size()) < t + 1)
      config_fail("data.val_fraction", "the val split has " + std::to_string(splits.val.size()) +
                                           " bytes, fewer than model.block_size + 1 = " + std::to_string(t + 1));
    b.bigram_entropy = data::bigram_entropy(splits.train, splits.val);
    b.unigram_entropy = data::unigram_entropy(splits.train, splits.val);
    b.train = std::make_shared<data::TextDataset>(std::move(splits.train), t, d.stride);
    // Eval on non-overlapping windows: every val byte is predicted once.
    b.eval = std::make_shared<data::TextDataset>(std::move(splits.val), t, t);
    b.tokens = true;
    b.tokens_per_sample = t;
    return b;
  }
  std::shared_ptr<const data::Dataset> all;
  if (d.kind == "classification") {
    all = std::make_shared<data::SyntheticClassification>(data::SyntheticClassificationOptions{
        .size = d.size, .sample_shape = d.sample_shape, .num_classes = d.num_classes, .seed = d.seed});
  } else {
    all = std::make_shared<data::SyntheticTokens>(data::SyntheticTokensOptions{.size = d.size,
                                                                               .block_size = cfg.model.block_size,
                                                                               .vocab_size = d.vocab_size,
                                                                               .noise = d.noise,
                                                                               .seed = d.seed});
    b.tokens = true;
    b.tokens_per_sample = cfg.model.block_size;
  }
  const int64_t n_val = std::max<int64_t>(1, int64_t(double(d.size) * d.val_fraction + 0.5));
  if (n_val >= d.size) config_fail("data.val_fraction", "leaves no training samples");
  b.train = std::make_shared<data::SubsetDataset>(all, 0, d.size - n_val);
  b.eval = std::make_shared<data::SubsetDataset>(all, d.size - n_val, n_val);
  return b;
}

std::shared_ptr<nn::Module> build_model(const TrainConfig& cfg, Generator& gen) {
  return model_family(cfg).build(cfg, gen);
}

std::unique_ptr<optim::Optimizer> build_optimizer(const TrainConfig& cfg, const nn::Module& model) {
  return build_optimizer(cfg, model.named_parameters());
}

std::unique_ptr<optim::Optimizer> build_optimizer(const TrainConfig& cfg, optim::NamedTensors params) {
  const auto& o = cfg.optim;
  if (o.name == "sgd")
    return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions{.lr = o.lr,
                                                                             .momentum = o.momentum,
                                                                             .dampening = o.dampening,
                                                                             .weight_decay = o.weight_decay,
                                                                             .nesterov = o.nesterov});
  if (o.name == "adam")
    return std::make_unique<optim::Adam>(
        std::move(params),
        optim::AdamOptions{
            .lr = o.lr, .beta1 = o.betas[0], .beta2 = o.betas[1], .eps = o.eps, .weight_decay = o.weight_decay});
  return std::make_unique<optim::AdamW>(
      std::move(params),
      optim::AdamWOptions{
          .lr = o.lr, .beta1 = o.betas[0], .beta2 = o.betas[1], .eps = o.eps, .weight_decay = o.weight_decay});
}

optim::LrSchedule build_schedule(const TrainConfig& cfg, int64_t total_steps) {
  const auto& s = cfg.schedule;
  optim::ScheduleOptions o;
  o.kind = s.name;
  o.base_lr = cfg.optim.lr;
  o.step_size = s.step_size;
  o.gamma = s.gamma;
  o.warmup_steps = s.warmup_steps;
  o.total_steps = std::max<int64_t>(total_steps, s.warmup_steps + 1);
  o.min_lr = s.min_lr;
  return optim::make_schedule(o);
}

Tensor batch_loss(nn::Module& model, const TrainConfig& cfg, const data::Batch& batch) {
  return model_family(cfg).loss(model, batch);
}

}  // namespace strata::apps
