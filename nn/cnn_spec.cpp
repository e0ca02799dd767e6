// The CNN's planner description (see cnn_spec.h).
#include <strata/nn/cnn_spec.h>

#include <string>

namespace strata::nn {

ModelSpec cnn_spec(const CNNConfig& cfg) {
  // features = [Conv2d 3x3 (bias without BN), BatchNorm2d?, ReLU, MaxPool2d] per channel
  // count; classifier = Sequential(Flatten, Linear, ReLU, Dropout?, Linear).
  std::vector<ParamSpec> ps;
  const auto add = [&ps](const std::string& name, Shape shape) { ps.push_back({.name = name, .shape = std::move(shape)}); };
  int64_t c = cfg.in_channels, side = cfg.image_size, i = 0;
  for (int64_t ch : cfg.channels) {
    const std::string conv = "features." + std::to_string(i++);
    add(conv + ".weight", {ch, c, 3, 3});
    if (cfg.batch_norm) {  // Conv2d has no bias under BatchNorm
      const std::string bn = "features." + std::to_string(i++);
      add(bn + ".weight", {ch});
      add(bn + ".bias", {ch});
    } else {
      add(conv + ".bias", {ch});
    }
    i += 2;  // ReLU, MaxPool2d
    c = ch;
    side /= 2;
  }
  add("classifier.1.weight", {cfg.hidden, c * side * side});
  add("classifier.1.bias", {cfg.hidden});
  const std::string out = cfg.dropout > 0 ? "classifier.4" : "classifier.3";
  add(out + ".weight", {cfg.classes, cfg.hidden});
  add(out + ".bias", {cfg.classes});

  ModelSpec s = ModelSpec::from_params(std::move(ps));
  double forward = 0;
  int64_t spatial = cfg.image_size;
  for (const ParamSpec& p : s.params) {
    if (p.shape.size() == 2) {
      forward += 2.0 * double(p.numel());  // Linear: 2·in·out
    } else if (p.shape.size() == 4) {
      forward += 2.0 * double(p.numel()) * double(spatial * spatial);  // conv at this block's resolution
      spatial /= 2;                                                    // then pooled
    }
  }
  s.flops_per_sample = 3.0 * forward;
  int64_t per_sample = cfg.in_channels * cfg.image_size * cfg.image_size;
  side = cfg.image_size;
  for (const ParamSpec& p : s.params)
    if (p.shape.size() == 4) {  // per block conv, BN, ReLU outputs and the pooled one (an upper
                                // bound: on the CPU BN + ReLU + pool keep the conv's and the pooled)
      per_sample += p.shape[0] * side * side * (cfg.batch_norm ? 3 : 2) + p.shape[0] * side * side / 4;
      side /= 2;
    } else if (p.shape.size() == 2) {  // per Linear its output and its activation's
      per_sample += 2 * p.shape[0];
    }
  s.activation_bytes = [per_sample](const RankActivationQuery& q) { return q.batch * per_sample * 4; };
  return s;
}

}  // namespace strata::nn
