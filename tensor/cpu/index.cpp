// CPU index kernels. Each is one strided loop over the shape being walked, with
// the indexed dim's stride zeroed in the indexed operand and the index value
// times that stride added per element; when the indexed dim is not innermost the
// index is read once per run and the run is a plain copy / add.
#include <strata/tensor/cpu/index.h>

#include <cstring>

#include <strata/tensor/cpu/loops.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

constexpr int64_t kSerial = int64_t(1) << 40;  // grain for loops whose runs may hit the same output

// Throws unless every index is in [0, n).
template <class I>
void check_range(const Tensor& idx, int64_t n, const char* op, int64_t dim) {
  if (idx.numel() == 0) return;
  const auto plan = make_plan<1>(idx.shape(), {idx.strides()});
  const I* p = static_cast<const I*>(idx.raw_data());
  int64_t bad = 0;
  bool found = false;
  for_each_run<1>(
      plan,
      [&](const std::array<int64_t, 1>& off, int64_t m, const std::array<int64_t, 1>& st) {
        for (int64_t i = 0; i < m; ++i) {
          const int64_t v = int64_t(p[off[0] + i * st[0]]);
          if ((v < 0 || v >= n) && !found) {
            found = true;
            bad = v;
          }
        }
      },
      kSerial);
  STRATA_CHECK(!found, "[", op, "] index ", bad, " is out of range for dim ", dim, " of size ", n);
}

// Strides of a 1-d index laid along `dim` of an ndim-d iteration (0 elsewhere).
Shape along(const Tensor& idx, int64_t dim, int64_t ndim) {
  Shape s(size_t(ndim), 0);
  s[size_t(dim)] = idx.strides()[0];
  return s;
}

Shape zero_dim(Shape s, int64_t dim) {
  s[size_t(dim)] = 0;
  return s;
}

template <class T, class I>
void index_select_typed(Tensor& out, const Tensor& t, int64_t dim, const Tensor& idx) {
  const int64_t tsd = t.strides()[size_t(dim)];
  const auto plan = make_plan<3>(out.shape(), {out.strides(), zero_dim(t.strides(), dim), along(idx, dim, out.dim())});
  T* o = static_cast<T*>(out.raw_data());
  const T* tp = static_cast<const T*>(t.raw_data());
  const I* ip = static_cast<const I*>(idx.raw_data());
  for_each_run<3>(plan, [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
    T* op = o + off[0];
    if (st[2] == 0) {  // whole run reads one slice of t
      const T* src = tp + off[1] + int64_t(ip[off[2]]) * tsd;
      if (st[0] == 1 && st[1] == 1) {
        std::memcpy(op, src, size_t(n) * sizeof(T));
      } else {
        for (int64_t i = 0; i < n; ++i) op[i * st[0]] = src[i * st[1]];
      }
    } else {
      const T* src = tp + off[1];
      const I* ix = ip + off[2];
      for (int64_t i = 0; i < n; ++i) op[i * st[0]] = src[i * st[1] + int64_t(ix[i * st[2]]) * tsd];
    }
  });
}

template <class T, class I>
void index_add_typed(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src) {
  const int64_t osd = out.strides()[size_t(dim)];
  const auto plan =
      make_plan<3>(src.shape(), {zero_dim(out.strides(), dim), src.strides(), along(idx, dim, src.dim())});
  T* o = static_cast<T*>(out.raw_data());
  const T* sp = static_cast<const T*>(src.raw_data());
  const I* ip = static_cast<const I*>(idx.raw_data());
  for_each_run<3>(
      plan,
      [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
        const T* s = sp + off[1];
        if (st[2] == 0) {
          T* dst = o + off[0] + int64_t(ip[off[2]]) * osd;
          if (st[0] == 1 && st[1] == 1) {
            for (int64_t i = 0; i < n; ++i) dst[i] += s[i];
          } else {
            for (int64_t i = 0; i < n; ++i) dst[i * st[0]] += s[i * st[1]];
          }
        } else {
          T* dst = o + off[0];
          const I* ix = ip + off[2];
          for (int64_t i = 0; i < n; ++i) dst[i * st[0] + int64_t(ix[i * st[2]]) * osd] += s[i * st[1]];
        }
      },
      kSerial);
}

// Walks idx's shape; t has the same rank and is no smaller in the other dims.
template <class T, class I>
void gather_typed(Tensor& out, const Tensor& t, int64_t dim, const Tensor& idx) {
  const int64_t tsd = t.strides()[size_t(dim)];
  const auto plan = make_plan<3>(idx.shape(), {out.strides(), idx.strides(), zero_dim(t.strides(), dim)});
  T* o = static_cast<T*>(out.raw_data());
  const T* tp = static_cast<const T*>(t.raw_data());
  const I* ip = static_cast<const I*>(idx.raw_data());
  for_each_run<3>(plan, [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
    T* op = o + off[0];
    const I* ix = ip + off[1];
    const T* src = tp + off[2];
    for (int64_t i = 0; i < n; ++i) op[i * st[0]] = src[i * st[2] + int64_t(ix[i * st[1]]) * tsd];
  });
}

template <class T, class I>
void scatter_add_typed(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src) {
  const int64_t osd = out.strides()[size_t(dim)];
  const auto plan = make_plan<3>(idx.shape(), {zero_dim(out.strides(), dim), idx.strides(), src.strides()});
  T* o = static_cast<T*>(out.raw_data());
  const T* sp = static_cast<const T*>(src.raw_data());
  const I* ip = static_cast<const I*>(idx.raw_data());
  for_each_run<3>(
      plan,
      [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
        T* dst = o + off[0];
        const I* ix = ip + off[1];
        const T* s = sp + off[2];
        for (int64_t i = 0; i < n; ++i) dst[i * st[0] + int64_t(ix[i * st[1]]) * osd] += s[i * st[2]];
      },
      kSerial);
}

}  // namespace

void index_select_kernel(Tensor& out, const Tensor& t, int64_t dim, const Tensor& idx) {
  dispatch_index(idx, "index_select", [&](auto itag) {
    using I = decltype(itag);
    check_range<I>(idx, t.shape()[size_t(dim)], "index_select", dim);
    if (out.numel() == 0) return;
    STRATA_DISPATCH_ALL(t.dtype(), "index_select", [&] { index_select_typed<scalar_t, I>(out, t, dim, idx); });
  });
}

void index_add_kernel(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src) {
  dispatch_index(idx, "index_add", [&](auto itag) {
    using I = decltype(itag);
    check_range<I>(idx, out.shape()[size_t(dim)], "index_add", dim);
    if (src.numel() == 0) return;
    STRATA_DISPATCH_ALL(out.dtype(), "index_add", [&] { index_add_typed<scalar_t, I>(out, dim, idx, src); });
  });
}

void gather_kernel(Tensor& out, const Tensor& t, int64_t dim, const Tensor& idx) {
  dispatch_index(idx, "gather", [&](auto itag) {
    using I = decltype(itag);
    check_range<I>(idx, t.shape()[size_t(dim)], "gather", dim);
    if (out.numel() == 0) return;
    STRATA_DISPATCH_ALL(t.dtype(), "gather", [&] { gather_typed<scalar_t, I>(out, t, dim, idx); });
  });
}

void scatter_add_kernel(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src) {
  dispatch_index(idx, "scatter_add", [&](auto itag) {
    using I = decltype(itag);
    check_range<I>(idx, out.shape()[size_t(dim)], "scatter_add", dim);
    if (idx.numel() == 0) return;
    STRATA_DISPATCH_ALL(out.dtype(), "scatter_add", [&] { scatter_add_typed<scalar_t, I>(out, dim, idx, src); });
  });
}

}  // namespace strata::cpu
