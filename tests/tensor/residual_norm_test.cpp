// The fused residual add + LayerNorm kernels (ops::bias_residual_layer_norm_ and
// ops::layer_norm_backward_add) at every SIMD level this CPU runs: forward and backward
// against an f64 reference, bit for bit against the separate ops they replace
// (bias_residual_ then layer_norm; layer_norm_backward then the add), in place, without
// weight / biases, in bf16 / f16, and with the same weight / bias gradients at 1 and 2
// threads. 70 rows (three of the backward's 32-row blocks), widths 37 (a vector tail) and 128.
#include <gtest/gtest.h>

#include <cmath>

#include <strata/tensor/cpu/simd_level.h>
#include <strata/tensor/ops.h>

#include "tests/simd_levels.h"
#include "tests/threads_guard.h"

using namespace strata;

namespace {

struct Inputs {
  Tensor y, b, r, w, lb, dz, g;
};

Inputs make(int64_t rows, int64_t C, uint64_t seed, DType dt = DType::f32) {
  Generator gen(seed);
  Inputs in{ops::uniform({rows, C}, -3, 3, gen), ops::uniform({C}, -1, 1, gen), ops::uniform({rows, C}, -2, 2, gen),
            ops::uniform({C}, 0.5, 1.5, gen),    ops::uniform({C}, -1, 1, gen), ops::uniform({rows, C}, -1, 1, gen),
            ops::uniform({rows, C}, -1, 1, gen)};
  for (Tensor* t : {&in.y, &in.b, &in.r, &in.w, &in.lb, &in.dz, &in.g}) *t = ops::to_dtype(*t, dt);
  return in;
}

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << what << "[" << i << "]";
}

// f64 reference of s, z, ds, dw, db from the f32 inputs.
struct Ref {
  std::vector<double> s, z, ds, dw, db;
};
Ref reference(const Inputs& in, double eps) {
  const int64_t C = in.y.size(-1), rows = in.y.numel() / C;
  const auto y = in.y.to_vector<double>(), b = in.b.to_vector<double>(), r = in.r.to_vector<double>();
  const auto w = in.w.to_vector<double>(), lb = in.lb.to_vector<double>();
  const auto dz = in.dz.to_vector<double>(), g = in.g.to_vector<double>();
  Ref out{std::vector<double>(y.size()), std::vector<double>(y.size()), std::vector<double>(y.size()),
          std::vector<double>(size_t(C)), std::vector<double>(size_t(C))};
  for (int64_t i = 0; i < rows; ++i) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < C; ++j) mu += out.s[size_t(i * C + j)] = r[size_t(i * C + j)] + y[size_t(i * C + j)] + b[size_t(j)];
    mu /= double(C);
    for (int64_t j = 0; j < C; ++j) var += (out.s[size_t(i * C + j)] - mu) * (out.s[size_t(i * C + j)] - mu);
    const double rs = 1 / std::sqrt(var / double(C) + eps);
    double sg = 0, sgx = 0;
    for (int64_t j = 0; j < C; ++j) {
      const size_t k = size_t(i * C + j);
      const double xh = (out.s[k] - mu) * rs;
      out.z[k] = xh * w[size_t(j)] + lb[size_t(j)];
      sg += dz[k] * w[size_t(j)];
      sgx += dz[k] * w[size_t(j)] * xh;
      out.dw[size_t(j)] += dz[k] * xh;
      out.db[size_t(j)] += dz[k];
    }
    for (int64_t j = 0; j < C; ++j) {
      const size_t k = size_t(i * C + j);
      const double xh = (out.s[k] - mu) * rs;
      out.ds[k] = g[k] + rs * (dz[k] * w[size_t(j)] - sg / double(C) - xh * sgx / double(C));
    }
  }
  return out;
}

void expect_near(const Tensor& t, const std::vector<double>& ref, double tol, const std::string& what) {
  const auto v = t.to_vector<double>();
  ASSERT_EQ(v.size(), ref.size()) << what;
  for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(v[i], ref[i], tol * (1 + std::abs(ref[i]))) << what << "[" << i << "]";
}

}  // namespace

TEST(ResidualNormLevels, ForwardAndBackwardAgainstF64AndTheSeparateOps) {
  strata::testing::SimdLevelGuard guard;
  constexpr double eps = 1e-5;
  // widths for every chunk pattern of the AVX-512 rows: the tail alone (5), pairs of whole
  // 16-lane chunks and a tail (37), pairs only (128), an odd chunk after the pairs (208)
  for (int64_t C : {5, 37, 128, 208}) {
    const Inputs in = make(70, C, 11 + uint64_t(C));
    const Ref ref = reference(in, eps);
    for (cpu::SimdLevel lvl : strata::testing::runnable_simd_levels()) {
      cpu::set_simd_level(lvl);
      const std::string at = std::string(" C=") + std::to_string(C) + " at " + cpu::simd_level_name(lvl);
      Tensor s = ops::clone(in.y);
      auto [z, mean, rstd] = ops::bias_residual_layer_norm_(s, in.b, in.r, in.w, in.lb, eps);
      expect_near(s, ref.s, 1e-6, "s" + at);
      expect_near(z, ref.z, 2e-5, "z" + at);
      // the separate ops at this level, bit for bit
      Tensor s2 = ops::clone(in.y);
      ops::bias_residual_(s2, in.b, in.r);
      auto [z2, mean2, rstd2] = ops::layer_norm(s2, in.w, in.lb, eps);
      expect_same_bits(s, s2, "s" + at);
      expect_same_bits(z, z2, "z" + at);
      expect_same_bits(mean, mean2, "mean" + at);
      expect_same_bits(rstd, rstd2, "rstd" + at);

      auto [ds, dw, db] = ops::layer_norm_backward_add(in.dz, s, mean, rstd, in.w, true, in.g, false);
      expect_near(ds, ref.ds, 2e-5, "ds" + at);
      expect_near(dw, ref.dw, 2e-5, "dw" + at);
      expect_near(db, ref.db, 2e-5, "db" + at);
      auto [dx2, dw2, db2] = ops::layer_norm_backward(in.dz, s2, mean2, rstd2, in.w, true);
      Tensor ds2 = ops::clone(in.g);
      ops::add_(ds2, dx2);  // the engine's accumulation of the two gradients
      expect_same_bits(ds, ds2, "ds" + at);
      expect_same_bits(dw, dw2, "dw" + at);
      expect_same_bits(db, db2, "db" + at);
      // in place: ds written over the other gradient
      Tensor acc = ops::clone(in.g);
      auto [ds3, dw3, db3] = ops::layer_norm_backward_add(in.dz, s, mean, rstd, in.w, true, acc, true);
      EXPECT_EQ(ds3.data<float>(), acc.data<float>()) << at;
      expect_same_bits(acc, ds2, "in-place ds" + at);
    }
  }
}

TEST(ResidualNormLevels, WithoutWeightOrBiasesAndWithoutTheOtherGradient) {
  strata::testing::SimdLevelGuard guard;
  const Inputs in = make(70, 37, 3);
  for (cpu::SimdLevel lvl : strata::testing::runnable_simd_levels()) {
    cpu::set_simd_level(lvl);
    for (int mask = 0; mask < 8; ++mask) {
      const Tensor b = mask & 1 ? in.b : Tensor(), w = mask & 2 ? in.w : Tensor(), lb = mask & 4 ? in.lb : Tensor();
      const std::string at = " mask " + std::to_string(mask) + " at " + cpu::simd_level_name(lvl);
      Tensor s = ops::clone(in.y), s2 = ops::clone(in.y);
      auto [z, mean, rstd] = ops::bias_residual_layer_norm_(s, b, in.r, w, lb, 1e-5);
      ops::bias_residual_(s2, b, in.r);
      auto [z2, mean2, rstd2] = ops::layer_norm(s2, w, lb, 1e-5);
      expect_same_bits(s, s2, "s" + at);
      expect_same_bits(z, z2, "z" + at);
      auto [ds, dw, db] = ops::layer_norm_backward_add(in.dz, s, mean, rstd, w, lb.defined(), in.g, false);
      auto [dx2, dw2, db2] = ops::layer_norm_backward(in.dz, s2, mean2, rstd2, w, lb.defined());
      Tensor ds2 = ops::clone(in.g);
      ops::add_(ds2, dx2);
      expect_same_bits(ds, ds2, "ds" + at);
      EXPECT_EQ(dw.defined(), w.defined());
      EXPECT_EQ(db.defined(), lb.defined());
      if (w.defined()) expect_same_bits(dw, dw2, "dw" + at);
      if (lb.defined()) expect_same_bits(db, db2, "db" + at);
    }
  }
  // no other gradient: layer_norm_backward itself
  Tensor s = ops::clone(in.y);
  auto [z, mean, rstd] = ops::bias_residual_layer_norm_(s, in.b, in.r, in.w, in.lb, 1e-5);
  auto [ds, dw, db] = ops::layer_norm_backward_add(in.dz, s, mean, rstd, in.w, true, Tensor(), false);
  expect_same_bits(ds, std::get<0>(ops::layer_norm_backward(in.dz, s, mean, rstd, in.w, true)), "ds without g");
}

TEST(ResidualNormLevels, SixteenBitMatchesTheSeparateOps) {
  for (DType dt : {DType::bf16, DType::f16}) {
    const Inputs in = make(70, 128, 5, dt);
    Tensor s = ops::clone(in.y), s2 = ops::clone(in.y);
    auto [z, mean, rstd] = ops::bias_residual_layer_norm_(s, in.b, in.r, in.w, in.lb, 1e-5);
    EXPECT_EQ(mean.dtype(), DType::f32);
    ops::bias_residual_(s2, in.b, in.r);
    auto [z2, mean2, rstd2] = ops::layer_norm(s2, in.w, in.lb, 1e-5);
    const std::string at = std::string(" in ") + dtype_name(dt);
    expect_same_bits(s, s2, "s" + at);
    expect_same_bits(z, z2, "z" + at);
    expect_same_bits(rstd, rstd2, "rstd" + at);
    auto [ds, dw, db] = ops::layer_norm_backward_add(in.dz, s, mean, rstd, in.w, true, in.g, false);
    auto [dx2, dw2, db2] = ops::layer_norm_backward(in.dz, s2, mean2, rstd2, in.w, true);
    Tensor ds2 = ops::clone(in.g);
    ops::add_(ds2, dx2);
    expect_same_bits(ds, ds2, "ds" + at);
    expect_same_bits(dw, dw2, "dw" + at);
    expect_same_bits(db, db2, "db" + at);
  }
}

TEST(ResidualNormLevels, ParameterGradientsDoNotDependOnTheThreadCount) {
  const Inputs in = make(1000, 128, 9);
  std::vector<Tensor> got[2];
  for (int threads : {1, 2}) {
    strata::testing::ThreadsGuard tg(threads);
    Tensor s = ops::clone(in.y);
    auto [z, mean, rstd] = ops::bias_residual_layer_norm_(s, in.b, in.r, in.w, in.lb, 1e-5);
    auto [ds, dw, db] = ops::layer_norm_backward_add(in.dz, s, mean, rstd, in.w, true, in.g, false);
    got[threads - 1] = {s, z, ds, dw, db};
  }
  for (size_t k = 0; k < got[0].size(); ++k) expect_same_bits(got[0][k], got[1][k], "output " + std::to_string(k));
}

TEST(ResidualNorm, ChecksItsInputs) {
  Tensor y = ops::zeros({4, 3});
  EXPECT_THROW(ops::bias_residual_layer_norm_(y, ops::zeros({4}), ops::zeros({4, 3}), Tensor(), Tensor(), 1e-5),
               Error);  // bias width
  EXPECT_THROW(ops::bias_residual_layer_norm_(y, Tensor(), ops::zeros({4, 2}), Tensor(), Tensor(), 1e-5),
               Error);  // residual shape
  EXPECT_THROW(ops::bias_residual_layer_norm_(y, Tensor(), ops::zeros({4, 3}), ops::zeros({2}), Tensor(), 1e-5),
               Error);  // weight width
  Tensor yt = ops::transpose(ops::zeros({3, 4}), 0, 1);
  EXPECT_THROW(ops::bias_residual_layer_norm_(yt, Tensor(), ops::zeros({4, 3}), Tensor(), Tensor(), 1e-5), Error);
  auto [z, mean, rstd] = ops::bias_residual_layer_norm_(y, Tensor(), ops::zeros({4, 3}), Tensor(), Tensor(), 1e-5);
  EXPECT_THROW(ops::layer_norm_backward_add(ops::zeros({4, 3}), y, mean, rstd, Tensor(), false, ops::zeros({4, 2}),
                                            false),
               Error);  // other gradient's shape
}
