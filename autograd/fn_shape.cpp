// Differentiable views and joins. A view's backward maps the gradient back to the
// input's shape: inverse permutation, reshape, or a zero tensor with the gradient
// written into the same view.
#include <numeric>

#include <strata/autograd/functions.h>
#include <strata/autograd/lambda_node.h>

namespace strata {
namespace {

// Gradient of a sub-view: zeros of the input shape with g copied into view(zeros).
template <class ViewFn>
Tensor scatter_into_view(const Tensor& g, const Shape& in_shape, DType dt, ViewFn&& make_view) {
  Tensor z = ops::zeros(in_shape, dt, g.device());
  Tensor v = make_view(z);
  ops::copy_(v, g);
  return z;
}

Tensor reshape_back(const char* name, Tensor out, const Tensor& t) {
  const Shape in = t.shape();
  return record_fn(name, std::move(out), {t}, [in](const Tensor& g) { return std::vector{ops::reshape(g, in)}; });
}

}  // namespace

Tensor view(const Tensor& t, Shape shape) { return reshape_back("ViewBackward", ops::view(t, std::move(shape)), t); }
Tensor reshape(const Tensor& t, Shape shape) {
  return reshape_back("ReshapeBackward", ops::reshape(t, std::move(shape)), t);
}
Tensor flatten(const Tensor& t, int64_t s, int64_t e) { return reshape_back("FlattenBackward", ops::flatten(t, s, e), t); }
Tensor squeeze(const Tensor& t, int64_t d) { return reshape_back("SqueezeBackward", ops::squeeze(t, d), t); }
Tensor unsqueeze(const Tensor& t, int64_t d) { return reshape_back("UnsqueezeBackward", ops::unsqueeze(t, d), t); }

Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  return record_fn("ContiguousBackward", ops::contiguous(t), {t}, [](const Tensor& g) { return std::vector{g}; });
}

Tensor transpose(const Tensor& t, int64_t d0, int64_t d1) {
  return record_fn("TransposeBackward", ops::transpose(t, d0, d1), {t},
                   [d0, d1](const Tensor& g) { return std::vector{ops::transpose(g, d0, d1)}; });
}

Tensor permute(const Tensor& t, const std::vector<int64_t>& dims) {
  std::vector<int64_t> inv(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inv[size_t(dims[i] < 0 ? dims[i] + t.dim() : dims[i])] = int64_t(i);
  return record_fn("PermuteBackward", ops::permute(t, dims), {t},
                   [inv](const Tensor& g) { return std::vector{ops::permute(g, inv)}; });
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  const Shape in = t.shape();
  const DType dt = t.dtype();
  return record_fn("NarrowBackward", ops::narrow(t, dim, start, length), {t}, [=](const Tensor& g) {
    return std::vector{scatter_into_view(g, in, dt, [&](const Tensor& z) { return ops::narrow(z, dim, start, length); })};
  });
}

Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  const Shape in = t.shape();
  const DType dt = t.dtype();
  return record_fn("SliceBackward", ops::slice(t, dim, start, end, step), {t}, [=](const Tensor& g) {
    return std::vector{
        scatter_into_view(g, in, dt, [&](const Tensor& z) { return ops::slice(z, dim, start, end, step); })};
  });
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  const Shape in = t.shape();
  const DType dt = t.dtype();
  return record_fn("SelectBackward", ops::select(t, dim, index), {t}, [=](const Tensor& g) {
    return std::vector{scatter_into_view(g, in, dt, [&](const Tensor& z) { return ops::select(z, dim, index); })};
  });
}

Tensor expand(const Tensor& t, const Shape& shape) {
  const Shape in = t.shape();
  return record_fn("ExpandBackward", ops::expand(t, shape), {t},
                   [in](const Tensor& g) { return std::vector{ops::sum_to_shape(g, in)}; });
}

std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim) {
  std::vector<Tensor> out;
  int64_t start = 0;
  for (auto s : sizes) {
    out.push_back(narrow(t, dim, start, s));
    start += s;
  }
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  STRATA_CHECK(total == t.size(dim), "[split] sizes sum to ", total, " but dim has size ", t.size(dim));
  return out;
}

std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim) {
  std::vector<int64_t> sizes;
  for (const auto& p : ops::chunk(t, chunks, dim)) sizes.push_back(p.size(dim));
  return split(t, sizes, dim);
}

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  STRATA_CHECK(!ts.empty(), "[cat] needs at least one tensor");
  const int64_t d = dim < 0 ? dim + ts[0].dim() : dim;
  std::vector<int64_t> sizes;
  for (const auto& t : ts) sizes.push_back(t.size(d));
  return record_fn("CatBackward", ops::cat(ts, d), ts, [sizes, d](const Tensor& g) {
    return ops::split(g, sizes, d);
  });
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  std::vector<Tensor> us;
  for (const auto& t : ts) us.push_back(unsqueeze(t, dim < 0 ? dim + t.dim() + 1 : dim));
  return cat(us, dim < 0 ? dim + ts.at(0).dim() + 1 : dim);
}

Tensor index_select(const Tensor& t, int64_t dim, const Tensor& idx) {
  const Shape in = t.shape();
  const int64_t d = dim < 0 ? dim + t.dim() : dim;
  return record_fn("IndexSelectBackward", ops::index_select(t, d, idx), {t},
                   [in, d, idx](const Tensor& g) { return std::vector{ops::index_add(in, d, idx, g)}; });
}

Tensor gather(const Tensor& t, int64_t dim, const Tensor& idx) {
  const Shape in = t.shape();
  const int64_t d = dim < 0 ? dim + t.dim() : dim;
  return record_fn("GatherBackward", ops::gather(t, d, idx), {t},
                   [in, d, idx](const Tensor& g) { return std::vector{ops::scatter_add(in, d, idx, g)}; });
}

}  // namespace strata
