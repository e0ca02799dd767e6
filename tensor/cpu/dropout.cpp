// Dropout: each Philox block gives the keep decisions of 4 consecutive elements,
// and blocks are split over threads, so the mask is the same for any thread count. f32 at
// x86-64-v4 runs the intrinsics rows of dropout_avx512.h (the same bits).
#include <strata/tensor/cpu/dropout.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <strata/tensor/cpu/act_avx512.h>
#include <strata/tensor/cpu/dropout_avx512.h>
#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/cpu/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

template <class A>
A keep_scale(double p) {
  return p < 1 ? A(1.0 / (1.0 - p)) : A(0);
}

constexpr int64_t kLanes = 16;  // Philox blocks computed side by side (vectorised)

// words[k][l] = word k of Generator::block(c0 + l), for l < kLanes.
void philox_lanes(const Generator& gen, uint64_t c0, uint32_t words[4][kLanes]) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t x0[kLanes], x1[kLanes], x2[kLanes], x3[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) {
    const uint64_t c = c0 + uint64_t(l);
    x0[l] = uint32_t(c);
    x1[l] = uint32_t(c >> 32);
    x2[l] = 0;
    x3[l] = 0;
  }
  uint32_t k0 = uint32_t(gen.seed()), k1 = uint32_t(gen.seed() >> 32);
  for (int r = 0; r < 10; ++r) {
#pragma omp simd
    for (int64_t l = 0; l < kLanes; ++l) {
      const uint64_t p0 = uint64_t(kM0) * x0[l];
      const uint64_t p1 = uint64_t(kM1) * x2[l];
      const uint32_t n0 = uint32_t(p1 >> 32) ^ x1[l] ^ k0, n2 = uint32_t(p0 >> 32) ^ x3[l] ^ k1;
      x1[l] = uint32_t(p1);
      x3[l] = uint32_t(p0);
      x0[l] = n0;
      x2[l] = n2;
    }
    k0 += kW0;
    k1 += kW1;
  }
  for (int64_t l = 0; l < kLanes; ++l) {
    words[0][l] = x0[l];
    words[1][l] = x1[l];
    words[2][l] = x2[l];
    words[3][l] = x3[l];
  }
}

template <class T>
void dropout_impl(const T* x, T* y, uint8_t* mask, int64_t n, double p, const Generator& gen, uint64_t base) {
  // keep iff Generator::to_unit(word) = (word >> 8) * 2^-24 >= float(p), i.e. (word >> 8) >= ceil(float(p) * 2^24)
  const uint32_t threshold = uint32_t(std::ceil(double(float(p)) * 16777216.0));
  using A = acc_t<T>;
  const A scale = keep_scale<A>(p);
  const int64_t blocks = (n + 3) / 4, groups = (blocks + kLanes - 1) / kLanes;
  if constexpr (std::is_same_v<T, float>) {
    if (avx512_rows()) {
      const uint64_t seed = gen.seed();
      parallel_for(groups, 64, [=](int64_t b, int64_t e) {
        const int64_t i0 = b * kLanes * 4, len = std::min(n, e * kLanes * 4) - i0;
        dropout_row_avx512(x + i0, y + i0, mask + i0, len, seed, base + uint64_t(b * kLanes), threshold, scale);
      });
      return;
    }
  }
  parallel_for_simd(groups, 64, [&, threshold, scale](int64_t b, int64_t e) {
    uint32_t words[4][kLanes], elem[4 * kLanes];
    for (int64_t gi = b; gi < e; ++gi) {
      philox_lanes(gen, base + uint64_t(gi * kLanes), words);
      for (int64_t l = 0; l < kLanes; ++l)  // element 4l+k of the group is word k of block l
        for (int64_t k = 0; k < 4; ++k) elem[4 * l + k] = words[k][l];
      const int64_t i0 = gi * kLanes * 4, len = std::min(n - i0, kLanes * 4);
      const T* xg = x + i0;
      T* yg = y + i0;
      uint8_t* mg = mask + i0;
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) {
        const bool keep = (elem[j] >> 8) >= threshold;
        mg[j] = keep;
        yg[j] = st<T>(keep ? ld(xg[j]) * scale : A(0));
      }
    }
  });
}

template <class T>
void dropout_backward_impl(const T* dy, const uint8_t* mask, T* dx, int64_t n, double p) {
  using A = acc_t<T>;
  const A scale = keep_scale<A>(p);
  if constexpr (std::is_same_v<T, float>) {
    if (avx512_rows()) {
      parallel_for(n, 32768, [=](int64_t b, int64_t e) {
        dropout_backward_row_avx512(dy + b, mask + b, dx + b, e - b, scale);
      });
      return;
    }
  }
  // by value: captured by reference, the pointers and the scale were reloaded after every
  // store (dx might alias them) and the loop ran scalar
  parallel_for_simd(n, 32768, [=](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) dx[i] = st<T>(mask[i] ? ld(dy[i]) * scale : A(0));
  });
}

}  // namespace

void dropout_kernel(const Tensor& x, Tensor& y, Tensor& mask, double p, const Generator& gen, uint64_t base) {
  if (x.numel() == 0) return;
  STRATA_DISPATCH_FLOAT16(x.dtype(), "dropout", [&] {
    dropout_impl<scalar_t>(x.data<scalar_t>(), y.data<scalar_t>(), mask.data<uint8_t>(), x.numel(), p, gen, base);
  });
}

void dropout_backward_kernel(const Tensor& dy, const Tensor& mask, Tensor& dx, double p) {
  if (dy.numel() == 0) return;
  STRATA_DISPATCH_FLOAT16(dy.dtype(), "dropout_backward", [&] {
    dropout_backward_impl<scalar_t>(dy.data<scalar_t>(), mask.data<uint8_t>(), dx.data<scalar_t>(), dy.numel(), p);
  });
}

}  // namespace strata::cpu
