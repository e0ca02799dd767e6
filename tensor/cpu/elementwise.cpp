// CPU elementwise kernels. Each op is a functor passed to one strided loop
// template; the op switch happens once per call, so the inner loops are plain
// (vectorisable) loops over contiguous runs, with broadcast scalars hoisted.
#include <strata/tensor/cpu/elementwise.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/cpu/act_avx512.h>
#include <strata/tensor/cpu/loops.h>
#include <strata/tensor/cpu/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

using ops::BinaryOp;
using ops::CompareOp;
using ops::UnaryOp;

// for_each_run, but long rows are also split across threads: a contiguous tensor
// coalesces to a single row, which for_each_run would run on one thread.
// Simd: the runs are compiled per ISA level and dispatched at run time (isa_dispatch.h).
template <int N, bool Simd, class F>
void for_each_block(const StridedPlan<N>& p, F&& fn) {
  constexpr int64_t kGrain = 32768;
  const int64_t inner = p.inner(), outer = p.outer();
  const int nt = get_num_threads();
  if (nt <= 1 || inner < 2 * kGrain || outer >= 4 * int64_t(nt)) return for_each_run<N, Simd>(p, fn, kGrain);
  const int64_t pieces = inner / kGrain;
  const int nd = int(p.shape.size());
  std::array<int64_t, N> istr;
  for (int k = 0; k < N; ++k) istr[k] = p.strides[k][nd - 1];
  auto chunk = [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      const int64_t r = u / pieces, piece = u % pieces;
      std::array<int64_t, N> off{};
      int64_t rem = r;
      for (int d = nd - 2; d >= 0; --d) {
        const int64_t i = rem % p.shape[d];
        rem /= p.shape[d];
        for (int k = 0; k < N; ++k) off[k] += i * p.strides[k][d];
      }
      const int64_t lo = inner * piece / pieces, hi = inner * (piece + 1) / pieces;
      for (int k = 0; k < N; ++k) off[k] += lo * istr[k];
      fn(off, hi - lo, istr);
    }
  };
  if constexpr (Simd) parallel_for_simd(outer * pieces, 1, chunk);
  else parallel_for(outer * pieces, 1, chunk);
}

// Dispatch per ISA level where the output is floating (the math the vector width speeds
// up); integer and comparison loops stay baseline, which also keeps this file's compile
// time within ~2x of a single variant.
template <class TO, class... T>
constexpr bool kSimd = std::is_floating_point_v<TO>;
// The map functions read every operand through ld() and write through st<TO>(): the
// functor computes in acc_t (f32 for f16/bf16 storage), widened in registers.

// out = f(a) over out's shape, a broadcast.
template <class TO, class TA, class F>
void map1(Tensor& out, const Tensor& a, F f) {
  if (out.numel() == 0) return;
  const auto plan = make_plan<2>(out.shape(), {out.strides(), broadcast_strides(a, out.shape())});
  TO* o = static_cast<TO*>(out.raw_data());
  const TA* pa = static_cast<const TA*>(a.raw_data());
  // flatten: the op functor and its math helpers are inlined into the loops
  auto body = [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& sd)
                  __attribute__((flatten)) {
    TO* op = o + off[0];
    const TA* ap = pa + off[1];
    if (sd[0] == 1 && sd[1] == 1) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) op[i] = st<TO>(f(ld(ap[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) op[i * sd[0]] = st<TO>(f(ld(ap[i * sd[1]])));
    }
  };
  for_each_block<2, kSimd<TO, TA>>(plan, body);
}

// out = f(a, b) over out's shape, a and b broadcast.
template <class TO, class TA, class TB, class F>
void map2(Tensor& out, const Tensor& a, const Tensor& b, F f) {
  if (out.numel() == 0) return;
  const auto plan = make_plan<3>(
      out.shape(), {out.strides(), broadcast_strides(a, out.shape()), broadcast_strides(b, out.shape())});
  TO* o = static_cast<TO*>(out.raw_data());
  const TA* pa = static_cast<const TA*>(a.raw_data());
  const TB* pb = static_cast<const TB*>(b.raw_data());
  // flatten: the op functor and its math helpers are inlined into the loops
  auto body = [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& sd)
                  __attribute__((flatten)) {
    TO* op = o + off[0];
    const TA* ap = pa + off[1];
    const TB* bp = pb + off[2];
    if (sd[0] == 1 && sd[1] == 1 && sd[2] == 1) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) op[i] = st<TO>(f(ld(ap[i]), ld(bp[i])));
    } else if (sd[0] == 1 && sd[1] == 1 && sd[2] == 0) {
      const auto bv = ld(*bp);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) op[i] = st<TO>(f(ld(ap[i]), bv));
    } else if (sd[0] == 1 && sd[1] == 0 && sd[2] == 1) {
      const auto av = ld(*ap);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) op[i] = st<TO>(f(av, ld(bp[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) op[i * sd[0]] = st<TO>(f(ld(ap[i * sd[1]]), ld(bp[i * sd[2]])));
    }
  };
  for_each_block<3, kSimd<TO, TA, TB>>(plan, body);
}

// out = f(a, b, c) over out's shape, all broadcast.
template <class TO, class TA, class TB, class TC, class F>
void map3(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, F f) {
  if (out.numel() == 0) return;
  const Shape& s = out.shape();
  const auto plan =
      make_plan<4>(s, {out.strides(), broadcast_strides(a, s), broadcast_strides(b, s), broadcast_strides(c, s)});
  TO* o = static_cast<TO*>(out.raw_data());
  const TA* pa = static_cast<const TA*>(a.raw_data());
  const TB* pb = static_cast<const TB*>(b.raw_data());
  const TC* pc = static_cast<const TC*>(c.raw_data());
  // flatten: the op functor and its math helpers are inlined into the loops
  auto body = [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& sd)
                  __attribute__((flatten)) {
    TO* op = o + off[0];
    const TA* ap = pa + off[1];
    const TB* bp = pb + off[2];
    const TC* cp = pc + off[3];
    if (sd[0] == 1 && sd[1] == 1 && sd[2] == 1 && sd[3] == 1) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) op[i] = st<TO>(f(ld(ap[i]), ld(bp[i]), ld(cp[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) op[i * sd[0]] = st<TO>(f(ld(ap[i * sd[1]]), ld(bp[i * sd[2]]), ld(cp[i * sd[3]])));
    }
  };
  for_each_block<4, kSimd<TO, TA, TB, TC>>(plan, body);
}

template <class T>
constexpr bool kIsFloat = std::is_floating_point_v<T>;

// Calls g(functor) with the functor for `op` on T.
template <class T, class G>
void with_binary(BinaryOp op, G&& g) {
  switch (op) {
    case BinaryOp::add: return g([](T x, T y) { return T(x + y); });
    case BinaryOp::sub: return g([](T x, T y) { return T(x - y); });
    case BinaryOp::mul: return g([](T x, T y) { return T(x * y); });
    case BinaryOp::div:
      if constexpr (kIsFloat<T>) return g([](T x, T y) { return x / y; });
      break;
    case BinaryOp::pow:
      if constexpr (kIsFloat<T>) return g([](T x, T y) { return T(std::pow(x, y)); });
      break;
    case BinaryOp::maximum:
      if constexpr (kIsFloat<T>) return g([](T x, T y) { return (x != x || x > y) ? x : y; });  // NaN wins
      else return g([](T x, T y) { return x > y ? x : y; });
    case BinaryOp::minimum:
      if constexpr (kIsFloat<T>) return g([](T x, T y) { return (x != x || x < y) ? x : y; });
      else return g([](T x, T y) { return x < y ? x : y; });
  }
  STRATA_THROW(Error, "[binary] div and pow need a floating dtype, got ", dtype_name(dtype_v<T>));
}

template <class T, class G>
void with_compare(CompareOp op, G&& g) {
  switch (op) {
    case CompareOp::eq: return g([](T x, T y) { return uint8_t(x == y); });
    case CompareOp::ne: return g([](T x, T y) { return uint8_t(x != y); });
    case CompareOp::lt: return g([](T x, T y) { return uint8_t(x < y); });
    case CompareOp::le: return g([](T x, T y) { return uint8_t(x <= y); });
    case CompareOp::gt: return g([](T x, T y) { return uint8_t(x > y); });
    case CompareOp::ge: return g([](T x, T y) { return uint8_t(x >= y); });
  }
}

template <class T>
inline T sigmoid_of(T x) {
  return T(1) / (T(1) + vexp(-x));
}

template <class T, class G>
void with_unary(UnaryOp op, G&& g) {
  switch (op) {
    case UnaryOp::neg: return g([](T x) { return -x; });
    case UnaryOp::exp: return g([](T x) { return vexp(x); });
    case UnaryOp::log: return g([](T x) { return vlog(x); });
    case UnaryOp::sqrt: return g([](T x) { return std::sqrt(x); });
    case UnaryOp::rsqrt: return g([](T x) { return T(1) / std::sqrt(x); });
    case UnaryOp::abs: return g([](T x) { return std::abs(x); });
    case UnaryOp::relu: return g([](T x) { return x > T(0) ? x : T(0); });
    case UnaryOp::gelu: return g([](T x) { return gelu_erf_of(x); });
    case UnaryOp::gelu_tanh: return g([](T x) { return gelu_tanh_of(x); });
    case UnaryOp::tanh: return g([](T x) { return vtanh(x); });
    case UnaryOp::sigmoid: return g([](T x) { return sigmoid_of(x); });
    case UnaryOp::sign: return g([](T x) { return T((x > T(0)) - (x < T(0))); });
    case UnaryOp::square: return g([](T x) { return x * x; });
    case UnaryOp::reciprocal: return g([](T x) { return T(1) / x; });
  }
}

template <class T, class G>
void with_act_grad(ActGrad kind, G&& g) {
  switch (kind) {
    case ActGrad::gelu: return g([](T dy, T x) { return dy * gelu_erf_grad_of(x); });
    case ActGrad::gelu_tanh: return g([](T dy, T x) { return dy * gelu_tanh_grad_of(x); });
    case ActGrad::relu: return g([](T dy, T y) { return y > T(0) ? dy : T(0); });
    case ActGrad::tanh: return g([](T dy, T y) { return dy * (T(1) - y * y); });
    case ActGrad::sigmoid: return g([](T dy, T y) { return dy * y * (T(1) - y); });
  }
}

}  // namespace

void binary_kernel(BinaryOp op, Tensor& out, const Tensor& a, const Tensor& b) {
  STRATA_DISPATCH_ALL16(out.dtype(), "binary", [&] {
    with_binary<acc_t<scalar_t>>(op, [&](auto f) { map2<scalar_t, scalar_t, scalar_t>(out, a, b, f); });
  });
}

void binary_scalar_kernel(BinaryOp op, Tensor& out, const Tensor& a, double s, bool scalar_first) {
  STRATA_DISPATCH_ALL16(out.dtype(), "binary_scalar", [&] {
    using A = acc_t<scalar_t>;
    const A sv = static_cast<A>(s);
    // common cases without the generic functor
    if (!scalar_first && op == BinaryOp::pow && kIsFloat<A> && s == 2.0)
      return map1<scalar_t, scalar_t>(out, a, [](A x) { return A(x * x); });
    if (!scalar_first && op == BinaryOp::div && kIsFloat<A>) {
      const A inv = A(1.0 / s);
      return map1<scalar_t, scalar_t>(out, a, [inv](A x) { return A(x * inv); });
    }
    with_binary<A>(op, [&](auto f) {
      if (scalar_first)
        map1<scalar_t, scalar_t>(out, a, [f, sv](A x) { return f(sv, x); });
      else
        map1<scalar_t, scalar_t>(out, a, [f, sv](A x) { return f(x, sv); });
    });
  });
}

void compare_kernel(CompareOp op, Tensor& out, const Tensor& a, const Tensor& b) {
  STRATA_DISPATCH_ALL16(a.dtype(), "compare", [&] {
    with_compare<acc_t<scalar_t>>(op, [&](auto f) { map2<uint8_t, scalar_t, scalar_t>(out, a, b, f); });
  });
}

void compare_scalar_kernel(CompareOp op, Tensor& out, const Tensor& a, double s) {
  STRATA_DISPATCH_ALL16(a.dtype(), "compare_scalar", [&] {
    using A = acc_t<scalar_t>;
    with_compare<A>(op, [&](auto f) {
      if constexpr (kIsFloat<A>) {
        const A sv = A(s);
        map1<uint8_t, scalar_t>(out, a, [f, sv](A x) { return f(x, sv); });
      } else {
        // compare integers against the exact double so that e.g. x < 2.5 is right
        map1<uint8_t, scalar_t>(out, a, [op, s](A x) {
          const double v = double(x);
          switch (op) {
            case CompareOp::eq: return uint8_t(v == s);
            case CompareOp::ne: return uint8_t(v != s);
            case CompareOp::lt: return uint8_t(v < s);
            case CompareOp::le: return uint8_t(v <= s);
            case CompareOp::gt: return uint8_t(v > s);
            case CompareOp::ge: return uint8_t(v >= s);
          }
          return uint8_t(0);
        });
      }
    });
  });
}

namespace {
// The f32 tanh GELU and its gradient at x86-64-v4 on contiguous operands: the AVX-512 rows
// (act_avx512.h) that the fused bias_gelu and bias_gelu_backward use, so the fused and
// unfused GPT MLPs compute the same activations and gradients.
bool gelu_avx512_applies(const Tensor& out, const std::vector<const Tensor*>& in) {
  if (out.dtype() != DType::f32 || !avx512_rows() || !out.is_contiguous())
    return false;
  for (const Tensor* t : in)
    if (t->dtype() != DType::f32 || !t->is_contiguous() || t->shape() != out.shape()) return false;
  return true;
}
}  // namespace

void unary_kernel(UnaryOp op, Tensor& out, const Tensor& a) {
  if (op == UnaryOp::gelu_tanh && gelu_avx512_applies(out, {&a})) {
    const float* x = a.data<float>();
    float* y = out.data<float>();
    parallel_for(out.numel(), 16384, [&](int64_t b, int64_t e) { gelu_tanh_row_avx512(x + b, nullptr, y + b, e - b); });
    return;
  }
  STRATA_DISPATCH_FLOAT16(out.dtype(), "unary", [&] {
    with_unary<acc_t<scalar_t>>(op, [&](auto f) { map1<scalar_t, scalar_t>(out, a, f); });
  });
}

void where_kernel(Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  STRATA_DISPATCH_ALL16(out.dtype(), "where", [&] {
    using A = acc_t<scalar_t>;
    map3<scalar_t, uint8_t, scalar_t, scalar_t>(out, cond, a, b, [](uint8_t c, A x, A y) { return c ? x : y; });
  });
}

void masked_fill_kernel(Tensor& out, const Tensor& t, const Tensor& mask, double value) {
  STRATA_DISPATCH_ALL16(out.dtype(), "masked_fill", [&] {
    using A = acc_t<scalar_t>;
    const A v = static_cast<A>(value);
    map2<scalar_t, scalar_t, uint8_t>(out, t, mask, [v](A x, uint8_t m) { return m ? v : x; });
  });
}

void act_grad_kernel(ActGrad kind, Tensor& out, const Tensor& grad, const Tensor& x) {
  if (kind == ActGrad::gelu_tanh && gelu_avx512_applies(out, {&grad, &x})) {
    const float* g = grad.data<float>();
    const float* xp = x.data<float>();
    float* d = out.data<float>();
    parallel_for(out.numel(), 16384, [&](int64_t b, int64_t e) {
      gelu_tanh_grad_row_avx512(g + b, xp + b, nullptr, d + b, nullptr, e - b);
    });
    return;
  }
  STRATA_DISPATCH_FLOAT16(out.dtype(), "activation_backward", [&] {
    with_act_grad<acc_t<scalar_t>>(kind, [&](auto f) { map2<scalar_t, scalar_t, scalar_t>(out, grad, x, f); });
  });
}

void add_kernel(Tensor& dst, const Tensor& src, double alpha) {
  STRATA_DISPATCH_ALL16(dst.dtype(), "add_", [&] {
    using A = acc_t<scalar_t>;
    if (dst.is_contiguous() && src.is_contiguous() && src.shape() == dst.shape()) {
      scalar_t* d = dst.data<scalar_t>();
      const scalar_t* s = src.data<scalar_t>();
      const int64_t n = dst.numel();
      if (alpha == 1.0) {
        parallel_for_simd(n, 32768, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) d[i] = st<scalar_t>(ld(d[i]) + ld(s[i]));
        });
      } else {
        const A al = static_cast<A>(alpha);
        parallel_for_simd(n, 32768, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) d[i] = st<scalar_t>(ld(d[i]) + al * ld(s[i]));
        });
      }
      return;
    }
    const A al = static_cast<A>(alpha);
    map2<scalar_t, scalar_t, scalar_t>(dst, dst, src, [al](A x, A y) { return A(x + al * y); });
  });
}

void scale_kernel(Tensor& t, double s) {
  STRATA_DISPATCH_ALL16(t.dtype(), "mul_", [&] {
    using A = acc_t<scalar_t>;
    const A sv = static_cast<A>(s);
    map1<scalar_t, scalar_t>(t, t, [sv](A x) { return A(x * sv); });
  });
}

}  // namespace strata::cpu
