// Finite-difference gradient check in f64: compares backward() against central
// differences of a random projection of the output.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <strata/tensor/tensor.h>

namespace strata {

struct GradcheckResult {
  bool ok = true;
  double max_abs_err = 0;
  std::string message;  // first mismatch: input, element, analytic vs numeric
};

/// `inputs` must be f64; those with requires_grad are checked. fn must be
/// deterministic. Passes when |analytic - numeric| <= atol + rtol * |numeric|.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, double eps = 1e-6, double atol = 1e-6,
                          double rtol = 1e-4);

}  // namespace strata
