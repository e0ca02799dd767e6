// Indexing / joining front ends: shape checks with messages naming the op and the
// shapes, output allocation (zeroed for the accumulating ops), kernel dispatch.
// cat writes each input into a narrowed view of the output through copy_.
#include <strata/tensor/cpu/index.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/ops.h>

namespace strata::ops {
namespace {

using SelectFn = void(Tensor&, const Tensor&, int64_t, const Tensor&);
using AddFn = void(Tensor&, int64_t, const Tensor&, const Tensor&);
const KernelTable<SelectFn> kIndexSelect{"index_select", {&cpu::index_select_kernel, nullptr}};
const KernelTable<AddFn> kIndexAdd{"index_add", {&cpu::index_add_kernel, nullptr}};
const KernelTable<SelectFn> kGather{"gather", {&cpu::gather_kernel, nullptr}};
const KernelTable<AddFn> kScatterAdd{"scatter_add", {&cpu::scatter_add_kernel, nullptr}};

int64_t wrap_dim(const char* op, int64_t d, int64_t ndim) {
  const int64_t w = d < 0 ? d + ndim : d;
  STRATA_CHECK(w >= 0 && w < ndim, "[", op, "] dim ", d, " out of range for a ", ndim, "-d tensor");
  return w;
}

void check_index(const char* op, const Tensor& idx) {
  STRATA_CHECK(idx.defined(), "[", op, "] index is an undefined tensor");
  STRATA_CHECK(idx.dtype() == DType::i64 || idx.dtype() == DType::i32, "[", op, "] index must be i64 or i32, got ",
               dtype_name(idx.dtype()));
}

// idx (same rank as `shape`) may not exceed `shape` in any dim but `dim`.
void check_gather_shape(const char* op, const Shape& shape, int64_t dim, const Tensor& idx, const char* what) {
  STRATA_CHECK(int64_t(shape.size()) == idx.dim(), "[", op, "] index ", shape_str(idx.shape()),
               " must have the same rank as ", what, " ", shape_str(shape));
  for (int64_t d = 0; d < idx.dim(); ++d)
    STRATA_CHECK(d == dim || idx.shape()[d] <= shape[d], "[", op, "] index ", shape_str(idx.shape()),
                 " is larger than ", what, " ", shape_str(shape), " in dim ", d);
}

}  // namespace

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  STRATA_CHECK(!ts.empty(), "[cat] needs at least one tensor");
  const Tensor& t0 = ts[0];
  STRATA_CHECK(t0.defined() && t0.dim() > 0, "[cat] cannot concatenate 0-d tensors; use stack");
  const int64_t d = wrap_dim("cat", dim, t0.dim());
  Shape out_shape = t0.shape();
  out_shape[size_t(d)] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    STRATA_CHECK(t.defined(), "[cat] tensor ", i, " is undefined");
    STRATA_CHECK(t.device() == t0.device(), "[cat] tensor ", i, " is on ", t.device().str(), ", tensor 0 on ",
                 t0.device().str());
    STRATA_CHECK(t.dtype() == t0.dtype(), "[cat] tensor ", i, " is ", dtype_name(t.dtype()), ", tensor 0 is ",
                 dtype_name(t0.dtype()));
    bool ok = t.dim() == t0.dim();
    for (int64_t k = 0; ok && k < t.dim(); ++k) ok = k == d || t.shape()[k] == t0.shape()[k];
    STRATA_CHECK(ok, "[cat] tensor ", i, " has shape ", shape_str(t.shape()), " but tensor 0 has ",
                 shape_str(t0.shape()), "; all dims but ", d, " must match");
    out_shape[size_t(d)] += t.shape()[size_t(d)];
  }
  Tensor out = Tensor::empty(out_shape, t0.dtype(), t0.device());
  int64_t start = 0;
  for (const auto& t : ts) {
    const int64_t len = t.shape()[size_t(d)];
    if (len > 0) {
      Tensor v = narrow(out, d, start, len);
      copy_(v, t);
    }
    start += len;
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  STRATA_CHECK(!ts.empty(), "[stack] needs at least one tensor");
  STRATA_CHECK(ts[0].defined(), "[stack] tensor 0 is undefined");
  const int64_t d = wrap_dim("stack", dim, ts[0].dim() + 1);
  std::vector<Tensor> us;
  us.reserve(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    STRATA_CHECK(ts[i].defined() && ts[i].shape() == ts[0].shape(), "[stack] tensor ", i, " has shape ",
                 ts[i].defined() ? shape_str(ts[i].shape()) : "undefined", " but tensor 0 has ",
                 shape_str(ts[0].shape()));
    us.push_back(unsqueeze(ts[i], d));
  }
  return cat(us, d);
}

Tensor index_select(const Tensor& t, int64_t dim, const Tensor& idx) {
  STRATA_CHECK(t.defined(), "[index_select] input is an undefined tensor");
  check_index("index_select", idx);
  const Device dev = common_device("index_select", t, idx);
  STRATA_CHECK(idx.dim() == 1, "[index_select] index must be 1-d, got ", shape_str(idx.shape()));
  const int64_t d = wrap_dim("index_select", dim, t.dim());
  Shape s = t.shape();
  s[size_t(d)] = idx.numel();
  Tensor out = Tensor::empty(s, t.dtype(), dev);
  kIndexSelect(dev)(out, t, d, idx);
  return out;
}

Tensor index_add(const Shape& shape, int64_t dim, const Tensor& idx, const Tensor& src) {
  STRATA_CHECK(src.defined(), "[index_add] src is an undefined tensor");
  check_index("index_add", idx);
  const Device dev = common_device("index_add", src, idx);
  STRATA_CHECK(idx.dim() == 1, "[index_add] index must be 1-d, got ", shape_str(idx.shape()));
  const int64_t d = wrap_dim("index_add", dim, int64_t(shape.size()));
  Shape expect = shape;
  expect[size_t(d)] = idx.numel();
  STRATA_CHECK(src.shape() == expect, "[index_add] src ", shape_str(src.shape()), " must be ", shape_str(expect),
               " (out ", shape_str(shape), " with dim ", d, " = index length ", idx.numel(), ")");
  Tensor out = zeros(shape, src.dtype(), dev);
  kIndexAdd(dev)(out, d, idx, src);
  return out;
}

Tensor gather(const Tensor& t, int64_t dim, const Tensor& idx) {
  STRATA_CHECK(t.defined(), "[gather] input is an undefined tensor");
  check_index("gather", idx);
  const Device dev = common_device("gather", t, idx);
  const int64_t d = wrap_dim("gather", dim, t.dim());
  check_gather_shape("gather", t.shape(), d, idx, "input");
  Tensor out = Tensor::empty(idx.shape(), t.dtype(), dev);
  kGather(dev)(out, t, d, idx);
  return out;
}

Tensor scatter_add(const Shape& shape, int64_t dim, const Tensor& idx, const Tensor& src) {
  STRATA_CHECK(src.defined(), "[scatter_add] src is an undefined tensor");
  check_index("scatter_add", idx);
  const Device dev = common_device("scatter_add", src, idx);
  const int64_t d = wrap_dim("scatter_add", dim, int64_t(shape.size()));
  check_gather_shape("scatter_add", shape, d, idx, "output");
  check_gather_shape("scatter_add", src.shape(), -1, idx, "src");
  Tensor out = zeros(shape, src.dtype(), dev);
  kScatterAdd(dev)(out, d, idx, src);
  return out;
}

}  // namespace strata::ops
