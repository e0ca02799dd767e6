// model.type mlp: the config's model keys and the data's sample shape as an
// nn::MLPConfig, and the MLP's plans and description from nn/ (registered in
// model_family.cpp).
#include "apps/factory.h"
#include "apps/model_family.h"
#include <strata/autograd/functions.h>
#include <strata/nn/mlp.h>
#include <strata/nn/mlp_plans.h>
#include <strata/nn/mlp_spec.h>

namespace strata::apps {
namespace {

nn::MLPConfig mlp_config(const TrainConfig& cfg) {
  const auto& m = cfg.model;
  nn::MLPConfig c;
  c.input = shape_numel(input_shape(cfg));
  c.classes = num_classes(cfg);
  c.hidden = m.hidden;
  c.dropout = m.dropout;
  c.activation = m.activation;
  return c;
}

}  // namespace

ModelFamily mlp_family() {
  return {.type = "mlp",
          .build = [](const TrainConfig& cfg, Generator& gen) -> std::shared_ptr<nn::Module> {
            return std::make_shared<nn::MLP>(mlp_config(cfg), gen);
          },
          .spec = [](const TrainConfig& cfg) { return nn::mlp_spec(mlp_config(cfg)); },
          .limits = [](const TrainConfig&) { return nn::ModelLimits{}; },
          .tp_plan = [](const TrainConfig& cfg, bool) { return nn::mlp_tp_plan(mlp_config(cfg)); },
          .pp_plan =
              [](const nn::Module& model, const std::vector<int64_t>& layers, int64_t, int64_t) {
                return nn::mlp_pp_plan(family_module<const nn::MLP>(model, "mlp"), layers);
              },
          .loss = [](nn::Module& model, const data::Batch& b) { return cross_entropy(model.forward(b.input), b.target); },
          .sequences = {}};
}

}  // namespace strata::apps
