// Shared helpers of the CUDA tests: the GPU-availability skip, CPU<->CUDA tensor
// comparison with per-dtype tolerances, and random inputs.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <strata/core/rng.h>
#include <strata/tensor/ops.h>
#ifdef STRATA_WITH_CUDA
#include <strata/tensor/cuda/runtime.h>
#endif

namespace strata::test {

inline constexpr Device kGpu{DeviceType::CUDA, 0};

/// t moved to kGpu (an undefined tensor stays undefined).
inline Tensor gpu(const Tensor& t) { return t.defined() ? t.to(kGpu) : t; }

/// Skips the test unless a CUDA device is visible (always skips in CPU-only builds).
#ifdef STRATA_WITH_CUDA
#define STRATA_REQUIRE_GPU()                                                                       \
  do {                                                                                             \
    if (::strata::cuda::device_count() == 0)                                                       \
      GTEST_SKIP() << "no CUDA device visible: " << ::strata::cuda::unavailable_reason();          \
  } while (0)
#else
#define STRATA_REQUIRE_GPU() GTEST_SKIP() << "no CUDA device visible: this build has no CUDA support"
#endif

/// Absolute + relative tolerance per dtype for results computed by different
/// algorithms (summation order, libm vs polynomial transcendental functions).
struct Tol {
  double abs, rel;
};
inline Tol tol_for(DType t) {
  switch (t) {
    case DType::f64: return {1e-12, 1e-10};
    case DType::f32: return {1e-5, 1e-4};
    case DType::bf16: return {1e-2, 2e-2};
    case DType::f16: return {2e-3, 4e-3};
    default: return {0, 0};
  }
}

/// Expects `got` (any device) to equal `want` (any device) in shape, dtype and values
/// within tol (NaN matches NaN; infinities must match exactly).
inline void expect_close(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  ASSERT_EQ(shape_str(got.shape()), shape_str(want.shape())) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double a = g[i], b = w[i];
    const bool ok = (std::isnan(a) && std::isnan(b)) || a == b ||
                    (std::isfinite(a) && std::isfinite(b) && std::abs(a - b) <= tol.abs + tol.rel * std::abs(b));
    if (!ok && bad++ < 5) ADD_FAILURE() << what << ": element " << i << " is " << a << ", expected " << b;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.size() << " elements differ";
}
inline void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  expect_close(got, want, tol_for(want.dtype()), what);
}

// max |got - want| <= frac max |want|, part by part of the packed (B, T, parts x C) tensors
// (the q, k and v gradients differ in scale): 16-bit results against f32 on the same
// rounded inputs, the error relative to the part's largest value.
inline void expect_within_scaled(const Tensor& got, const Tensor& want, int parts, double frac, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const int64_t C = want.size(2) / parts;
  for (int p = 0; p < parts; ++p) {
    const auto g = ops::contiguous(ops::narrow(ops::to_dtype(got, DType::f64), 2, p * C, C)).to_vector<double>();
    const auto w = ops::contiguous(ops::narrow(ops::to_dtype(want, DType::f64), 2, p * C, C)).to_vector<double>();
    double peak = 0, err = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      peak = std::max(peak, std::abs(w[i]));
      err = std::max(err, std::isfinite(g[i]) ? std::abs(g[i] - w[i]) : INFINITY);
    }
    EXPECT_LE(err, frac * peak) << what << " part " << p << ": max error " << err << " against max |value| " << peak;
  }
}

/// a and b equal element for element (same shape, same values; -0 == 0).
inline void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>()) << what;
}

/// Uniform [lo, hi) values of `dtype` (integers: floor) on the CPU from a fixed seed.
inline Tensor rand_cpu(const Shape& shape, DType dtype, uint64_t seed, double lo = -2.0, double hi = 2.0) {
  Generator gen(seed);
  Tensor f = ops::uniform(shape, lo, hi, gen, DType::f64);
  if (dtype == DType::f64) return f;
  if (dtype == DType::i32 || dtype == DType::i64 || dtype == DType::u8) {
    std::vector<double> v = f.to_vector<double>();
    for (double& x : v) x = std::floor(x);
    f = ops::from_vector(v, shape);
  }
  return ops::to_dtype(f, dtype);
}

}  // namespace strata::test
