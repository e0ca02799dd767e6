// The Llama kernels (RMSNorm, rotary embedding, SwiGLU): forward against f64 references
// written from the formulas at every SIMD level this CPU runs, in f32 and bf16, and a
// finite-difference gradient check of each autograd node in f64.
#include <gtest/gtest.h>

#include <cmath>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/gradcheck.h>
#include <strata/core/threads.h>
#include <strata/nn/rotary.h>
#include "../simd_levels.h"
#include "test_util.h"

namespace strata {
namespace {

Tensor rnd(const Shape& s, uint64_t seed, DType dt = DType::f32, double stdev = 1.0) {
  Generator g(seed);
  return ops::normal(s, 0.0, stdev, g, dt);
}

// The f64 references.
std::vector<double> rms_ref(const std::vector<double>& x, const std::vector<double>& w, int64_t rows, int64_t c,
                            double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < c; ++i) ss += x[size_t(r * c + i)] * x[size_t(r * c + i)];
    const double rs = 1.0 / std::sqrt(ss / double(c) + eps);
    for (int64_t i = 0; i < c; ++i) y[size_t(r * c + i)] = x[size_t(r * c + i)] * rs * w[size_t(i)];
  }
  return y;
}

// Rotate-half: (x[i], x[i + hd/2]) by pos * inv_freq[i].
std::vector<double> rotary_ref(const std::vector<double>& x, const std::vector<int64_t>& pos,
                               const std::vector<double>& f, int64_t b, int64_t t, int64_t h, int64_t hd) {
  std::vector<double> y(x.size());
  const int64_t half = hd / 2;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t hi = 0; hi < h; ++hi) {
        const size_t o = size_t(((bi * t + ti) * h + hi) * hd);
        for (int64_t i = 0; i < half; ++i) {
          const double a = double(pos[size_t(ti)]) * f[size_t(i)];
          const double x1 = x[o + size_t(i)], x2 = x[o + size_t(i + half)];
          y[o + size_t(i)] = x1 * std::cos(a) - x2 * std::sin(a);
          y[o + size_t(i + half)] = x2 * std::cos(a) + x1 * std::sin(a);
        }
      }
  return y;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " element " << i;
}

TEST(LlamaOps, RmsNormMatchesF64ReferenceAtEverySimdLevel) {
  testing::SimdLevelGuard guard;
  const int64_t rows = 37, c = 67;  // odd widths: the loops' remainders
  const Tensor x = rnd({rows, c}, 1), w = rnd({c}, 2);
  const auto want = rms_ref(x.to_vector<double>(), w.to_vector<double>(), rows, c, 1e-5);
  for (const cpu::SimdLevel lvl : testing::runnable_simd_levels()) {
    ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
    expect_near_all(ops::rms_norm(x, w, 1e-5).first.to_vector<double>(), want, 1e-6, "f32");
    // bf16 storage, f32 arithmetic: one rounding of the output (2^-8 relative).
    const auto y16 = ops::rms_norm(ops::to_dtype(x, DType::bf16), ops::to_dtype(w, DType::bf16), 1e-5).first.to_vector<double>();
    const auto want16 = rms_ref(ops::to_dtype(x, DType::bf16).to_vector<double>(), ops::to_dtype(w, DType::bf16).to_vector<double>(), rows, c,
                                1e-5);
    expect_near_all(y16, want16, 1.0 / 128, "bf16");
  }
}

TEST(LlamaOps, RmsNormBackwardMatchesF64ReferenceAtEverySimdLevel) {
  testing::SimdLevelGuard guard;
  // widths for every chunk pattern of the AVX-512 rows: the tail alone, pairs of 16-lane
  // chunks with an odd one and a tail, pairs only
  for (const int64_t c : {5, 67, 128}) {
    const int64_t rows = 70;  // three row blocks of the weight-gradient partials
    const Tensor x = rnd({rows, c}, 3), w = rnd({c}, 4), dy = rnd({rows, c}, 5);
    const auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), gv = dy.to_vector<double>();
    std::vector<double> dx(xv.size()), dw(size_t(c), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0, sgx = 0;
      for (int64_t i = 0; i < c; ++i) ss += xv[size_t(r * c + i)] * xv[size_t(r * c + i)];
      const double rs = 1.0 / std::sqrt(ss / double(c) + 1e-5);
      for (int64_t i = 0; i < c; ++i) sgx += gv[size_t(r * c + i)] * wv[size_t(i)] * xv[size_t(r * c + i)] * rs;
      for (int64_t i = 0; i < c; ++i) {
        const double xh = xv[size_t(r * c + i)] * rs;
        dx[size_t(r * c + i)] = rs * (gv[size_t(r * c + i)] * wv[size_t(i)] - xh * sgx / double(c));
        dw[size_t(i)] += gv[size_t(r * c + i)] * xh;
      }
    }
    for (const cpu::SimdLevel lvl : testing::runnable_simd_levels()) {
      ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
      const std::string at = std::string(cpu::simd_level_name(lvl)) + ", c " + std::to_string(c);
      const auto [y, rstd] = ops::rms_norm(x, w, 1e-5);
      const auto [gx, gw] = ops::rms_norm_backward(dy, x, rstd, w);
      expect_near_all(gx.to_vector<double>(), dx, 2e-6, "dx at " + at);
      expect_near_all(gw.to_vector<double>(), dw, 2e-5, "dw at " + at);
      const auto [gx0, gw0] = ops::rms_norm_backward(dy, x, rstd, Tensor());
      EXPECT_FALSE(gw0.defined());
    }
  }
}

TEST(LlamaOps, RmsNormBackwardAddIsTheBackwardPlusThePendingGradientBitForBitAtEveryLevel) {
  // what the engine computes without the fusion: rms_norm_backward's dx, then pending += dx
  testing::SimdLevelGuard guard;
  for (const int64_t c : {5, 67, 128}) {
    const int64_t rows = 70;
    const Tensor x = rnd({rows, c}, 13), w = rnd({c}, 14), dy = rnd({rows, c}, 15), pending = rnd({rows, c}, 16);
    for (const cpu::SimdLevel lvl : testing::runnable_simd_levels()) {
      ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
      const std::string at = std::string(cpu::simd_level_name(lvl)) + ", c " + std::to_string(c);
      const auto [y, rstd] = ops::rms_norm(x, w, 1e-5);
      const auto [dx, dw] = ops::rms_norm_backward(dy, x, rstd, w);
      Tensor want = ops::clone(pending);
      ops::add_(want, dx);
      const auto [fresh, dw1] = ops::rms_norm_backward_add(dy, x, rstd, w, pending, /*in_place=*/false);
      EXPECT_FALSE(fresh.shares_storage(pending)) << at;
      EXPECT_EQ(fresh.to_vector<float>(), want.to_vector<float>()) << at;
      EXPECT_EQ(dw1.to_vector<float>(), dw.to_vector<float>()) << at;
      Tensor own = ops::clone(pending);
      const auto [into, dw2] = ops::rms_norm_backward_add(dy, x, rstd, w, own, /*in_place=*/true);
      EXPECT_TRUE(into.shares_storage(own)) << at;
      EXPECT_EQ(into.to_vector<float>(), want.to_vector<float>()) << at;
    }
  }
}

TEST(LlamaOps, RotaryMatchesF64ReferenceAtEverySimdLevel) {
  testing::SimdLevelGuard guard;
  const int64_t b = 2, t = 5, h = 3, hd = 10;
  const Tensor x = rnd({b, t, h, hd}, 3);
  const std::vector<int64_t> pos{0, 7, 3, 1000, 8191};  // any global positions (context parallelism's chunks)
  const Tensor p = ops::from_vector(pos, {t});
  const Tensor f = nn::rope_inv_freq(hd, 500000.0);
  const auto want = rotary_ref(x.to_vector<double>(), pos, f.to_vector<double>(), b, t, h, hd);
  for (const cpu::SimdLevel lvl : testing::runnable_simd_levels()) {
    ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
    const Tensor y = ops::rotary(x, p, f);
    expect_near_all(y.to_vector<double>(), want, 1e-6, "rotary");
    // The inverse rotation undoes it.
    expect_near_all(ops::rotary(y, p, f, true).to_vector<double>(), x.to_vector<double>(), 1e-6, "inverse");
  }
  // Position 0 is the identity; the rotation keeps each pair's norm.
  const Tensor y0 = ops::rotary(x, ops::zeros({t}, DType::i64), f);
  expect_near_all(y0.to_vector<double>(), x.to_vector<double>(), 0, "position 0");
  // Only the first rotated_heads heads turn (a packed q|k|v's q and k), the rest are copied:
  // the same bits as rotating those heads alone.
  for (const int64_t r : {0, 1, 2, 3}) {
    const Tensor part = ops::rotary(x, p, f, false, r);
    const Tensor want_r = ops::rotary(ops::contiguous(ops::narrow(x, 2, 0, r)), p, f);
    expect_near_all(ops::narrow(part, 2, 0, r).to_vector<double>(), want_r.to_vector<double>(), 0,
                    "rotated heads of " + std::to_string(r));
    expect_near_all(ops::narrow(part, 2, r, h - r).to_vector<double>(),
                    ops::narrow(x, 2, r, h - r).to_vector<double>(), 0, "copied heads after " + std::to_string(r));
  }
}

// The attention kernel turning q and k itself (causal_attention_rotary) gives the bits of
// the rotary kernel then the attention kernel, forward and backward, at every SIMD level,
// in f32 and f64, with grouped and plain key/value heads, any positions, 1 and 2 threads.
TEST(LlamaOps, RotaryInsideTheAttentionKernelEqualsTheTwoKernelsBitForBit) {
  testing::SimdLevelGuard guard;
  const int saved_threads = get_num_threads();
  const int64_t b = 3, t = 21, hd = 10;
  const std::vector<int64_t> pos{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 900};
  const Tensor p = ops::from_vector(pos, {t});
  const Tensor f = nn::rope_inv_freq(hd, 10000.0);
  for (const DType dt : {DType::f32, DType::f64})
    for (const int64_t kv : {int64_t(0), int64_t(2)}) {
      const int64_t h = 4, hkv = kv > 0 ? kv : h, heads = h + 2 * hkv;
      const Tensor qkv = rnd({b, t, heads * hd}, 7, dt), dy = rnd({b, t, h * hd}, 8, dt);
      for (const cpu::SimdLevel lvl : testing::runnable_simd_levels())
        for (const int threads : {1, 2}) {
          ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
          set_num_threads(threads);
          const std::string at = std::string(dtype_name(dt)) + " kv " + std::to_string(kv) + " level " +
                                 std::to_string(int(lvl)) + " threads " + std::to_string(threads);
          const Tensor turned =
              ops::reshape(ops::rotary(ops::reshape(qkv, {b, t, heads, hd}), p, f, false, h + hkv), {b, t, heads * hd});
          const auto [y_want, lse_want] = ops::causal_attention(turned, hd, kv);
          const auto [y, lse] = ops::causal_attention_rotary(qkv, p, f, hd, kv);
          EXPECT_EQ(y.to_vector<double>(), y_want.to_vector<double>()) << at;
          EXPECT_EQ(lse.to_vector<double>(), lse_want.to_vector<double>()) << at;
          const Tensor d_turned = ops::causal_attention_backward(dy, turned, lse_want, hd, kv);
          const Tensor d_want = ops::rotary(ops::reshape(d_turned, {b, t, heads, hd}), p, f, true, h + hkv);
          const Tensor d = ops::causal_attention_rotary_backward(dy, qkv, p, f, lse, hd, kv);
          EXPECT_EQ(d.to_vector<double>(), d_want.to_vector<double>()) << at;
        }
    }
  set_num_threads(saved_threads);
  // the autograd node: the same loss and gradient as the two differentiable ops
  Tensor x = rnd({2, 6, 8 * 4}, 9, DType::f64);  // 4 query heads and 2 key/value heads of 4
  x.set_requires_grad(true);
  const Tensor p6 = ops::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 40}, {6});
  const Tensor f4 = nn::rope_inv_freq(4, 10000.0);
  EXPECT_TRUE(testing::graph_has(causal_attention_rotary(x, p6, f4, 4, 2), "CausalAttentionRotaryBackward"));
  const GradcheckResult r =
      gradcheck([&](const std::vector<Tensor>& in) { return causal_attention_rotary(in[0], p6, f4, 4, 2); }, {x});
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_THROW((void)ops::causal_attention_rotary(x, p6, nn::rope_inv_freq(6, 10000.0), 4, 2), Error);  // hd/2 != 3
}

// Forward and backward in f32 at every SIMD level (x86-64-v4 runs the AVX-512 rows of
// cpu/act_avx512.h) against the formulas in f64; 41 columns leave a ragged tail.
TEST(LlamaOps, SwigluMatchesF64ReferenceAtEverySimdLevel) {
  testing::SimdLevelGuard guard;
  const Tensor g = rnd({3, 41}, 4, DType::f32, 4.0), u = rnd({3, 41}, 5), dy = rnd({3, 41}, 6);
  const auto gv = g.to_vector<double>(), uv = u.to_vector<double>(), dv = dy.to_vector<double>();
  std::vector<double> want(gv.size()), want_dg(gv.size()), want_du(gv.size());
  for (size_t i = 0; i < gv.size(); ++i) {
    const double s = 1 / (1 + std::exp(-gv[i]));
    want[i] = gv[i] * s * uv[i];
    want_dg[i] = dv[i] * uv[i] * s * (1 + gv[i] * (1 - s));
    want_du[i] = dv[i] * gv[i] * s;
  }
  for (const cpu::SimdLevel lvl : testing::runnable_simd_levels()) {
    ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
    const std::string at = std::string(" at ") + cpu::simd_level_name(lvl);
    expect_near_all(ops::swiglu(g, u).to_vector<double>(), want, 1e-6, "swiglu" + at);
    const auto [dg, du] = ops::swiglu_backward(dy, g, u);
    expect_near_all(dg.to_vector<double>(), want_dg, 1e-6, "swiglu dgate" + at);
    expect_near_all(du.to_vector<double>(), want_du, 1e-6, "swiglu dup" + at);
    // Far in the tails: silu(-100) = -0 (no NaN from exp's overflow), silu(100) = 100, and
    // the gradients 0 and (1, 100).
    const Tensor tails = ops::from_vector(std::vector<float>{-100.f, 100.f}, {2});
    expect_near_all(ops::swiglu(tails, ops::ones({2})).to_vector<double>(), {0.0, 100.0}, 1e-6, "tails" + at);
    const auto [tg, tu] = ops::swiglu_backward(ops::ones({2}), tails, ops::ones({2}));
    expect_near_all(tg.to_vector<double>(), {0.0, 1.0}, 1e-6, "tail dgate" + at);
    expect_near_all(tu.to_vector<double>(), {0.0, 100.0}, 1e-6, "tail dup" + at);
  }
}

TEST(LlamaOps, GradcheckRmsNormRotarySwigluInF64) {
  auto x = rnd({3, 4, 6}, 6, DType::f64);
  auto w = rnd({6}, 7, DType::f64);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-5); }, {x, w});
  EXPECT_TRUE(r.ok) << "rms_norm: " << r.message;

  auto q = rnd({2, 3, 2, 8}, 8, DType::f64);
  q.set_requires_grad(true);
  const Tensor pos = ops::from_vector(std::vector<int64_t>{4, 0, 9}, {3});
  const Tensor f = nn::rope_inv_freq(8, 10000.0, nn::RopeScaling{.factor = 4, .original_max_position_embeddings = 16});
  r = gradcheck([&](const std::vector<Tensor>& in) { return rotary(in[0], pos, f); }, {q});
  EXPECT_TRUE(r.ok) << "rotary: " << r.message;
  r = gradcheck([&](const std::vector<Tensor>& in) { return rotary(in[0], pos, f, 1); }, {q});
  EXPECT_TRUE(r.ok) << "rotary of the first head only: " << r.message;

  auto g = rnd({4, 5}, 9, DType::f64, 3.0), u = rnd({4, 5}, 10, DType::f64);
  g.set_requires_grad(true);
  u.set_requires_grad(true);
  r = gradcheck([](const std::vector<Tensor>& in) { return swiglu(in[0], in[1]); }, {g, u});
  EXPECT_TRUE(r.ok) << "swiglu: " << r.message;
}

TEST(LlamaOps, BadShapesNameTheOp) {
  const Tensor x = rnd({2, 3, 1, 5}, 11);
  EXPECT_THROW(
      {
        try {
          (void)ops::rotary(x, ops::zeros({3}, DType::i64), ops::zeros({2}, DType::f64));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("[rotary]"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  EXPECT_THROW((void)ops::swiglu(rnd({2, 3}, 1), rnd({3, 2}, 2)), Error);
  EXPECT_THROW((void)ops::rms_norm(rnd({2, 3}, 1), rnd({4}, 2), 1e-5), Error);
}

// Llama 3.1's scaling (transformers 4.46's _compute_llama3_parameters), by hand for
// head_dim 8, theta 10000, factor 8, low 1, high 4, original length 64: the base
// frequencies 1, 0.1, 0.01, 0.001 have wavelengths 6.28, 62.8, 628, 6283; the high-band
// limit is 64 / 4 = 16 and the low-band one 64 / 1 = 64.
TEST(LlamaOps, RopeInvFreqLlama3Scaling) {
  const auto base = nn::rope_inv_freq(8, 10000.0).to_vector<double>();
  ASSERT_EQ(base.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(base[size_t(i)], std::pow(10000.0, -2.0 * i / 8), 1e-15);
  const auto s = nn::rope_inv_freq(8, 10000.0, nn::RopeScaling{.factor = 8, .low_freq_factor = 1,
                                                               .high_freq_factor = 4,
                                                               .original_max_position_embeddings = 64})
                     .to_vector<double>();
  EXPECT_DOUBLE_EQ(s[0], 1.0);  // wavelength 6.28 < 16: kept
  const double wl = 2 * M_PI / 0.1, smooth = (64 / wl - 1) / (4 - 1);  // 62.8 in [16, 64]: interpolated
  EXPECT_NEAR(s[1], (1 - smooth) * 0.1 / 8 + smooth * 0.1, 1e-15);
  EXPECT_NEAR(s[2], 0.01 / 8, 1e-18);   // 628 > 64: divided by the factor
  EXPECT_NEAR(s[3], 0.001 / 8, 1e-18);
}

}  // namespace
}  // namespace strata
