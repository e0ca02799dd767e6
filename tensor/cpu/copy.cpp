#include <strata/tensor/cpu/copy.h>

#include <cstring>

#include <strata/tensor/cpu/loops.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

// Element conversion through float for the 16-bit storage types.
template <class T> inline double load(const T* p) { return double(*p); }
template <> inline double load<Half>(const Half* p) { return half_to_float(p->bits); }
template <> inline double load<BFloat16>(const BFloat16* p) { return bf16_to_float(p->bits); }
template <class T> inline void store(T* p, double v) { *p = static_cast<T>(v); }
template <> inline void store<Half>(Half* p, double v) { p->bits = float_to_half(float(v)); }
template <> inline void store<BFloat16>(BFloat16* p, double v) { p->bits = float_to_bf16(float(v)); }

template <class D, class S>
void copy_typed(Tensor& dst, const Tensor& src) {
  const auto plan = make_plan<2>(dst.shape(), {dst.strides(), broadcast_strides(src, dst.shape())});
  D* d = static_cast<D*>(dst.raw_data());
  const S* s = static_cast<const S*>(src.raw_data());
  for_each_run<2>(plan, [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
    D* dp = d + off[0];
    const S* sp = s + off[1];
    if constexpr (std::is_same_v<D, S>) {
      if (st[0] == 1 && st[1] == 1) {
        std::memcpy(dp, sp, size_t(n) * sizeof(D));
        return;
      }
      for (int64_t i = 0; i < n; ++i) dp[i * st[0]] = sp[i * st[1]];
    } else if constexpr (std::is_arithmetic_v<D> && std::is_arithmetic_v<S>) {
      for (int64_t i = 0; i < n; ++i) dp[i * st[0]] = static_cast<D>(sp[i * st[1]]);
    } else {
      for (int64_t i = 0; i < n; ++i) store<D>(dp + i * st[0], load<S>(sp + i * st[1]));
    }
  });
}

}  // namespace

void copy_kernel(Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  visit_dtype(dst.dtype(), [&](auto d) {
    visit_dtype(src.dtype(), [&](auto s) { copy_typed<decltype(d), decltype(s)>(dst, src); });
  });
}

void fill_kernel(Tensor& t, double value) {
  if (t.numel() == 0) return;
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T v;
    store<T>(&v, value);
    const auto plan = make_plan<1>(t.shape(), {t.strides()});
    T* p = static_cast<T*>(t.raw_data());
    for_each_run<1>(plan, [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
      for (int64_t i = 0; i < n; ++i) p[off[0] + i * st[0]] = v;
    });
  });
}

namespace {
template <class G>
void random_fill(Tensor& t, G&& draw) {
  STRATA_CHECK(t.is_contiguous(), "[random] needs a contiguous tensor");
  STRATA_DISPATCH_FLOAT(t.dtype(), "random", [&] {
    scalar_t* p = t.data<scalar_t>();
    parallel_for(t.numel(), 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = scalar_t(draw(uint64_t(i)));
    });
  });
}
}  // namespace

void uniform_kernel(Tensor& t, double lo, double hi, const Generator& gen, uint64_t base) {
  random_fill(t, [&](uint64_t i) { return lo + (hi - lo) * double(gen.uniform(base, i)); });
}

void normal_kernel(Tensor& t, double mean, double std, const Generator& gen, uint64_t base) {
  random_fill(t, [&](uint64_t i) { return mean + std * double(gen.normal(base, i)); });
}

}  // namespace strata::cpu
