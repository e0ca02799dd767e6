// The TrainConfig schema over fuzz inputs: every section's typed reads, range checks and
// validate(). Run on the committed corpus by corpus_test.cpp; the libFuzzer binary uses
// config() instead, which needs core only.
#include <string>

#include "apps/config.h"
#include "fuzz_targets.h"

namespace strata::fuzz {

int train_config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)apps::TrainConfig::from_node(ConfigNode::load_string(text, {}, "fuzz.yaml"));
  } catch (const ConfigError&) {
  }
  return 0;
}

}  // namespace strata::fuzz
