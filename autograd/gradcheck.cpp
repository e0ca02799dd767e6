#include <strata/autograd/gradcheck.h>

#include <cmath>

#include <strata/autograd/engine.h>
#include <strata/autograd/grad_mode.h>
#include <strata/tensor/ops.h>

namespace strata {
namespace {
// <w, out> as a double, where w is a fixed random projection.
double project(const Tensor& out, const Tensor& w) {
  const auto o = out.to_vector<double>();
  const auto wv = w.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < o.size(); ++i) s += o[i] * wv[i];
  return s;
}
}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, double eps, double atol, double rtol) {
  GradcheckResult res;
  std::vector<Tensor> xs;
  for (const auto& in : inputs) {
    Tensor c = in.is_contiguous() && in.is_leaf() ? ops::clone(in) : ops::contiguous(in.detach());
    if (in.requires_grad()) {
      STRATA_CHECK(in.dtype() == DType::f64, "[gradcheck] inputs must be f64, got ", in.str());
      c.set_requires_grad(true);
    }
    xs.push_back(c);
  }
  Tensor out = fn(xs);
  Generator gen(1234);
  Tensor w = ops::normal(out.shape(), 0, 1, gen, out.dtype());
  // analytic: backward of <w, out>
  backward(out, w);
  NoGradGuard ng;
  for (size_t k = 0; k < xs.size(); ++k) {
    if (!xs[k].requires_grad()) continue;
    Tensor g = xs[k].grad();
    std::vector<double> ga = g.defined() ? g.to_vector<double>() : std::vector<double>(size_t(xs[k].numel()), 0.0);
    double* p = xs[k].data<double>();
    for (int64_t i = 0; i < xs[k].numel(); ++i) {
      const double orig = p[i];
      p[i] = orig + eps;
      const double fp = project(fn(xs), w);
      p[i] = orig - eps;
      const double fm = project(fn(xs), w);
      p[i] = orig;
      const double num = (fp - fm) / (2 * eps);
      const double err = std::abs(ga[size_t(i)] - num);
      res.max_abs_err = std::max(res.max_abs_err, err);
      if (err > atol + rtol * std::abs(num) && res.ok) {
        res.ok = false;
        res.message = detail::str_cat("input ", k, " element ", i, ": analytic ", ga[size_t(i)], " vs numeric ",
                                      num);
      }
    }
  }
  return res;
}

}  // namespace strata
