// Differentiable reductions. sum/mean broadcast the gradient back as an expand
// view (no copy); amax sends it to the first argmax with scatter_add.
#include <strata/autograd/functions.h>
#include <strata/autograd/lambda_node.h>

namespace strata {
namespace {

// Input shape with the reduced dims set to 1 (what keepdim=true returns), and the count.
std::pair<Shape, int64_t> keep_shape(const Tensor& t, const std::vector<int64_t>& dims) {
  Shape s = t.shape();
  int64_t count = 1;
  if (dims.empty()) {
    for (auto& d : s) {
      count *= d;
      d = 1;
    }
    return {s, count};
  }
  for (int64_t d : dims) {
    const int64_t w = d < 0 ? d + t.dim() : d;
    if (w < 0 || w >= t.dim()) continue;  // the raw op already rejected it
    count *= s[size_t(w)];
    s[size_t(w)] = 1;
  }
  return {s, count};
}

Tensor reduce_fn(const char* name, Tensor out, const Tensor& t, const std::vector<int64_t>& dims, bool mean) {
  if (!any_requires_grad(t)) return out;
  auto [ks, count] = keep_shape(t, dims);
  const Shape in = t.shape();
  const double scale = mean ? 1.0 / double(std::max<int64_t>(count, 1)) : 1.0;
  return record_fn(name, out, {t}, [in, ks, scale](const Tensor& g) {
    Tensor gk = ops::reshape(g, ks);
    if (scale != 1.0) gk = ops::binary_scalar(ops::BinaryOp::mul, gk, scale);
    return std::vector{ops::expand(gk, in)};
  });
}

}  // namespace

Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_fn("SumBackward", ops::sum(t, dims, keepdim), t, dims, false);
}

Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_fn("MeanBackward", ops::mean(t, dims, keepdim), t, dims, true);
}

Tensor amax(const Tensor& t, int64_t dim, bool keepdim) {
  Tensor out = ops::amax(t, dim, keepdim);
  if (!any_requires_grad(t) || t.dim() == 0) {
    if (t.dim() == 0) return record_fn("AmaxBackward", out, {t}, [](const Tensor& g) { return std::vector{g}; });
    return out;
  }
  const int64_t d = dim < 0 ? dim + t.dim() : dim;
  const Tensor idx = ops::argmax(t, d, /*keepdim=*/true);
  const Shape in = t.shape();
  return record_fn("AmaxBackward", out, {t}, [=](const Tensor& g) {
    return std::vector{ops::scatter_add(in, d, idx, keepdim ? g : ops::unsqueeze(g, d))};
  });
}

}  // namespace strata
