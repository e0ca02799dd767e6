// View ops: new shape/strides/offset over the same Storage, never a copy
// (except reshape, which copies only when no view exists).
#include <algorithm>
#include <numeric>

#include <strata/tensor/ops.h>

namespace strata::ops {
namespace {

int64_t wrap_dim(int64_t d, int64_t ndim, const char* op) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  if (d < 0) d += n;
  STRATA_CHECK(d >= 0 && d < n, "[", op, "] dim ", d, " out of range for a ", ndim, "-d tensor");
  return d;
}

Tensor as_view(const Tensor& t, Shape shape, Shape strides, int64_t offset) {
  return Tensor::make_view(t.storage(), std::move(shape), std::move(strides), offset, t.dtype());
}

Shape infer_shape(const Tensor& t, Shape shape, const char* op) {
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      STRATA_CHECK(infer < 0, "[", op, "] only one dimension can be -1: ", shape_str(shape));
      infer = int64_t(i);
    } else {
      STRATA_CHECK(shape[i] >= 0, "[", op, "] invalid size in ", shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    STRATA_CHECK(known != 0 && t.numel() % known == 0, "[", op, "] cannot view ", shape_str(t.shape()), " as ",
                 shape_str(shape));
    shape[infer] = t.numel() / known;
  }
  STRATA_CHECK(shape_numel(shape) == t.numel(), "[", op, "] shape ", shape_str(shape), " has ",
               shape_numel(shape), " elements but the tensor ", shape_str(t.shape()), " has ", t.numel());
  return shape;
}

// Strides for viewing t as `shape` without a copy, if they exist (PyTorch's computeStride).
std::optional<Shape> view_strides(const Tensor& t, const Shape& shape) {
  if (t.numel() == 0 || t.is_contiguous()) return contiguous_strides(shape);
  const Shape& os = t.shape();
  const Shape& ost = t.strides();
  Shape st(shape.size());
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk_base_stride = ost.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t td = int64_t(os.size()) - 1; td >= 0; --td) {
    tensor_numel *= os[td];
    if (td == 0 || (os[td - 1] != 1 && ost[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        st[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_base_stride = ost[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return st;
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    STRATA_CHECK(da == db || da == 1 || db == 1, "[broadcast] shapes ", shape_str(a), " and ", shape_str(b),
                 " are not broadcastable");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor view(const Tensor& t, Shape shape) {
  shape = infer_shape(t, std::move(shape), "view");
  auto st = view_strides(t, shape);
  STRATA_CHECK(st.has_value(), "[view] cannot view ", shape_str(t.shape()), " with strides ",
               shape_str(t.strides()), " as ", shape_str(shape), "; use reshape (copies) instead");
  return as_view(t, std::move(shape), std::move(*st), t.offset());
}

Tensor reshape(const Tensor& t, Shape shape) {
  shape = infer_shape(t, std::move(shape), "reshape");
  if (auto st = view_strides(t, shape)) return as_view(t, std::move(shape), std::move(*st), t.offset());
  Tensor c = clone(t);
  return as_view(c, shape, contiguous_strides(shape), 0);
}

Tensor transpose(const Tensor& t, int64_t d0, int64_t d1) {
  d0 = wrap_dim(d0, t.dim(), "transpose");
  d1 = wrap_dim(d1, t.dim(), "transpose");
  Shape sh = t.shape(), st = t.strides();
  std::swap(sh[d0], sh[d1]);
  std::swap(st[d0], st[d1]);
  return as_view(t, std::move(sh), std::move(st), t.offset());
}

Tensor permute(const Tensor& t, const std::vector<int64_t>& dims) {
  STRATA_CHECK(int64_t(dims.size()) == t.dim(), "[permute] got ", dims.size(), " dims for a ", t.dim(),
               "-d tensor");
  Shape sh(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], t.dim(), "permute");
    STRATA_CHECK(!seen[d], "[permute] repeated dim ", d);
    seen[d] = true;
    sh[i] = t.shape()[d];
    st[i] = t.strides()[d];
  }
  return as_view(t, std::move(sh), std::move(st), t.offset());
}

Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  dim = wrap_dim(dim, t.dim(), "slice");
  const int64_t n = t.shape()[dim];
  STRATA_CHECK(step > 0, "[slice] step must be positive, got ", step);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sh = t.shape(), st = t.strides();
  sh[dim] = (end - start + step - 1) / step;
  st[dim] *= step;
  return as_view(t, std::move(sh), std::move(st), t.offset() + start * t.strides()[dim]);
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  dim = wrap_dim(dim, t.dim(), "narrow");
  STRATA_CHECK(start >= 0 && length >= 0 && start + length <= t.shape()[dim], "[narrow] range [", start, ", ",
               start + length, ") out of bounds for dim ", dim, " of size ", t.shape()[dim]);
  Shape sh = t.shape();
  sh[dim] = length;
  return as_view(t, std::move(sh), t.strides(), t.offset() + start * t.strides()[dim]);
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  dim = wrap_dim(dim, t.dim(), "select");
  const int64_t n = t.shape()[dim];
  if (index < 0) index += n;
  STRATA_CHECK(index >= 0 && index < n, "[select] index ", index, " out of range for size ", n);
  Shape sh = t.shape(), st = t.strides();
  const int64_t off = t.offset() + index * st[dim];
  sh.erase(sh.begin() + dim);
  st.erase(st.begin() + dim);
  return as_view(t, std::move(sh), std::move(st), off);
}

Tensor expand(const Tensor& t, const Shape& shape) {
  STRATA_CHECK(int64_t(shape.size()) >= t.dim(), "[expand] cannot expand ", shape_str(t.shape()), " to ",
               shape_str(shape));
  Shape sh(shape.size()), st(shape.size());
  const int64_t lead = int64_t(shape.size()) - t.dim();
  for (int64_t i = 0; i < int64_t(shape.size()); ++i) {
    if (i < lead) {
      STRATA_CHECK(shape[i] >= 0, "[expand] -1 not allowed in new leading dims");
      sh[i] = shape[i];
      st[i] = 0;
      continue;
    }
    const int64_t have = t.shape()[i - lead];
    const int64_t want = shape[i] == -1 ? have : shape[i];
    STRATA_CHECK(have == want || have == 1, "[expand] cannot expand ", shape_str(t.shape()), " to ",
                 shape_str(shape));
    sh[i] = want;
    st[i] = (have == want) ? t.strides()[i - lead] : 0;
  }
  return as_view(t, std::move(sh), std::move(st), t.offset());
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  dim = wrap_dim(dim, t.dim(), "squeeze");
  if (t.shape()[dim] != 1) return t;
  Shape sh = t.shape(), st = t.strides();
  sh.erase(sh.begin() + dim);
  st.erase(st.begin() + dim);
  return as_view(t, std::move(sh), std::move(st), t.offset());
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  dim = wrap_dim(dim, t.dim() + 1, "unsqueeze");
  Shape sh = t.shape(), st = t.strides();
  const int64_t s = dim < t.dim() ? st[dim] * sh[dim] : 1;
  sh.insert(sh.begin() + dim, 1);
  st.insert(st.begin() + dim, s);
  return as_view(t, std::move(sh), std::move(st), t.offset());
}

Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim) {
  if (t.dim() == 0) return reshape(t, {1});
  start_dim = wrap_dim(start_dim, t.dim(), "flatten");
  end_dim = wrap_dim(end_dim, t.dim(), "flatten");
  Shape sh;
  for (int64_t i = 0; i < start_dim; ++i) sh.push_back(t.shape()[i]);
  int64_t m = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) m *= t.shape()[i];
  sh.push_back(m);
  for (int64_t i = end_dim + 1; i < t.dim(); ++i) sh.push_back(t.shape()[i]);
  return reshape(t, sh);
}

std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim) {
  dim = wrap_dim(dim, t.dim(), "split");
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
  STRATA_CHECK(total == t.shape()[dim], "[split] sizes sum to ", total, " but dim ", dim, " has size ",
               t.shape()[dim]);
  std::vector<Tensor> out;
  int64_t start = 0;
  for (auto s : sizes) {
    out.push_back(narrow(t, dim, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim) {
  STRATA_CHECK(chunks > 0, "[chunk] chunks must be positive");
  const int64_t n = t.size(dim);
  const int64_t each = (n + chunks - 1) / chunks;
  std::vector<int64_t> sizes;
  for (int64_t s = 0; s < n; s += each) sizes.push_back(std::min(each, n - s));
  if (sizes.empty()) sizes.push_back(0);
  return split(t, sizes, dim);
}

}  // namespace strata::ops
