// Parameter-free activation layers, so models can list them inside a Sequential.
#pragma once
#include <strata/nn/module.h>

namespace strata::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string type_name() const override { return "ReLU"; }
};

/// Exact (erf) GELU, or GPT-2's tanh approximation when tanh_approx.
class GELU : public Module {
 public:
  explicit GELU(bool tanh_approx = false) : tanh_approx_(tanh_approx) {}
  Tensor forward(const Tensor& x) override { return gelu(x, tanh_approx_); }
  std::string type_name() const override { return "GELU"; }
  bool tanh_approx() const { return tanh_approx_; }

 private:
  bool tanh_approx_;
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
  std::string type_name() const override { return "Tanh"; }
};

/// Flattens dims [start_dim, end_dim] into one (default: all but the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override { return flatten(x, start_, end_); }
  std::string type_name() const override { return "Flatten"; }

 private:
  int64_t start_, end_;
};

/// "relu" | "gelu" | "gelu_tanh" | "tanh" -> a new activation module; throws ConfigError otherwise.
std::shared_ptr<Module> make_activation(const std::string& name);

}  // namespace strata::nn
