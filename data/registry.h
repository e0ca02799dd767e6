// Datasets by name: a program that embeds strata registers its own Dataset under a
// name and selects it with `data.dataset: <name>` in the same YAML config the CLI's
// trainer reads (apps/factory.cpp consults this registry after its built-in datasets).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <strata/core/config.h>
#include <strata/data/dataset.h>

namespace strata::data {

/// What a registered dataset gets from the config's `data` section.
struct DatasetRequest {
  std::string name{};        // data.dataset
  std::string path{};        // data.path ("" when absent)
  uint64_t seed = 0;         // data.seed
  int64_t block_size = 0;    // model.block_size for a GPT, else 0
  /// data.options: the dataset's own keys (an empty mapping when absent). Read them with
  /// get/require; a key the factory does not read is an "unknown key" error afterwards,
  /// as everywhere else in the config.
  ConfigNode options;
};

/// The splits a factory returns. train is required. val may be null: the trainer then
/// carves data.val_fraction of train (seeded by data.seed). test may be null; when set,
/// it is evaluated once after training, separately from val.
/// Classifiers: input f32 (B, *data.sample_shape), target i64 (B) in [0, data.num_classes).
/// GPT: input and target i64 (B, model.block_size) token ids < model.vocab_size.
struct DatasetSplits {
  std::shared_ptr<const Dataset> train{};
  std::shared_ptr<const Dataset> val{};
  std::shared_ptr<const Dataset> test{};
};

using DatasetFactory = std::function<DatasetSplits(const DatasetRequest&)>;

/// Names the built-in datasets take; register_dataset refuses them.
const std::vector<std::string>& builtin_dataset_names();
/// True when `name` is one of builtin_dataset_names().
bool is_builtin_dataset(const std::string& name);

/// Registers `factory` under `name` (letters, digits, '_', '-', '.'). Throws
/// strata::Error when the name is empty, malformed, a built-in dataset's, or already
/// registered. Thread-safe; usually called once at the start of main().
void register_dataset(const std::string& name, DatasetFactory factory);

/// The factory registered under `name`, or nullptr. Thread-safe.
const DatasetFactory* find_dataset(const std::string& name);

/// Registered names in sorted order (built-ins not included). Thread-safe.
std::vector<std::string> registered_datasets();

}  // namespace strata::data
