// Reduction front ends: normalise dims, allocate the keepdim-shaped output,
// dispatch, then drop the reduced dims when !keepdim (a free view).
#include <algorithm>
#include <limits>

#include <strata/tensor/cpu/reduce.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/ops.h>

namespace strata::ops {
namespace {

using SumFn = void(Tensor&, const Tensor&, double);
using MaxFn = void(Tensor&, Tensor&, const Tensor&, int64_t);
using SumSquaresFn = double(const Tensor&);
const KernelTable<SumFn> kSum{"sum", {&cpu::sum_kernel, nullptr}};
const KernelTable<MaxFn> kMax{"amax", {&cpu::max_kernel, nullptr}};
const KernelTable<SumSquaresFn> kSumSquares{"sum_squares", {&cpu::sum_squares_kernel, nullptr}};

int64_t wrap_dim(const char* op, int64_t d, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  const int64_t w = d < 0 ? d + n : d;
  STRATA_CHECK(w >= 0 && w < n, "[", op, "] dim ", d, " out of range for a ", ndim, "-d tensor");
  return w;
}

// Per-dim "reduce me" flags; empty dims = all.
std::vector<bool> reduce_mask(const char* op, const Tensor& t, const std::vector<int64_t>& dims) {
  std::vector<bool> m(size_t(t.dim()), dims.empty());
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(op, d, t.dim());
    if (t.dim() == 0) continue;
    STRATA_CHECK(!m[size_t(w)], "[", op, "] dim ", d, " appears twice in the reduction dims");
    m[size_t(w)] = true;
  }
  return m;
}

Shape keep_shape(const Tensor& t, const std::vector<bool>& m) {
  Shape s = t.shape();
  for (size_t i = 0; i < s.size(); ++i)
    if (m[i]) s[i] = 1;
  return s;
}

Shape drop_shape(const Tensor& t, const std::vector<bool>& m) {
  Shape s;
  for (size_t i = 0; i < m.size(); ++i)
    if (!m[i]) s.push_back(t.shape()[i]);
  return s;
}

Tensor reduce_sum(const char* op, const Tensor& t, const std::vector<int64_t>& dims, bool keepdim, bool mean) {
  STRATA_CHECK(t.defined(), "[", op, "] input is an undefined tensor");
  const auto m = reduce_mask(op, t, dims);
  int64_t count = 1;
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i]) count *= t.shape()[i];
  Tensor out = Tensor::empty(keep_shape(t, m), t.dtype(), t.device());
  const double scale = mean ? (count == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / double(count)) : 1.0;
  kSum(t.device())(out, t, scale);
  if (keepdim) return out;
  return Tensor::make_view(out.storage(), drop_shape(t, m), contiguous_strides(drop_shape(t, m)), 0, out.dtype());
}

Tensor reduce_max(const char* op, const Tensor& t, int64_t dim, bool keepdim, bool want_values) {
  STRATA_CHECK(t.defined(), "[", op, "] input is an undefined tensor");
  const Tensor in = t.dim() == 0 ? ops::reshape(t, {1}) : t;
  const int64_t d = wrap_dim(op, dim, t.dim());
  STRATA_CHECK(in.shape()[d] > 0, "[", op, "] cannot reduce over empty dim ", d, " of ", shape_str(t.shape()));
  std::vector<bool> m(size_t(in.dim()), false);
  m[size_t(d)] = true;
  const Shape ks = keep_shape(in, m);
  Tensor values, indices;
  if (want_values)
    values = Tensor::empty(ks, t.dtype(), t.device());
  else
    indices = Tensor::empty(ks, DType::i64, t.device());
  kMax(t.device())(values, indices, in, d);
  Tensor out = want_values ? values : indices;
  if (t.dim() == 0) return ops::reshape(out, {});
  if (keepdim) return out;
  return ops::squeeze(out, d);
}

}  // namespace

Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_sum("sum", t, dims, keepdim, false);
}

Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_sum("mean", t, dims, keepdim, true);
}

Tensor amax(const Tensor& t, int64_t dim, bool keepdim) { return reduce_max("amax", t, dim, keepdim, true); }

Tensor argmax(const Tensor& t, int64_t dim, bool keepdim) { return reduce_max("argmax", t, dim, keepdim, false); }

Tensor sum_to_shape(const Tensor& t, const Shape& shape) {
  STRATA_CHECK(t.defined(), "[sum_to_shape] input is an undefined tensor");
  if (t.shape() == shape) return t;
  const int64_t lead = t.dim() - int64_t(shape.size());
  STRATA_CHECK(lead >= 0, "[sum_to_shape] cannot sum ", shape_str(t.shape()), " to the larger rank ",
               shape_str(shape));
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (i < lead) {
      dims.push_back(i);
      continue;
    }
    const int64_t want = shape[size_t(i - lead)];
    const int64_t have = t.shape()[size_t(i)];
    STRATA_CHECK(want == have || want == 1, "[sum_to_shape] ", shape_str(t.shape()), " is not a broadcast of ",
                 shape_str(shape), " (dim ", i, ": ", have, " vs ", want, ")");
    if (want == 1 && have != 1) dims.push_back(i);
  }
  if (dims.empty()) return ops::reshape(t, shape);
  Tensor s = sum(t, dims, /*keepdim=*/true);  // contiguous: viewing as `shape` is free
  return Tensor::make_view(s.storage(), shape, contiguous_strides(shape), 0, s.dtype());
}

double sum_squares(const Tensor& t) {
  STRATA_CHECK(t.defined(), "[sum_squares] input is an undefined tensor");
  return kSumSquares(t.device())(t);
}

}  // namespace strata::ops
