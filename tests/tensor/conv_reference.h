// The direct f64 convolution the conv tests compare against: forward with bias and the
// three gradients of an output gradient, each element with the sum of its terms' absolute
// values (the scale of any summation order's rounding error).
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <strata/tensor/ops.h>

namespace strata::testing {

using Vec = std::vector<double>;

struct ConvCase {
  int64_t N, C, H, W, O, kh, kw;
  ops::Conv2dParams p;
  bool bias;
  int64_t Ho() const { return (H + 2 * p.pad_h - kh) / p.stride_h + 1; }
  int64_t Wo() const { return (W + 2 * p.pad_w - kw) / p.stride_w + 1; }
};

// A result and, per element, the sum of the absolute values of its terms (the scale of
// the rounding error of any summation order).
struct Value {
  Vec v, abs;
  explicit Value(size_t n = 0) : v(n), abs(n) {}
  void add(size_t i, double term) {
    v[i] += term;
    abs[i] += std::abs(term);
  }
};

struct Reference {
  Value y, dx, dw, db;
};

// Direct convolution in double: y, and dx, dw, db for the output gradient dy.
inline Reference direct_conv(const ConvCase& c, const Vec& x, const Vec& w, const Vec& b, const Vec& dy) {
  const int64_t Ho = c.Ho(), Wo = c.Wo();
  Reference r{Value(size_t(c.N * c.O * Ho * Wo)), Value(x.size()), Value(w.size()), Value(size_t(c.O))};
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t o = 0; o < c.O; ++o)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const size_t yi = size_t(((n * c.O + o) * Ho + oh) * Wo + ow);
          if (c.bias) r.y.add(yi, b[size_t(o)]);
          r.db.add(size_t(o), dy[yi]);
          for (int64_t ci = 0; ci < c.C; ++ci)
            for (int64_t i = 0; i < c.kh; ++i)
              for (int64_t j = 0; j < c.kw; ++j) {
                const int64_t ih = oh * c.p.stride_h - c.p.pad_h + i, iw = ow * c.p.stride_w - c.p.pad_w + j;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const size_t xi = size_t(((n * c.C + ci) * c.H + ih) * c.W + iw);
                const size_t wi = size_t(((o * c.C + ci) * c.kh + i) * c.kw + j);
                r.y.add(yi, x[xi] * w[wi]);
                r.dx.add(xi, dy[yi] * w[wi]);
                r.dw.add(wi, dy[yi] * x[xi]);
              }
        }
  return r;
}

// An f32 sum of n terms in any order is off by at most about n * 2^-24 * sum |term|;
// blocked and pairwise orders stay far below that, so 2e-6 * sum |term| holds for the
// ~50,000-term weight gradients of these tests with room, and catches any wrong term
// (f64 results: pass rel 1e-12).
inline void expect_close(const Tensor& got, const Value& want, const std::string& what, double rel = 2e-6) {
  const Vec g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.v.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want.v[i], rel * want.abs[i] + rel / 2) << what << " element " << i;
}

}  // namespace strata::testing
