// The model families the CLI builds, keyed by model.type. An entry maps the config's
// model keys onto its family's own config (nn::GPTConfig, nn::MLPConfig, ...) and hands
// over what the family brings in nn/: the module, its parallel plans, its limits, its
// sequence splits, its loss and the description the planner reads. The rest of apps/ and
// bench/ reach a model's plans and shapes only through here, never by its type.
//
// Adding a family: its module, plans and description in nn/ (as nn/gpt.h, gpt_plans.h,
// gpt_spec.h), one file apps/family_<type>.cpp defining `ModelFamily <type>_family()`, and
// its line in the list of model_family.cpp. parallel/ and the rest of apps/ do not change
// (config.cpp's model keys aside).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "apps/config.h"
#include <strata/core/error.h>
#include <strata/core/rng.h>
#include <strata/data/dataset.h>
#include <strata/nn/model_spec.h>
#include <strata/nn/module.h>
#include <strata/nn/parallel_plan.h>

namespace strata::apps {

/// One family. Every function is set (a family without a TP plan or pipeline split
/// returns an empty one).
struct ModelFamily {
  std::string type;  ///< model.type
  /// The model of `cfg` (dimensions from the config and the data's shapes), weights drawn from `gen`.
  std::function<std::shared_ptr<nn::Module>(const TrainConfig& cfg, Generator& gen)> build;
  /// Its description for the planner, from the config alone (nothing is allocated).
  std::function<nn::ModelSpec(const TrainConfig& cfg)> spec;
  /// What parallel.tp, pp and cp must respect.
  std::function<nn::ModelLimits(const TrainConfig& cfg)> limits;
  /// Its tensor-parallel plan (with sequence parallelism when asked and supported).
  std::function<nn::TpPlan(const TrainConfig& cfg, bool sequence_parallel)> tp_plan;
  /// Its pipeline split of `model` (built by `build`; the plan may refer to it, so it must
  /// outlive the plan). `layers`: parallel.pp_layers; `seq_shards`: parallel.tp under
  /// sequence parallelism, else 1; `cp`: parallel.cp.
  std::function<nn::PipelinePlan(const nn::Module& model, const std::vector<int64_t>& layers, int64_t seq_shards,
                                 int64_t cp)>
      pp_plan;
  /// The mean training loss of one batch: scalar f32, with a graph when grad mode is on.
  std::function<Tensor(nn::Module& model, const data::Batch& batch)> loss;
  nn::SequenceSplits sequences;  ///< sequence and context parallelism
};

/// The family of model.type `type`. ConfigError naming model.type when there is none.
const ModelFamily& model_family(const std::string& type);
/// The family of cfg.model.type.
const ModelFamily& model_family(const TrainConfig& cfg);

/// `model` as family `type`'s module M (for the family's own entry); Error naming both when
/// it is another module.
template <class M, class Base>
M& family_module(Base& model, const char* type) {
  auto* m = dynamic_cast<M*>(&model);
  STRATA_CHECK(m != nullptr, "[model ", type, "] expected the ", type, " family's module, got a ", model.type_name());
  return *m;
}

}  // namespace strata::apps
