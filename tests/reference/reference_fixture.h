// A PyTorch reference fixture (tools/make_reference.py, make_llama_reference.py): a small
// model's f32 weights, one batch, and the loss and every parameter gradient PyTorch
// computed in f64 from those weights; and the check that a strata model matches it.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include <strata/autograd/engine.h>
#include <strata/nn/module.h>
#include <strata/tensor/safetensors.h>

namespace strata::testing {

struct ReferenceFixture {
  NamedTensors params;                  // the model's weights, by parameter name
  std::map<std::string, Tensor> rest;   // input.*, output.loss, grad.<parameter>
  SafetensorsMetadata meta;             // the model's shape
};

inline ReferenceFixture load_reference_fixture(const std::string& file) {
  ReferenceFixture f;
  for (auto& [name, t] : load_safetensors(file, &f.meta)) {
    // "output.loss" exactly: the Llama's untied head is the parameter "output.weight".
    if (name.rfind("grad.", 0) == 0 || name.rfind("input.", 0) == 0 || name == "output.loss")
      f.rest[name] = t;
    else
      f.params.emplace_back(name, t);
  }
  return f;
}

// Elements failing allclose(rtol, atol = 1e-6 * max|b|): f32 rounding in a sum is
// proportional to the tensor's scale, not to an element that cancels to ~0.
inline int64_t count_mismatches(const Tensor& a, const Tensor& b, double rtol, double* worst) {
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  double scale = 0;
  for (double x : bv) scale = std::max(scale, std::abs(x));
  int64_t bad = 0;
  *worst = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    const double err = std::abs(av[i] - bv[i]);
    *worst = std::max(*worst, err / (std::abs(bv[i]) + 1e-6 * scale));
    if (err > 1e-6 * scale + rtol * std::abs(bv[i])) ++bad;
  }
  return bad;
}

// `loss` (computed by `model` on the fixture's batch) equals PyTorch's, and after its
// backward every parameter's gradient does, at rtol 1e-4.
inline void expect_loss_and_grads_match(nn::Module& model, const Tensor& loss, const ReferenceFixture& f) {
  const double ref = f.rest.at("output.loss").item<double>();
  EXPECT_NEAR(loss.item<double>(), ref, 1e-4 * std::abs(ref));
  backward(loss);
  int checked = 0;
  for (auto& [name, p] : model.named_parameters()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.rest.count("grad." + name)) << "fixture has no gradient for " << name;
    ASSERT_TRUE(p.grad().defined());
    double worst = 0;
    EXPECT_EQ(count_mismatches(p.grad(), f.rest.at("grad." + name), 1e-4, &worst), 0) << "worst " << worst;
    ++checked;
  }
  EXPECT_EQ(checked, int(f.params.size()));
}

}  // namespace strata::testing
