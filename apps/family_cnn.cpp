// model.type cnn: the config's model keys and the data's image shape as an
// nn::CNNConfig, and the CNN's description from nn/; it has no parallel plans
// (registered in model_family.cpp).
#include "apps/factory.h"
#include "apps/model_family.h"
#include <strata/autograd/functions.h>
#include <strata/core/config.h>
#include <strata/nn/cnn.h>
#include <strata/nn/cnn_spec.h>

namespace strata::apps {
namespace {

// ConfigError naming model.type unless the samples are square images [C, S, S] whose side
// the blocks' poolings halve evenly.
nn::CNNConfig cnn_config(const TrainConfig& cfg) {
  const auto& m = cfg.model;
  const Shape in = input_shape(cfg);
  const int64_t blocks = int64_t(m.channels.size());
  if (in.size() != 3 || in[1] != in[2] || in[1] % (int64_t(1) << blocks) != 0)
    config_fail("model.type", "cnn needs square images [C, H, W] (or [H, W]) whose side is divisible by 2^" +
                                  std::to_string(blocks) + " (model.channels has " + std::to_string(blocks) +
                                  " blocks); the data's samples have shape " + shape_str(in));
  nn::CNNConfig c;
  c.in_channels = in[0];
  c.image_size = in[1];
  c.classes = num_classes(cfg);
  c.channels = m.channels;
  c.batch_norm = m.batch_norm;
  c.dropout = m.dropout;
  c.hidden = m.fc_hidden;
  return c;
}

}  // namespace

ModelFamily cnn_family() {
  return {.type = "cnn",
          .build = [](const TrainConfig& cfg, Generator& gen) -> std::shared_ptr<nn::Module> {
            return std::make_shared<nn::CNN>(cnn_config(cfg), gen);
          },
          .spec = [](const TrainConfig& cfg) { return nn::cnn_spec(cnn_config(cfg)); },
          .limits = [](const TrainConfig&) { return nn::ModelLimits{}; },
          .tp_plan = [](const TrainConfig&, bool) { return nn::TpPlan{}; },
          .pp_plan = [](const nn::Module&, const std::vector<int64_t>&, int64_t, int64_t) { return nn::PipelinePlan{}; },
          .loss = [](nn::Module& model, const data::Batch& b) { return cross_entropy(model.forward(b.input), b.target); },
          .sequences = {}};
}

}  // namespace strata::apps
