// Builds what a TrainConfig describes: datasets (train + eval split), the model (through
// its family, model_family.h), the optimizer and the LR schedule. Shared by train, eval,
// sample and bench.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "apps/config.h"
#include <strata/core/rng.h>
#include <strata/data/dataset.h>
#include <strata/data/tokenizer.h>
#include <strata/nn/module.h>
#include <strata/optim/lr_schedule.h>
#include <strata/optim/optimizer.h>

namespace strata::apps {

/// The train and eval datasets of a config plus what the trainer reports about them.
struct DataBundle {
  std::shared_ptr<const data::Dataset> train;
  std::shared_ptr<const data::Dataset> eval;
  std::string eval_split;          // "test" or "val"
  /// Set when eval is a val split and a test split exists as well: evaluated once after
  /// training (the trainer's final test evaluation), never during it.
  std::shared_ptr<const data::Dataset> test;
  bool tokens = false;             // GPT data: report loss, not accuracy
  int64_t tokens_per_sample = 1;   // T for token windows (throughput in tokens/s)
  /// Text only: cross-entropy (nats/token) of the eval split under the train split's
  /// bigram / unigram byte models, the baselines a char model must beat.
  std::optional<double> bigram_entropy;
  std::optional<double> unigram_entropy;
};

/// Loads/generates the datasets (DataError naming the file on a bad dataset path).
DataBundle build_data(const TrainConfig& cfg);

/// data.tokenizer loaded once per process (null when unset). DataError naming the file
/// when it is not a tokenizer strata can run.
std::shared_ptr<const data::Tokenizer> config_tokenizer(const TrainConfig& cfg);

/// The model for `cfg`, built by its family (model_family.h; dimensions come from the
/// config alone: fashion 784/10, text vocab 256, synthetic from its keys). Weights are
/// drawn from `gen`.
std::shared_ptr<nn::Module> build_model(const TrainConfig& cfg, Generator& gen);

/// The GPT's vocabulary: model.vocab_size when set, else 256 bytes for text and
/// data.vocab_size for synthetic tokens.
int64_t gpt_vocab(const TrainConfig& cfg);

/// One classifier input's shape: (1,28,28) for fashion_mnist, read from the images
/// file's header for idx/npy (DataError naming the file), data.sample_shape otherwise.
Shape input_shape(const TrainConfig& cfg);
/// The classifier's number of classes (10 for fashion_mnist, data.num_classes otherwise).
int64_t num_classes(const TrainConfig& cfg);

/// The optimizer over model.named_parameters().
std::unique_ptr<optim::Optimizer> build_optimizer(const TrainConfig& cfg, const nn::Module& model);
/// The optimizer of `cfg` over given tensors (ZeRO: this rank's parameter slices).
std::unique_ptr<optim::Optimizer> build_optimizer(const TrainConfig& cfg, optim::NamedTensors params);

/// The LR schedule over `total_steps` optimizer steps.
optim::LrSchedule build_schedule(const TrainConfig& cfg, int64_t total_steps);

/// Mean training loss of one batch, as the model's family computes it: cross-entropy of
/// logits (classifiers) or the GPT's next-token loss. `model` may be a wrapper whose
/// forward runs the family's module on the whole batch (thread replicas): the loss is then
/// taken on its output. Scalar f32 with a graph when grad mode is on.
Tensor batch_loss(nn::Module& model, const TrainConfig& cfg, const data::Batch& batch);

}  // namespace strata::apps
