// Autocast and the differentiable cast: gradients cross dtype boundaries back to the
// input's dtype, the guard is scoped and per thread, linear/matmul/conv2d compute on
// 16-bit-rounded values (checked against a double-precision reference built from the
// rounded inputs) and the f32 ops lift 16-bit inputs to f32.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include <strata/autograd/autocast.h>
#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/autograd/grad_mode.h>
#include <strata/autograd/gradcheck.h>

using namespace strata;

namespace {

Tensor rnd(const Shape& s, uint64_t seed, DType dt = DType::f32, double scale = 1.0) {
  Generator g(seed);
  return ops::normal(s, 0, scale, g, dt);
}

Tensor leaf(const Shape& s, uint64_t seed, DType dt = DType::f32) {
  Tensor t = ops::to_dtype(rnd(s, seed), dt);  // the generator draws f32/f64 only
  t.set_requires_grad(true);
  return t;
}

// t rounded to dt, as f32 values.
std::vector<float> rounded(const Tensor& t, DType dt) {
  return ops::to_dtype(ops::to_dtype(t, dt), DType::f32).to_vector<float>();
}

std::vector<float> as_f32(const Tensor& t) { return ops::to_dtype(t, DType::f32).to_vector<float>(); }

// Every element of the f32 tensor t is exactly representable in dt.
bool representable(const Tensor& t, DType dt) { return t.to_vector<float>() == rounded(t, dt); }

// y (M,N) = x (M,K) @ w(N,K)^T + b in double, from given values.
std::vector<double> ref_linear(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                               int64_t M, int64_t K, int64_t N) {
  std::vector<double> y(size_t(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = b.empty() ? 0.0 : b[size_t(j)];
      for (int64_t k = 0; k < K; ++k) s += double(x[size_t(i * K + k)]) * w[size_t(j * K + k)];
      y[size_t(i * N + j)] = s;
    }
  return y;
}

}  // namespace

// ------------------------------------------------------------------ cast

TEST(Cast, GradcheckThroughF32RoundTrip) {
  // f64 -> f32 -> f64 is the identity up to f32 rounding; its gradient is 1 (times the
  // downstream one). A coarse eps keeps the rounding noise below the tolerance.
  Generator g(1);
  Tensor x = ops::uniform({3, 4}, -2, 2, g, DType::f64);
  x.set_requires_grad(true);
  auto r = gradcheck([](const std::vector<Tensor>& in) { return square(cast(cast(in[0], DType::f32), DType::f64)); },
                     {x}, 1e-3, 1e-4, 1e-3);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Cast, F32LeafThroughBf16GetsRoundedF32Grad) {
  Tensor x = leaf({5, 7}, 2);
  Tensor c = rnd({5, 7}, 3);  // upstream gradient, not bf16-representable
  Tensor y = cast(x, DType::bf16);
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(as_f32(y).size(), 35u);
  EXPECT_EQ(as_f32(y), rounded(x, DType::bf16));
  Tensor z = cast(y, DType::f32);
  backward(sum(mul(z, c)));
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  // d/dz = c, rounded to bf16 when it crosses the bf16 tensor, then widened exactly
  EXPECT_EQ(x.grad().to_vector<float>(), rounded(c, DType::bf16));
}

TEST(Cast, SameDtypeIsIdentityAndIntegersCarryNoGradient) {
  Tensor x = leaf({3}, 4);
  Tensor same = cast(x, DType::f32);
  EXPECT_EQ(same.raw_data(), x.raw_data());
  Tensor i = cast(x, DType::i64);
  EXPECT_EQ(i.dtype(), DType::i64);
  EXPECT_FALSE(i.requires_grad());
  Tensor h = cast(x, DType::f16);
  EXPECT_TRUE(h.requires_grad());
  EXPECT_EQ(as_f32(h), rounded(x, DType::f16));
}

// ------------------------------------------------------------------ mode

TEST(Autocast, GuardNestsRestoresAndRejectsNon16Bit) {
  EXPECT_FALSE(autocast_dtype().has_value());
  {
    AutocastGuard a(DType::bf16);
    EXPECT_EQ(autocast_dtype(), DType::bf16);
    {
      AutocastGuard b(DType::f16);
      EXPECT_EQ(autocast_dtype(), DType::f16);
      {
        AutocastGuard off(std::nullopt);
        EXPECT_FALSE(autocast_dtype().has_value());
      }
      EXPECT_EQ(autocast_dtype(), DType::f16);
    }
    EXPECT_EQ(autocast_dtype(), DType::bf16);
    EXPECT_THROW(AutocastGuard bad(DType::f32), Error);
    EXPECT_EQ(autocast_dtype(), DType::bf16);
  }
  EXPECT_FALSE(autocast_dtype().has_value());
}

TEST(Autocast, ModeIsThreadLocal) {
  AutocastGuard a(DType::bf16);
  std::optional<DType> seen = DType::f16;
  Tensor other_y;
  Tensor x = rnd({4, 8}, 5), w = rnd({3, 8}, 6);
  std::thread t([&] {
    seen = autocast_dtype();
    other_y = linear(x, w, Tensor());
  });
  t.join();
  EXPECT_FALSE(seen.has_value());
  // the other thread ran linear in plain f32; this thread runs it rounded to bf16
  const auto ref = ref_linear(x.to_vector<float>(), w.to_vector<float>(), {}, 4, 8, 3);
  const auto o = other_y.to_vector<float>();
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(o[i], ref[i], 1e-5 * (1 + std::abs(ref[i])));
  Tensor y = linear(x, w, Tensor());
  EXPECT_TRUE(representable(y, DType::bf16));
  EXPECT_NE(y.to_vector<float>(), o);
}

// ------------------------------------------------------------------ lower-precision ops

TEST(Autocast, LinearRoundsInputsAndOutputAndReturnsF32Grads) {
  for (DType dt : {DType::bf16, DType::f16}) {
    const int64_t M = 6, K = 40, N = 5;
    Tensor x = leaf({2, 3, K}, 7), w = leaf({N, K}, 8), b = leaf({N}, 9);
    Tensor y;
    {
      AutocastGuard ac(dt);
      y = linear(x, w, b);
    }
    EXPECT_EQ(y.dtype(), DType::f32);
    EXPECT_EQ(y.shape(), (Shape{2, 3, N}));
    EXPECT_TRUE(representable(y, dt)) << dtype_name(dt);
    // reference: the GEMM in double on the rounded inputs, rounded once at the end
    const auto ref = ref_linear(rounded(x, dt), rounded(w, dt), rounded(b, dt), M, K, N);
    const std::vector<float> ref_f(ref.begin(), ref.end());
    const auto expect = rounded(ops::from_vector<float>(ref_f, {M, N}), dt);
    const auto got = y.to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) {
      // f32 accumulation may flip the last rounding step: at most one 16-bit ulp apart
      const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::abs(double(expect[i])), 1e-3)) -
                                             (dt == DType::bf16 ? 7 : 10));
      EXPECT_LE(std::abs(got[i] - expect[i]), ulp) << dtype_name(dt) << " element " << i;
    }
    Tensor c = rnd({2, 3, N}, 10);
    backward(sum(mul(y, c)));
    for (const Tensor* p : {&x, &w, &b}) {
      ASSERT_TRUE(p->grad().defined());
      EXPECT_EQ(p->grad().dtype(), DType::f32);
      EXPECT_TRUE(representable(p->grad(), dt)) << "gradients leave the 16-bit op rounded";
    }
    // db = sum over rows of the rounded upstream gradient
    const auto cr = rounded(c, dt), db = b.grad().to_vector<float>();
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t i = 0; i < M; ++i) s += cr[size_t(i * N + j)];
      EXPECT_NEAR(db[size_t(j)], s, 1e-2 * (1 + std::abs(s)));
    }
  }
}

TEST(Autocast, MatmulAndConv2dMatchF32WithinBf16Tolerance) {
  Tensor a = leaf({2, 4, 16}, 11), bm = leaf({16, 8}, 12);
  Tensor x = leaf({2, 3, 6, 6}, 13), w = leaf({4, 3, 3, 3}, 14), b = leaf({4}, 15);
  ops::Conv2dParams p{.pad_h = 1, .pad_w = 1};
  Tensor y32 = matmul(a, bm), c32 = strata::conv2d(x, w, b, p);
  Tensor y16, c16;
  {
    AutocastGuard ac(DType::bf16);
    y16 = matmul(a, bm);
    c16 = strata::conv2d(x, w, b, p);
  }
  for (auto [lo, hi] : {std::pair{y16, y32}, std::pair{c16, c32}}) {
    EXPECT_EQ(lo.dtype(), DType::f32);
    EXPECT_EQ(lo.shape(), hi.shape());
    EXPECT_TRUE(representable(lo, DType::bf16));
    const auto l = lo.to_vector<float>(), h = hi.to_vector<float>();
    double err = 0, nrm = 0;
    for (size_t i = 0; i < l.size(); ++i) err += (l[i] - h[i]) * double(l[i] - h[i]), nrm += double(h[i]) * h[i];
    EXPECT_LT(std::sqrt(err / nrm), 2e-2);
    EXPECT_GT(std::sqrt(err / nrm), 0.0) << "autocast changed nothing";
  }
  backward(sum(y16));
  backward(sum(c16));
  for (const Tensor* t : {&a, &bm, &x, &w, &b}) EXPECT_EQ(t->grad().dtype(), DType::f32);
}

TEST(Autocast, F64InputsAreLeftAlone) {
  Tensor a = rnd({3, 5}, 16, DType::f64), bm = rnd({5, 2}, 17, DType::f64);
  AutocastGuard ac(DType::bf16);
  Tensor y = matmul(a, bm);
  EXPECT_EQ(y.dtype(), DType::f64);
  EXPECT_EQ(y.to_vector<double>(), ops::matmul(a, bm).to_vector<double>());
}

// ------------------------------------------------------------------ f32 ops

TEST(Autocast, F32OpsLiftBf16InputsAndReturnGradsInBf16) {
  Tensor x = leaf({4, 9}, 18, DType::bf16);
  Tensor tgt = ops::from_vector<int64_t>({0, 3, 8, 2}, {4});
  Tensor xf = ops::to_dtype(x.detach(), DType::f32);  // the same values in f32
  AutocastGuard ac(DType::bf16);
  Tensor s = softmax(x, -1), ls = log_softmax(x, -1), ce = cross_entropy(x, tgt);
  Tensor ln = layer_norm(x, ops::to_dtype(ops::ones({9}), DType::bf16), ops::to_dtype(ops::zeros({9}), DType::bf16));
  for (const Tensor& t : {s, ls, ce, ln}) EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_EQ(s.to_vector<float>(), ops::softmax(xf, -1).to_vector<float>());
  EXPECT_EQ(ls.to_vector<float>(), ops::log_softmax(xf, -1).to_vector<float>());
  EXPECT_EQ(ce.item<float>(), std::get<0>(ops::cross_entropy(xf, tgt, -100)).item<float>());
  EXPECT_EQ(ln.to_vector<float>(), std::get<0>(ops::layer_norm(xf, Tensor(), Tensor(), 1e-5)).to_vector<float>());
  backward(ce);
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), DType::bf16);
  // d ce / dx = (softmax - onehot) / N, rounded to bf16
  auto p = ops::softmax(xf, -1).to_vector<float>();
  for (int64_t i : {0, 1, 2, 3}) p[size_t(i * 9 + tgt.to_vector<int64_t>()[size_t(i)])] -= 1.0f;
  for (float& v : p) v /= 4.0f;
  EXPECT_EQ(as_f32(x.grad()), rounded(ops::from_vector<float>(p, {4, 9}), DType::bf16));
}

TEST(Autocast, F32OpsKeepF32InputsUntouched) {
  Tensor x = rnd({3, 6}, 19);
  AutocastGuard ac(DType::bf16);
  Tensor s = softmax(x, -1);
  EXPECT_EQ(s.to_vector<float>(), ops::softmax(x, -1).to_vector<float>());
}

// ------------------------------------------------------------------ path choice

// CUDA runs the lower-precision ops natively on 16-bit tensors (cuBLAS / cuDNN); every
// other device emulates them on f32 copies of the rounded values.
TEST(Autocast, PathIsNativeOnCudaAndEmulatedOnTheCpu) {
  EXPECT_EQ(autocast::path_for(DeviceType::CUDA), autocast::Path::native);
  EXPECT_EQ(autocast::path_for(DeviceType::CPU), autocast::Path::emulated);
}

// On the CPU the emulated path hands the 16-bit op f32 inputs: what linear's backward
// saves and what it returns are f32, holding 16-bit values.
TEST(Autocast, CpuLinearRunsOnF32CopiesOfRoundedInputs) {
  for (DType dt : {DType::bf16, DType::f16}) {
    Tensor x = leaf({3, 16}, 20), w = leaf({4, 16}, 21);
    std::vector<Tensor> seen;
    Tensor y;
    {
      AutocastGuard ac(dt);
      y = autocast::run_low_precision({x, w}, [&](const std::vector<Tensor>& in) {
        seen = in;
        EXPECT_FALSE(autocast_dtype().has_value()) << "fn runs with autocast off";
        return linear(in[0], in[1], Tensor());
      });
    }
    ASSERT_EQ(seen.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(seen[i].dtype(), DType::f32);
      EXPECT_TRUE(representable(seen[i], dt)) << dtype_name(dt) << " input " << i;
      EXPECT_TRUE(seen[i].requires_grad()) << "the rounding is differentiable";
    }
    EXPECT_EQ(y.dtype(), DType::f32);
    EXPECT_TRUE(representable(y, dt));
  }
}

// A parameter used twice in one autocast region is cast once (the region holds one cast),
// both uses' gradients reach it through that cast, a changed parameter is cast anew, and
// the cache empties when the region ends (not when an inner guard turns autocast off).
TEST(Autocast, AParameterIsCastOncePerRegionAndItsUsesSumTheirGradients) {
  const DType dt = DType::bf16;
  Tensor w = leaf({5, 16}, 1), w_ref = ops::clone(w).set_requires_grad(true);
  const Tensor x1 = rnd({3, 16}, 2), x2 = rnd({3, 16}, 3), c1 = rnd({3, 5}, 4), c2 = rnd({3, 5}, 5);
  ASSERT_EQ(autocast::cached_casts(), 0u);
  Tensor y1, y2;
  {
    AutocastGuard ac(dt);
    y1 = linear(x1, w, Tensor());
    y2 = linear(x2, w, Tensor());
    EXPECT_EQ(autocast::cached_casts(), 1u) << "w cast once; the inputs need no grad and are not cached";
    {
      AutocastGuard off(std::nullopt);
    }
    EXPECT_EQ(autocast::cached_casts(), 1u) << "an inner guard turning autocast off keeps the region's casts";
  }
  EXPECT_EQ(autocast::cached_casts(), 0u);
  backward(add(sum(mul(y1, c1)), sum(mul(y2, c2))));
  // Reference: each use in a region of its own, so each casts w itself.
  Tensor r1, r2;
  {
    AutocastGuard ac(dt);
    r1 = linear(x1, w_ref, Tensor());
  }
  {
    AutocastGuard ac(dt);
    r2 = linear(x2, w_ref, Tensor());
  }
  backward(add(sum(mul(r1, c1)), sum(mul(r2, c2))));
  EXPECT_EQ(y1.to_vector<float>(), r1.to_vector<float>());
  EXPECT_EQ(y2.to_vector<float>(), r2.to_vector<float>());
  const auto g = w.grad().to_vector<float>(), gr = w_ref.grad().to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i)  // the sum is rounded to bf16 once here, per use there
    EXPECT_NEAR(g[i], gr[i], 1e-2 * (1 + std::abs(gr[i]))) << "element " << i;
}

TEST(Autocast, AChangedParameterIsCastAnew) {
  Tensor w = leaf({4, 8}, 6);
  const Tensor x = rnd({2, 8}, 7);
  AutocastGuard ac(DType::bf16);
  const Tensor before = linear(x, w, Tensor());
  {
    NoGradGuard no_grad;
    ops::mul_(w, 2.0);  // an optimizer step: a new version of w
  }
  const Tensor after = linear(x, w, Tensor());
  const auto b = before.to_vector<float>(), a = after.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], 2 * b[i]) << "element " << i;  // x2 is exact in bf16
  EXPECT_EQ(autocast::cached_casts(), 1u);
}

// Under autocast the fused causal attention is a 16-bit op: q, k, v rounded, the attention
// computed in f32, its output rounded (the CPU's emulated path; CUDA runs it on bf16).
TEST(Autocast, CausalAttentionRoundsItsInputAndOutput) {
  const Tensor qkv = rnd({2, 9, 3 * 2 * 8}, 21);
  Tensor y;
  {
    AutocastGuard ac(DType::bf16);
    y = causal_attention(qkv, 8);
  }
  EXPECT_EQ(y.dtype(), DType::f32);
  const Tensor rounded_in = ops::to_dtype(ops::to_dtype(qkv, DType::bf16), DType::f32);
  const Tensor want = ops::to_dtype(ops::to_dtype(causal_attention(rounded_in, 8), DType::bf16), DType::f32);
  EXPECT_EQ(y.to_vector<float>(), want.to_vector<float>());
}
