// Reduction kernels for comm: one templated loop per (dtype, op), contiguous and simple
// enough for the compiler to vectorise; 16-bit floats go through an f32 accumulator.
#include <strata/comm/reduce_kernels.h>

#include <algorithm>
#include <cstring>

#include <strata/core/error.h>

namespace strata::comm::detail {
namespace {

// Storage type T and the type Acc arithmetic happens in.
template <class T> struct Traits { using Acc = T; };
template <> struct Traits<Half> { using Acc = float; };
template <> struct Traits<BFloat16> { using Acc = float; };

template <class T> inline typename Traits<T>::Acc load(const T& v) { return v; }
template <> inline float load<Half>(const Half& v) { return half_to_float(v.bits); }
template <> inline float load<BFloat16>(const BFloat16& v) { return bf16_to_float(v.bits); }
template <class T> inline T store(typename Traits<T>::Acc v) { return v; }
template <> inline Half store<Half>(float v) { return Half{float_to_half(v)}; }
template <> inline BFloat16 store<BFloat16>(float v) { return BFloat16{float_to_bf16(v)}; }

template <ReduceOp Op, class A>
inline A apply(A x, A y) {
  if constexpr (Op == ReduceOp::sum || Op == ReduceOp::avg) return x + y;
  else if constexpr (Op == ReduceOp::prod) return x * y;
  else if constexpr (Op == ReduceOp::min) return y < x ? y : x;
  else return x < y ? y : x;
}

template <class F>
decltype(auto) dispatch_dtype(DType dt, F&& f) {
  return visit_dtype(dt, std::forward<F>(f));
}

template <class F>
decltype(auto) dispatch_op(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return f(std::integral_constant<ReduceOp, ReduceOp::sum>{});
    case ReduceOp::prod: return f(std::integral_constant<ReduceOp, ReduceOp::prod>{});
    case ReduceOp::min: return f(std::integral_constant<ReduceOp, ReduceOp::min>{});
    case ReduceOp::max: return f(std::integral_constant<ReduceOp, ReduceOp::max>{});
  }
  STRATA_THROW(Error, "[comm] unsupported reduce op");
}

template <class T, ReduceOp Op>
void reduce3_t(T* dst, const T* a, const T* b, int64_t n) {
  // dst may alias a or b: element i reads a[i], b[i] before writing dst[i].
  if constexpr (std::is_same_v<T, typename Traits<T>::Acc>) {
    for (int64_t i = 0; i < n; ++i) dst[i] = apply<Op>(a[i], b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = store<T>(apply<Op>(load(a[i]), load(b[i])));
  }
}

constexpr int64_t kBlock = 2048;  // elements per accumulator block (fits L1 with its sources)

template <class T, ReduceOp Op>
void reduce_many_t(T* dst, const T* const* srcs, int nsrc, int64_t n, double scale) {
  using Acc = typename Traits<T>::Acc;
  alignas(64) Acc acc[kBlock];
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t m = std::min(kBlock, n - b0);
    const T* s0 = srcs[0] + b0;
    for (int64_t i = 0; i < m; ++i) acc[i] = load(s0[i]);
    for (int k = 1; k < nsrc; ++k) {
      const T* s = srcs[k] + b0;
      for (int64_t i = 0; i < m; ++i) acc[i] = apply<Op>(acc[i], load(s[i]));
    }
    if constexpr (std::is_floating_point_v<Acc>) {
      if (scale != 1.0) {
        const Acc sc = Acc(scale);
        for (int64_t i = 0; i < m; ++i) acc[i] *= sc;
      }
    }
    T* d = dst + b0;
    if constexpr (std::is_same_v<T, Acc>) {
      std::memcpy(d, acc, size_t(m) * sizeof(T));
    } else {
      for (int64_t i = 0; i < m; ++i) d[i] = store<T>(acc[i]);
    }
  }
}

}  // namespace

void reduce3(void* dst, const void* a, const void* b, int64_t n, DType dt, ReduceOp op) {
  if (n <= 0) return;
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    dispatch_op(op, [&](auto opc) {
      reduce3_t<T, decltype(opc)::value>(static_cast<T*>(dst), static_cast<const T*>(a),
                                         static_cast<const T*>(b), n);
    });
  });
}

void reduce_many(void* dst, const void* const* srcs, int nsrc, int64_t n, DType dt, ReduceOp op,
                 double scale) {
  if (n <= 0) return;
  STRATA_CHECK(nsrc >= 1, "[comm] reduce_many needs at least one source");
  STRATA_CHECK(scale == 1.0 || is_floating(dt), "[comm] scaling needs a floating dtype, got ", dtype_name(dt));
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    dispatch_op(op, [&](auto opc) {
      reduce_many_t<T, decltype(opc)::value>(static_cast<T*>(dst), reinterpret_cast<const T* const*>(srcs),
                                             nsrc, n, scale);
    });
  });
}

void scale_inplace(void* p, int64_t n, DType dt, double s) {
  if (n <= 0 || s == 1.0) return;
  STRATA_CHECK(is_floating(dt), "[comm] avg needs a floating dtype, got ", dtype_name(dt));
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    using Acc = typename Traits<T>::Acc;
    if constexpr (std::is_floating_point_v<Acc>) {
      T* x = static_cast<T*>(p);
      const Acc sc = Acc(s);
      for (int64_t i = 0; i < n; ++i) x[i] = store<T>(load(x[i]) * sc);
    }
  });
}

void convert(void* dst, DType dst_dt, const void* src, DType src_dt, int64_t n) {
  if (n <= 0) return;
  if (dst_dt == src_dt) {
    std::memcpy(dst, src, size_t(n) * element_size(dst_dt));
    return;
  }
  dispatch_dtype(src_dt, [&](auto stag) {
    using S = decltype(stag);
    dispatch_dtype(dst_dt, [&](auto dtag) {
      using D = decltype(dtag);
      const S* s = static_cast<const S*>(src);
      D* d = static_cast<D*>(dst);
      if constexpr (std::is_same_v<D, float>) {
        for (int64_t i = 0; i < n; ++i) d[i] = float(load(s[i]));
      } else if constexpr (std::is_same_v<S, float>) {
        for (int64_t i = 0; i < n; ++i) d[i] = store<D>(typename Traits<D>::Acc(s[i]));
      } else {
        for (int64_t i = 0; i < n; ++i) d[i] = store<D>(typename Traits<D>::Acc(double(load(s[i]))));
      }
    });
  });
}

}  // namespace strata::comm::detail
