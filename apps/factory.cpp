// Config -> datasets, model, optimizer, schedule, loss.
#include "apps/factory.h"

#include <strata/data/fashion_mnist.h>
#include <strata/data/synthetic.h>
#include <strata/data/text_dataset.h>
#include <strata/nn/cnn.h>
#include <strata/nn/gpt.h>
#include <strata/nn/mlp.h>
#include <strata/optim/adam.h>
#include <strata/optim/sgd.h>

namespace strata::apps {
namespace {

/// Samples [offset, offset + count) of another dataset (a held-out tail).
class SubsetDataset : public data::Dataset {
 public:
  SubsetDataset(std::shared_ptr<const data::Dataset> base, int64_t offset, int64_t count)
      : base_(std::move(base)), offset_(offset), count_(count) {}
  int64_t size() const override { return count_; }
  data::Batch get_batch(const std::vector<int64_t>& indices) const override {
    data::detail::check_indices("SubsetDataset", indices, count_);
    std::vector<int64_t> shifted(indices.size());
    for (size_t i = 0; i < indices.size(); ++i) shifted[i] = indices[i] + offset_;
    return base_->get_batch(shifted);
  }

 private:
  std::shared_ptr<const data::Dataset> base_;
  int64_t offset_, count_;
};

}  // namespace

int64_t gpt_vocab(const TrainConfig& cfg) {
  return cfg.data.dataset == "text" ? data::TextDataset::kVocabSize : cfg.data.vocab_size;
}

DataBundle build_data(const TrainConfig& cfg) {
  const auto& d = cfg.data;
  DataBundle b;
  if (d.dataset == "fashion_mnist") {
    const std::string dir = d.path.empty() ? std::string(data::kFashionMnistDir) : d.path;
    b.train = std::make_shared<data::FashionMnist>(data::Split::train, dir);
    b.eval = std::make_shared<data::FashionMnist>(data::Split::test, dir);
    b.eval_split = "test";
    return b;
  }
  b.eval_split = "val";
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
  b.train = std::make_shared<SubsetDataset>(all, 0, d.size - n_val);
  b.eval = std::make_shared<SubsetDataset>(all, d.size - n_val, n_val);
  return b;
}

std::shared_ptr<nn::Module> build_model(const TrainConfig& cfg, Generator& gen) {
  const auto& m = cfg.model;
  const bool fashion = cfg.data.dataset == "fashion_mnist";
  if (m.type == "mlp") {
    nn::MLPConfig c;
    if (fashion) {
      c.input = 28 * 28;
      c.classes = 10;
    } else {
      c.input = shape_numel(cfg.data.sample_shape);
      c.classes = cfg.data.num_classes;
    }
    c.hidden = m.hidden;
    c.dropout = m.dropout;
    c.activation = m.activation;
    return std::make_shared<nn::MLP>(c, gen);
  }
  if (m.type == "cnn") {
    nn::CNNConfig c;
    if (fashion) {
      c.in_channels = 1;
      c.image_size = 28;
      c.classes = 10;
    } else {
      c.in_channels = cfg.data.sample_shape[0];
      c.image_size = cfg.data.sample_shape[1];
      c.classes = cfg.data.num_classes;
    }
    c.channels = m.channels;
    c.batch_norm = m.batch_norm;
    c.dropout = m.dropout;
    c.hidden = m.fc_hidden;
    return std::make_shared<nn::CNN>(c, gen);
  }
  nn::GPTConfig c;
  c.vocab = gpt_vocab(cfg);
  c.block_size = m.block_size;
  c.n_layer = m.n_layer;
  c.n_head = m.n_head;
  c.n_embd = m.n_embd;
  c.dropout = m.dropout;
  c.bias = m.bias;
  c.tie_weights = m.tie_weights;
  c.checkpoint = m.checkpoint_activations;
  return std::make_shared<nn::GPT>(c, gen);
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
  if (cfg.model.type == "gpt") return static_cast<nn::GPT&>(model).loss(batch.input, batch.target);
  return cross_entropy(model.forward(batch.input), batch.target);
}

}  // namespace strata::apps
