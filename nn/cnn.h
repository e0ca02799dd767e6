// CNN classifier for 28x28 images: per entry of `channels` one block
// conv3x3(pad 1) -> [BatchNorm] -> ReLU -> maxpool2, then flatten -> Linear(hidden) ->
// ReLU -> dropout -> Linear(classes).
#pragma once
#include <vector>

#include <strata/nn/container.h>

namespace strata::nn {

struct CNNConfig {
  int64_t in_channels = 1;
  std::vector<int64_t> channels = {32, 64};
  int64_t classes = 10;
  bool batch_norm = true;
  double dropout = 0.0;
  int64_t image_size = 28;  // H == W of the input
  int64_t hidden = 128;
};

/// Children "features" (Sequential of the conv blocks) and "classifier" (Sequential:
/// Flatten, Linear, ReLU, [Dropout], Linear). Convs have no bias when followed by BatchNorm.
class CNN : public Module {
 public:
  CNN(const CNNConfig& cfg, Generator& gen);
  /// x (B, in_channels, S, S) -> logits (B, classes)
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "CNN"; }
  const CNNConfig& config() const { return cfg_; }
  /// Spatial size after the conv blocks (S / 2^blocks).
  int64_t feature_size() const;

 private:
  CNNConfig cfg_;
};

}  // namespace strata::nn
