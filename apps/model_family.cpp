// The registry of model families (see model_family.h).
#include "apps/model_family.h"

#include <strata/core/config.h>

namespace strata::apps {

// One per family, each defined in apps/family_<type>.cpp.
ModelFamily mlp_family();
ModelFamily cnn_family();
ModelFamily gpt_family();
ModelFamily llama_family();

namespace {

const std::vector<ModelFamily>& families() {
  static const std::vector<ModelFamily> all = {mlp_family(), cnn_family(), gpt_family(), llama_family()};
  return all;
}

}  // namespace

const ModelFamily& model_family(const std::string& type) {
  std::string known;
  for (const ModelFamily& f : families()) {
    if (f.type == type) return f;
    known += (known.empty() ? "" : ", ") + f.type;
  }
  config_fail("model.type", "'" + type + "' is not a model family of this program (" + known + ")");
}

const ModelFamily& model_family(const TrainConfig& cfg) { return model_family(cfg.model.type); }

}  // namespace strata::apps
