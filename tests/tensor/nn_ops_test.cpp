// Neural-network and optimizer raw ops against naive reference loops written here
// (direct convolution and pooling, per-row softmax/norm formulas in double, explicit
// Jacobians for the norm backwards, torch.optim's update rules), in f32 and f64, at
// odd sizes with padding, stride 2 and batch 3.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include <strata/core/threads.h>
#include <strata/tensor/cpu/op_profile.h>
#include <strata/tensor/ops.h>
#include "conv_reference.h"
#include "tests/simd_levels.h"
#include "tests/test_tensors.h"

using namespace strata;

namespace {

using strata::testing::Vec;

using strata::testing::rnd;

double tol_for(DType dt) { return dt == DType::f64 ? 1e-10 : 2e-5; }

void expect_close(const Vec& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " element " << i;
}

void expect_close(const Tensor& got, const Vec& want, double tol, const std::string& what) {
  expect_close(got.to_vector<double>(), want, tol, what);
}

class NnOps : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Float, NnOps, ::testing::Values(DType::f32, DType::f64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---------------------------------------------------------------- addmm

// bias + a @ b^T (a linear layer's forward, b the (out, in) weight seen transposed) in
// double; the bias a strided view too (every other element of a longer vector).
TEST_P(NnOps, AddmmIsBiasPlusTheProduct) {
  const DType dt = GetParam();
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{3, 5, 7}, {70, 130, 96}, {256, 128, 384}}) {
    const Tensor a = rnd({m, k}, dt, 1), w = rnd({n, k}, dt, 2);
    const Tensor long_bias = rnd({2 * n}, dt, 3);
    for (const Tensor& bias : {ops::narrow(long_bias, 0, 0, n), ops::slice(long_bias, 0, 0, 2 * n, 2)}) {
      const Vec av = a.to_vector<double>(), wv = w.to_vector<double>(), bv = bias.to_vector<double>();
      Vec want(size_t(m * n));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = bv[size_t(j)];
          for (int64_t q = 0; q < k; ++q) acc += av[size_t(i * k + q)] * wv[size_t(j * k + q)];
          want[size_t(i * n + j)] = acc;
        }
      const Tensor y = ops::addmm(bias, a, ops::transpose(w, 0, 1));
      ASSERT_EQ(y.shape(), (Shape{m, n}));
      expect_close(y, want, tol_for(dt) * double(k) / 8, "addmm " + std::to_string(m) + "x" + std::to_string(n));
    }
  }
  EXPECT_THROW(ops::addmm(rnd({4}, dt, 1), rnd({2, 3}, dt, 1), rnd({3, 5}, dt, 1)), Error);
}

// ---------------------------------------------------------------- softmax

// softmax / log_softmax of (outer, n, inner) over the middle dim, in double.
Vec ref_softmax(const Vec& x, int64_t outer, int64_t n, int64_t inner, bool log) {
  Vec y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t k) { return size_t((o * n + k) * inner + j); };
      double mx = -INFINITY, s = 0;
      for (int64_t k = 0; k < n; ++k) mx = std::max(mx, x[at(k)]);
      for (int64_t k = 0; k < n; ++k) s += std::exp(x[at(k)] - mx);
      for (int64_t k = 0; k < n; ++k) y[at(k)] = log ? x[at(k)] - mx - std::log(s) : std::exp(x[at(k)] - mx) / s;
    }
  return y;
}

// dx_j = sum_i dy_i dy_i/dx_j with the full Jacobian of softmax (p_i (d_ij - p_j))
// or log_softmax (d_ij - p_j), p the probabilities.
Vec ref_softmax_backward(const Vec& dy, const Vec& x, int64_t outer, int64_t n, int64_t inner, bool log) {
  const Vec p = ref_softmax(x, outer, n, inner, false);
  Vec dx(x.size(), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t k) { return size_t((o * n + k) * inner + j); };
      for (int64_t a = 0; a < n; ++a)
        for (int64_t i = 0; i < n; ++i) {
          const double delta = i == a ? 1.0 : 0.0;
          const double jac = log ? delta - p[at(a)] : p[at(i)] * (delta - p[at(a)]);
          dx[at(a)] += dy[at(i)] * jac;
        }
    }
  return dx;
}

TEST_P(NnOps, SoftmaxAndLogSoftmaxEveryDim) {
  const DType dt = GetParam();
  const Shape s{3, 5, 70};  // the last dim crosses a 64-wide tile
  Tensor x = rnd(s, dt, 1, 3.0);
  Tensor dy = rnd(s, dt, 2);
  const Vec xv = x.to_vector<double>(), dyv = dy.to_vector<double>();
  for (int64_t dim : {0, 1, 2, -1}) {
    const int64_t d = dim < 0 ? dim + 3 : dim;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < d; ++i) outer *= s[size_t(i)];
    for (int64_t i = d + 1; i < 3; ++i) inner *= s[size_t(i)];
    const int64_t n = s[size_t(d)];
    for (bool log : {false, true}) {
      const std::string what = std::string(log ? "log_softmax" : "softmax") + " dim " + std::to_string(dim);
      Tensor y = log ? ops::log_softmax(x, dim) : ops::softmax(x, dim);
      expect_close(y, ref_softmax(xv, outer, n, inner, log), tol_for(dt), what);
      Tensor dx = log ? ops::log_softmax_backward(dy, y, dim) : ops::softmax_backward(dy, y, dim);
      expect_close(dx, ref_softmax_backward(dyv, xv, outer, n, inner, log), 5 * tol_for(dt), what + " backward");
    }
  }
}

TEST(NnOpsSoftmax, StridedInputLargeLogitsAndMaskedEntries) {
  // a transposed (non-contiguous) view, logits around 1000 (no overflow), -inf entries give exactly 0
  Tensor base = rnd({9, 4}, DType::f32, 3, 1.0);
  Tensor x = ops::transpose(base, 0, 1);  // (4, 9)
  Vec xv = x.to_vector<double>();
  for (auto& v : xv) v += 1000;
  xv[2] = -INFINITY;
  Tensor xl = ops::from_vector<float>(std::vector<float>(xv.begin(), xv.end()), {4, 9});
  Tensor y = ops::softmax(xl, 1);
  const Vec yv = y.to_vector<double>();
  EXPECT_EQ(yv[2], 0.0);
  expect_close(yv, ref_softmax(xv, 4, 9, 1, false), 2e-5, "large logits");
  Tensor ys = ops::softmax(x, 1);
  expect_close(ys, ref_softmax(x.to_vector<double>(), 4, 9, 1, false), 2e-5, "strided");
  EXPECT_THROW(ops::softmax(x, 2), Error);
}

// ---------------------------------------------------------------- layer norm

TEST_P(NnOps, LayerNormForwardBackward) {
  const DType dt = GetParam();
  // 87 rows: several of the backward's row blocks, the last one partial
  const int64_t rows = 3 * 29, C = 37;
  Tensor x = rnd({3, 29, C}, dt, 4, 2.0);
  Tensor w = rnd({C}, dt, 5), b = rnd({C}, dt, 6), dy = rnd({3, 29, C}, dt, 7);
  const Vec xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>(),
            dyv = dy.to_vector<double>();
  const double eps = 1e-5;
  Vec y(xv.size()), mean(rows), rstd(rows), dx(xv.size(), 0.0), dw(C, 0.0), db(C, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < C; ++i) m += xv[size_t(r * C + i)] / double(C);
    for (int64_t i = 0; i < C; ++i) v += std::pow(xv[size_t(r * C + i)] - m, 2) / double(C);
    const double rs = 1 / std::sqrt(v + eps);
    mean[size_t(r)] = m;
    rstd[size_t(r)] = rs;
    auto xh = [&](int64_t i) { return (xv[size_t(r * C + i)] - m) * rs; };
    for (int64_t i = 0; i < C; ++i) y[size_t(r * C + i)] = xh(i) * wv[size_t(i)] + bv[size_t(i)];
    // Jacobian: dy_i/dx_j = w_i * rstd * (d_ij - 1/C - xh_i xh_j / C)
    for (int64_t j = 0; j < C; ++j)
      for (int64_t i = 0; i < C; ++i)
        dx[size_t(r * C + j)] += dyv[size_t(r * C + i)] * wv[size_t(i)] * rs *
                                 ((i == j ? 1.0 : 0.0) - 1.0 / double(C) - xh(i) * xh(j) / double(C));
    for (int64_t i = 0; i < C; ++i) {
      dw[size_t(i)] += dyv[size_t(r * C + i)] * xh(i);
      db[size_t(i)] += dyv[size_t(r * C + i)];
    }
  }
  const double tol = dt == DType::f64 ? 1e-10 : 1e-4;
  auto [yt, mt, rt] = ops::layer_norm(x, w, b, eps);
  expect_close(yt, y, tol, "y");
  expect_close(mt, mean, tol, "mean");
  expect_close(rt, rstd, tol, "rstd");
  auto [dxt, dwt, dbt] = ops::layer_norm_backward(dy, x, mt, rt, w, true);
  expect_close(dxt, dx, tol, "dx");
  expect_close(dwt, dw, tol, "dw");
  expect_close(dbt, db, tol, "db");
  {  // the weight/bias gradients are summed in an order that does not depend on the threads
    const int saved = get_num_threads();
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      auto [dxn, dwn, dbn] = ops::layer_norm_backward(dy, x, mt, rt, w, true);
      EXPECT_EQ(dwn.to_vector<double>(), dwt.to_vector<double>()) << threads << " threads";
      EXPECT_EQ(dbn.to_vector<double>(), dbt.to_vector<double>()) << threads << " threads";
    }
    set_num_threads(saved);
  }

  // no affine parameters: y is xhat, no dw/db
  auto [y0, m0, r0] = ops::layer_norm(x, Tensor(), Tensor(), eps);
  auto [dx0, dw0, db0] = ops::layer_norm_backward(dy, x, m0, r0, Tensor(), false);
  EXPECT_FALSE(dw0.defined());
  EXPECT_FALSE(db0.defined());
  const Vec y0v = y0.to_vector<double>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < C; ++i)
      ASSERT_NEAR(y0v[size_t(r * C + i)], (xv[size_t(r * C + i)] - mean[size_t(r)]) * rstd[size_t(r)], tol * 10);
  EXPECT_THROW(ops::layer_norm(x, rnd({C + 1}, dt, 1), Tensor(), eps), Error);
}

// ---------------------------------------------------------------- batch norm

struct BnRef {
  Vec y, dx, dw, db, rm, rv, mean, invstd;
};

// x (N, C, S) in double; training uses batch stats, eval the given running stats.
BnRef ref_batch_norm(const Vec& x, const Vec& dy, const Vec& w, const Vec& b, Vec rm, Vec rv, int64_t N, int64_t C,
                     int64_t S, bool training, double mom, double eps) {
  BnRef r;
  r.y.assign(x.size(), 0);
  r.dx.assign(x.size(), 0);
  r.dw.assign(size_t(C), 0);
  r.db.assign(size_t(C), 0);
  r.mean.assign(size_t(C), 0);
  r.invstd.assign(size_t(C), 0);
  const int64_t M = N * S;
  auto at = [&](int64_t n, int64_t c, int64_t s) { return size_t((n * C + c) * S + s); };
  for (int64_t c = 0; c < C; ++c) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) m += x[at(n, c, s)] / double(M);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) v += std::pow(x[at(n, c, s)] - m, 2) / double(M);
    if (!training) {
      m = rm[size_t(c)];
      v = rv[size_t(c)];
    } else {
      rm[size_t(c)] = (1 - mom) * rm[size_t(c)] + mom * m;
      rv[size_t(c)] = (1 - mom) * rv[size_t(c)] + mom * v * double(M) / double(M - 1);
    }
    const double inv = 1 / std::sqrt(v + eps);
    r.mean[size_t(c)] = m;
    r.invstd[size_t(c)] = inv;
    // flattened positions of the channel
    std::vector<size_t> pos;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) pos.push_back(at(n, c, s));
    for (size_t i : pos) {
      const double xh = (x[i] - m) * inv;
      r.y[i] = xh * w[size_t(c)] + b[size_t(c)];
      r.dw[size_t(c)] += dy[i] * xh;
      r.db[size_t(c)] += dy[i];
    }
    // Jacobian: training dy_i/dx_j = w inv (d_ij - 1/M - xh_i xh_j / M); eval w inv d_ij
    for (size_t j : pos)
      for (size_t i : pos) {
        const double d = i == j ? 1.0 : 0.0;
        const double xi = (x[i] - m) * inv, xj = (x[j] - m) * inv;
        const double jac = training ? d - 1.0 / double(M) - xi * xj / double(M) : d;
        r.dx[j] += dy[i] * w[size_t(c)] * inv * jac;
      }
  }
  r.rm = rm;
  r.rv = rv;
  return r;
}

TEST_P(NnOps, BatchNormTrainingAndEvalOn4dAnd2d) {
  const DType dt = GetParam();
  const double tol = dt == DType::f64 ? 1e-10 : 1e-4;
  for (const Shape& s : {Shape{3, 4, 5, 3}, Shape{7, 5}}) {
    const int64_t N = s[0], C = s[1], S = shape_numel(s) / (N * C);
    Tensor x = rnd(s, dt, 11, 2.0), dy = rnd(s, dt, 12);
    Tensor w = rnd({C}, dt, 13), b = rnd({C}, dt, 14);
    Tensor rm = rnd({C}, dt, 15), rv = ops::full({C}, 1.5, dt);
    const Vec rm0 = rm.to_vector<double>(), rv0 = rv.to_vector<double>();
    for (bool training : {true, false}) {
      const std::string what = shape_str(s) + (training ? " train" : " eval");
      const Vec rmb = rm.to_vector<double>(), rvb = rv.to_vector<double>();
      const BnRef ref = ref_batch_norm(x.to_vector<double>(), dy.to_vector<double>(), w.to_vector<double>(),
                                       b.to_vector<double>(), rmb, rvb, N, C, S, training, 0.1, 1e-5);
      const uint32_t v0 = rm.version();
      auto [y, sm, si] = ops::batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5);
      expect_close(y, ref.y, tol, what + " y");
      expect_close(sm, ref.mean, tol, what + " save_mean");
      expect_close(si, ref.invstd, tol, what + " save_invstd");
      expect_close(rm, ref.rm, tol, what + " running_mean");
      expect_close(rv, ref.rv, tol, what + " running_var");
      EXPECT_EQ(rm.version() != v0, training) << what;
      auto [dx, dw, db] = ops::batch_norm_backward(dy, x, w, sm, si, training);
      expect_close(dx, ref.dx, tol, what + " dx");
      expect_close(dw, ref.dw, tol, what + " dw");
      expect_close(db, ref.db, tol, what + " db");
    }
    EXPECT_NE(rm.to_vector<double>(), rm0);
    EXPECT_NE(rv.to_vector<double>(), rv0);
  }
  Tensor rm, rv;  // training without running stats is allowed; eval is not
  Tensor x = rnd({4, 3}, dt, 1);
  EXPECT_NO_THROW(ops::batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5));
  EXPECT_THROW(ops::batch_norm(x, Tensor(), Tensor(), rm, rv, false, 0.1, 1e-5), Error);
  Tensor one = rnd({1, 3}, dt, 1);
  EXPECT_THROW(ops::batch_norm(one, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5), Error);
}

// ---------------------------------------------------------------- batch norm + ReLU (+ pool)

namespace {

// Whether two tensors hold the same bytes (bit for bit, NaNs and signed zeros included).
bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.raw_data(), b.raw_data(), size_t(a.nbytes())) == 0;
}

// Normal values in dtype dt (drawn in f64: the generator has no 16-bit dtypes).
Tensor rnd_as(const Shape& s, DType dt, uint64_t seed) { return ops::to_dtype(rnd(s, DType::f64, seed), dt); }

// A fused batch norm case's parameters: the affine ones (undefined without affine) and two
// equal pairs of running statistics, one for the fused op (1) and one for the ops it replaces (0).
struct BnParams {
  Tensor w, b, rm1, rv1, rm0, rv0;
};

// fn(dtype, shape, params, what) at every runnable SIMD level (set while fn runs), in every
// floating dtype, for each shape, with and without the affine parameters (drawn from seed,
// seed + 1; the running mean from seed + 2); `what` names the case in failure messages.
template <class F>
void for_each_bn_case(std::initializer_list<Shape> shapes, uint64_t seed, F&& fn) {
  const strata::testing::SimdLevelGuard guard;
  for (const cpu::SimdLevel lvl : strata::testing::runnable_simd_levels())
    for (const DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
      for (const Shape& s : shapes)
        for (const bool affine : {true, false}) {
          ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
          const int64_t C = s[1];
          BnParams p;
          if (affine) p.w = rnd_as({C}, dt, seed), p.b = rnd_as({C}, dt, seed + 1);
          p.rm1 = rnd_as({C}, dt, seed + 2), p.rv1 = ops::full({C}, 1.5, dt);
          p.rm0 = ops::clone(p.rm1), p.rv0 = ops::clone(p.rv1);
          const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s) + (affine ? "" : " no affine") +
                                   " " + cpu::simd_level_name(lvl);
          fn(dt, s, p, what);
        }
}

}  // namespace

// BatchNorm + ReLU in one pass (the CPU kernels batch_norm_relu and its backward) against
// batch_norm then relu, and relu_backward then batch_norm_backward: bit for bit at every
// SIMD level in every floating dtype, training and eval, with and without the affine
// parameters, with a NaN in one channel (ReLU's rule maps it to 0 and the statistics carry it).
TEST(NnOpsBatchNorm, ReluInTheSamePassIsTheTwoOpsBitForBit) {
  {  // one pass each way: the fused kernels run, and no separate ReLU
    namespace prof = cpu::op_profile;
    const Tensor x = rnd({2, 3, 4, 4}, DType::f32, 30), dy = rnd({2, 3, 4, 4}, DType::f32, 36);
    Tensor rm, rv;
    const int threads = get_num_threads();
    set_num_threads(1);  // scopes are recorded on the calling thread
    prof::start();
    auto [y, sm, si] = ops::batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5, true);
    (void)ops::batch_norm_backward(dy, x, Tensor(), sm, si, true, y);
    prof::stop();
    set_num_threads(threads);
    std::vector<std::string> names;
    for (const prof::Stat& st : prof::results()) names.push_back(st.name);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"batch_norm_relu", "batch_norm_relu_backward"}));
  }
  for_each_bn_case(
      {Shape{3, 4, 5, 7}, Shape{9, 5}, Shape{2, 3, 33, 33}}, 33,
      [](DType dt, const Shape& s, BnParams& p, const std::string& where) {
        std::vector<double> xv = rnd(s, DType::f64, 31, 2.0).to_vector<double>();
        xv[xv.size() / 2] = std::numeric_limits<double>::quiet_NaN();
        const Tensor x = ops::to_dtype(ops::from_vector<double>(xv, s), dt);
        const Tensor dy = rnd_as(s, dt, 32);
        const Tensor &w = p.w, &b = p.b;
        for (const bool training : {true, false}) {
          const std::string what = where + (training ? " train" : " eval");
          auto [y1, sm1, si1] = ops::batch_norm(x, w, b, p.rm1, p.rv1, training, 0.1, 1e-5, true);
          auto [y0, sm0, si0] = ops::batch_norm(x, w, b, p.rm0, p.rv0, training, 0.1, 1e-5);
          const Tensor r0 = ops::unary(ops::UnaryOp::relu, y0);
          EXPECT_TRUE(same_bytes(y1, r0)) << what << " y";
          EXPECT_TRUE(same_bytes(sm1, sm0) && same_bytes(si1, si0)) << what << " saved statistics";
          EXPECT_TRUE(same_bytes(p.rm1, p.rm0) && same_bytes(p.rv1, p.rv0)) << what << " running statistics";
          const Vec yv = y1.to_vector<double>();
          EXPECT_GT(std::count(yv.begin(), yv.end(), 0.0), int64_t(yv.size()) / 4) << what;
          EXPECT_GT(std::count_if(yv.begin(), yv.end(), [](double v) { return v > 0; }), int64_t(yv.size()) / 4)
              << what;
          auto [dx1, dw1, db1] = ops::batch_norm_backward(dy, x, w, sm1, si1, training, y1);
          auto [dx0, dw0, db0] = ops::batch_norm_backward(ops::relu_backward(dy, r0), x, w, sm0, si0, training);
          EXPECT_TRUE(same_bytes(dx1, dx0)) << what << " dx";
          EXPECT_TRUE(same_bytes(dw1, dw0) && same_bytes(db1, db0)) << what << " dw, db";
        }
      });
}

// BatchNorm, ReLU and a 2x2 stride-2 max pool in one pass (batch_norm_relu_max_pool2 and its
// backward) against the ops one after another: the pooled values bit for bit, each max's
// place equal to max_pool2d's index, dx, dw and db bit for bit; every SIMD level (f32 planes up
// to 32 wide take the AVX-512 rows at x86-64-v4, wider ones the generic loops), every floating
// dtype, training and eval, odd sizes (a row and column in no window), ties (x on a few values,
// and windows the ReLU makes all 0), a NaN channel.
TEST(NnOpsBatchNorm, ReluAndMaxPoolInTheSamePassAreTheThreeOpsBitForBit) {
  int64_t zero_windows = 0, positive_windows = 0;  // windows the ReLU made all 0 (ties), and the others
  for_each_bn_case(
      {Shape{3, 4, 6, 8}, Shape{2, 3, 7, 9}, Shape{2, 2, 28, 28}, Shape{5, 2, 2, 3}, Shape{2, 3, 5, 35}}, 43,
      [&](DType dt, const Shape& s, BnParams& p, const std::string& where) {
        const int64_t N = s[0], C = s[1], H = s[2], W = s[3], Ho = H / 2, Wo = W / 2;
        std::vector<double> xv = rnd(s, DType::f64, 41, 2.0).to_vector<double>();
        for (size_t i = 0; i < xv.size(); i += 2) xv[i] = std::round(xv[i]);          // ties
        if (C > 2) xv[size_t(H * W + 3)] = std::numeric_limits<double>::quiet_NaN();  // channel 1 of sample 0
        const Tensor x = ops::to_dtype(ops::from_vector<double>(xv, s), dt);
        const Tensor dp = rnd_as({N, C, Ho, Wo}, dt, 42);
        const Tensor &w = p.w, &b = p.b;
        for (const bool training : {true, false}) {
          const std::string what = where + (training ? " train" : " eval");
          auto [p1, win, sm1, si1] = ops::batch_norm_relu_max_pool2(x, w, b, p.rm1, p.rv1, training, 0.1, 1e-5);
          auto [y0, sm0, si0] = ops::batch_norm(x, w, b, p.rm0, p.rv0, training, 0.1, 1e-5);
          const Tensor r0 = ops::unary(ops::UnaryOp::relu, y0);
          auto [p0, idx] = ops::max_pool2d(r0, ops::Pool2dParams{2, 2, 2, 2, 0, 0});
          ASSERT_TRUE(same_bytes(p1, p0)) << what << " pooled values";
          EXPECT_TRUE(same_bytes(sm1, sm0) && same_bytes(si1, si0)) << what << " saved statistics";
          EXPECT_TRUE(same_bytes(p.rm1, p.rm0) && same_bytes(p.rv1, p.rv0)) << what << " running statistics";
          const std::vector<uint8_t> wv = win.to_vector<uint8_t>();
          const std::vector<int64_t> iv = idx.to_vector<int64_t>();
          for (size_t j = 0; j < iv.size(); ++j) {
            const int64_t oh = int64_t(j) / Wo % Ho, ow = int64_t(j) % Wo;
            ASSERT_EQ((2 * oh + wv[j] / 2) * W + 2 * ow + wv[j] % 2, iv[j]) << what << " window " << j;
          }
          const Vec pv = p1.to_vector<double>();
          zero_windows += std::count(pv.begin(), pv.end(), 0.0);
          positive_windows += std::count_if(pv.begin(), pv.end(), [](double v) { return v > 0; });
          auto [dx1, dw1, db1] = ops::batch_norm_relu_max_pool2_backward(dp, p1, win, x, w, sm1, si1, training);
          const Tensor dr = ops::max_pool2d_backward(dp, idx, s);
          auto [dx0, dw0, db0] = ops::batch_norm_backward(ops::relu_backward(dr, r0), x, w, sm0, si0, training);
          EXPECT_TRUE(same_bytes(dx1, dx0)) << what << " dx";
          EXPECT_TRUE(same_bytes(dw1, dw0) && same_bytes(db1, db0)) << what << " dw, db";
        }
      });
  EXPECT_GT(zero_windows, 100);
  EXPECT_GT(positive_windows, 100);
  Tensor rm, rv;
  EXPECT_THROW(
      ops::batch_norm_relu_max_pool2(rnd({2, 3, 1, 4}, DType::f32, 1), Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5),
      Error);  // no 2x2 window
}

// ---------------------------------------------------------------- conv2d

using strata::testing::ConvCase;

TEST_P(NnOps, Conv2dMatchesDirectLoops) {
  const DType dt = GetParam();
  const std::vector<ConvCase> cases = {
      {3, 2, 7, 6, 4, 3, 2, {2, 1, 1, 0}, true},   // non-square kernel, stride (2,1), pad (1,0)
      {3, 3, 9, 8, 5, 3, 3, {2, 2, 1, 1}, false},  // stride 2, pad 1, no bias
      {3, 4, 5, 7, 6, 1, 1, {1, 1, 0, 0}, true},   // pointwise: no im2col
      {2, 3, 4, 4, 2, 4, 4, {1, 1, 0, 0}, true},   // kernel covers the input: 1x1 output
      {3, 8, 50, 50, 3, 3, 3, {1, 1, 1, 1}, true},  // big planes: samples split in groups of 2 + 1
  };
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const ConvCase& k = cases[ci];
    Tensor x = rnd({k.N, k.C, k.H, k.W}, dt, 20 + ci);
    Tensor w = rnd({k.O, k.C, k.kh, k.kw}, dt, 40 + ci, 0.5);
    Tensor b = k.bias ? rnd({k.O}, dt, 60 + ci) : Tensor();
    const int64_t Ho = k.Ho(), Wo = k.Wo();
    Tensor dy = rnd({k.N, k.O, Ho, Wo}, dt, 80 + ci);
    const strata::testing::Reference ref = strata::testing::direct_conv(
        k, x.to_vector<double>(), w.to_vector<double>(), k.bias ? b.to_vector<double>() : Vec{}, dy.to_vector<double>());
    const Vec &y = ref.y.v, &dx = ref.dx.v, &dw = ref.dw.v, &db = ref.db.v;
    const std::string what = "conv case " + std::to_string(ci);
    const double tol = dt == DType::f64 ? 1e-10 : 1e-4;
    Tensor yt = ops::conv2d(x, w, b, k.p);
    ASSERT_EQ(yt.shape(), (Shape{k.N, k.O, Ho, Wo})) << what;
    expect_close(yt, y, tol, what + " y");
    auto [dxt, dwt, dbt] = ops::conv2d_backward(dy, x, w, k.bias, k.p);
    expect_close(dxt, dx, tol, what + " dx");
    expect_close(dwt, dw, tol, what + " dw");
    EXPECT_EQ(dbt.defined(), k.bias) << what;
    if (k.bias) expect_close(dbt, db, tol, what + " db");
  }
}

TEST(NnOpsConv, StridedInputAndErrors) {
  Tensor base = rnd({3, 6, 5, 2}, DType::f64, 1);
  Tensor x = ops::permute(base, {0, 3, 1, 2});  // (3,2,6,5) non-contiguous
  Tensor w = rnd({4, 2, 3, 3}, DType::f64, 2);
  const ops::Conv2dParams p{1, 2, 1, 1};
  const Vec got = ops::conv2d(x, w, Tensor(), p).to_vector<double>();
  const Vec want = ops::conv2d(ops::contiguous(x), w, Tensor(), p).to_vector<double>();
  EXPECT_EQ(got, want);
  EXPECT_THROW(ops::conv2d(x, rnd({4, 3, 3, 3}, DType::f64, 3), Tensor(), p), Error);  // channel mismatch
  EXPECT_THROW(ops::conv2d(x, rnd({4, 2, 9, 3}, DType::f64, 3), Tensor(), {}), Error);  // kernel > input
}

// ---------------------------------------------------------------- pooling

TEST_P(NnOps, PoolingMatchesDirectLoops) {
  const DType dt = GetParam();
  const int64_t N = 3, C = 2, H = 7, W = 6;
  for (const ops::Pool2dParams& p : {ops::Pool2dParams{3, 3, 2, 2, 1, 1}, ops::Pool2dParams{2, 2, 2, 2, 0, 0},
                                     ops::Pool2dParams{3, 2, 2, 1, 1, 0}}) {
    const int64_t Ho = (H + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1;
    const int64_t Wo = (W + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1;
    Tensor x = rnd({N, C, H, W}, dt, 90);
    Tensor dy = rnd({N, C, Ho, Wo}, dt, 91);
    const Vec xv = x.to_vector<double>(), dyv = dy.to_vector<double>();
    Vec ymax, yavg, dxmax(xv.size(), 0), dxavg(xv.size(), 0);
    std::vector<int64_t> imax;
    for (int64_t pl = 0; pl < N * C; ++pl)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double best = -INFINITY, sum = 0;
          int64_t bi = -1;
          for (int64_t i = 0; i < p.kernel_h; ++i)
            for (int64_t j = 0; j < p.kernel_w; ++j) {
              const int64_t ih = oh * p.stride_h - p.pad_h + i, iw = ow * p.stride_w - p.pad_w + j;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;  // padding: 0 for avg, never the max
              const double v = xv[size_t(pl * H * W + ih * W + iw)];
              sum += v;
              if (v > best) best = v, bi = ih * W + iw;
            }
          const double g = dyv[size_t((pl * Ho + oh) * Wo + ow)];
          ymax.push_back(best);
          imax.push_back(bi);
          dxmax[size_t(pl * H * W + bi)] += g;
          yavg.push_back(sum / double(p.kernel_h * p.kernel_w));  // count_include_pad
          for (int64_t i = 0; i < p.kernel_h; ++i)
            for (int64_t j = 0; j < p.kernel_w; ++j) {
              const int64_t ih = oh * p.stride_h - p.pad_h + i, iw = ow * p.stride_w - p.pad_w + j;
              if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                dxavg[size_t(pl * H * W + ih * W + iw)] += g / double(p.kernel_h * p.kernel_w);
            }
        }
    const double tol = tol_for(dt);
    auto [y, idx] = ops::max_pool2d(x, p);
    ASSERT_EQ(y.shape(), (Shape{N, C, Ho, Wo}));
    expect_close(y, ymax, tol, "max y");
    EXPECT_EQ(idx.dtype(), DType::i64);
    EXPECT_EQ(idx.to_vector<int64_t>(), imax);
    expect_close(ops::max_pool2d_backward(dy, idx, x.shape()), dxmax, tol, "max dx");
    expect_close(ops::avg_pool2d(x, p), yavg, tol, "avg y");
    expect_close(ops::avg_pool2d_backward(dy, x.shape(), p), dxavg, tol, "avg dx");
  }
  EXPECT_THROW(ops::max_pool2d(rnd({1, 1, 4, 4}, dt, 1), {2, 2, 2, 2, 2, 0}), Error);  // pad > kernel/2
}

TEST(NnOpsPool, MaxPoolTiesAndNaNInFastAndGeneralPaths) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // plane 4x4: window (0,0) has a tie (first wins), window (0,1) a NaN (NaN wins)
  Tensor x = ops::from_vector<float>({5, 5, 1, nan,  //
                                      1, 5, 2, 3,    //
                                      0, 0, 0, 0,    //
                                      0, 0, 0, -1},
                                     {1, 1, 4, 4});
  for (const ops::Pool2dParams& p : {ops::Pool2dParams{2, 2, 2, 2, 0, 0}, ops::Pool2dParams{2, 3, 2, 2, 0, 1}}) {
    auto [y, idx] = ops::max_pool2d(x, p);
    const auto yv = y.to_vector<float>();
    const auto iv = idx.to_vector<int64_t>();
    EXPECT_EQ(yv[0], 5.f);
    EXPECT_EQ(iv[0], 0);  // first of the tied maxima
    EXPECT_TRUE(std::isnan(yv[1]));
    EXPECT_EQ(iv[1], 3);
  }
}

// The 2x2 stride-2 max pool at every SIMD level (f32 planes up to 32 wide take the AVX-512
// rows at x86-64-v4) against the direct loop: values bit for bit and indices, with ties
// (the first wins), NaNs (a NaN wins), infinities, odd sizes and widths past one vector.
TEST(NnOpsPool, MaxPool2x2EveryLevelMatchesTheDirectLoop) {
  const strata::testing::SimdLevelGuard guard;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const auto& [H, W] : std::vector<std::pair<int64_t, int64_t>>{
           {2, 2}, {3, 3}, {7, 7}, {14, 14}, {28, 28}, {5, 17}, {4, 30}, {6, 31}, {4, 32}, {4, 33}, {3, 64}}) {
    const int64_t P = 5, Ho = H / 2, Wo = W / 2;
    std::vector<float> xv = rnd({P, 1, H, W}, DType::f32, 140 + uint64_t(H * W)).to_vector<float>();
    for (size_t i = 0; i < xv.size(); i += 3) xv[i] = float(int(xv[i] * 2));  // ties: few distinct values
    for (size_t i = 5; i < xv.size(); i += 23) xv[i] = nan;
    for (size_t i = 7; i < xv.size(); i += 31) xv[i] = (i % 2) ? inf : -inf;
    Tensor x = ops::from_vector<float>(xv, {P, 1, H, W});
    std::vector<float> want_y;
    std::vector<int64_t> want_i;
    for (int64_t pl = 0; pl < P; ++pl)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          int64_t best = 2 * oh * W + 2 * ow;
          for (const int64_t at : {best + 1, best + W, best + W + 1}) {
            const float v = xv[size_t(pl * H * W + at)], m = xv[size_t(pl * H * W + best)];
            if (v > m || (std::isnan(v) && !std::isnan(m))) best = at;
          }
          want_y.push_back(xv[size_t(pl * H * W + best)]);
          want_i.push_back(best);
        }
    for (const cpu::SimdLevel lvl : strata::testing::runnable_simd_levels()) {
      ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
      const std::string at = std::to_string(H) + " x " + std::to_string(W) + ", " + cpu::simd_level_name(lvl);
      auto [y, idx] = ops::max_pool2d(x, ops::Pool2dParams{2, 2, 2, 2, 0, 0});
      ASSERT_EQ(idx.to_vector<int64_t>(), want_i) << at;
      const std::vector<float> yv = y.to_vector<float>();
      ASSERT_EQ(yv.size(), want_y.size()) << at;
      for (size_t i = 0; i < yv.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(yv[i]), std::bit_cast<uint32_t>(want_y[i])) << at << " element " << i;
    }
  }
}

// ---------------------------------------------------------------- embedding

TEST_P(NnOps, EmbeddingGatherAndScatterAdd) {
  const DType dt = GetParam();
  const int64_t V = 7, D = 5;
  Tensor w = rnd({V, D}, dt, 100);
  const std::vector<int64_t> ids{3, 0, 6, 3, 3, 1};  // repeats accumulate
  const Vec wv = w.to_vector<double>();
  for (DType it : {DType::i64, DType::i32}) {
    Tensor idx = ops::to_dtype(ops::from_vector<int64_t>(ids, {2, 3}), it);
    Tensor y = ops::embedding(w, idx);
    ASSERT_EQ(y.shape(), (Shape{2, 3, D}));
    Vec want;
    for (int64_t i : ids)
      for (int64_t d = 0; d < D; ++d) want.push_back(wv[size_t(i * D + d)]);
    expect_close(y, want, 0, "embedding");
    Tensor dy = rnd({2, 3, D}, dt, 101);
    const Vec dyv = dy.to_vector<double>();
    Vec dw(size_t(V * D), 0);
    for (size_t r = 0; r < ids.size(); ++r)
      for (int64_t d = 0; d < D; ++d) dw[size_t(ids[r] * D + d)] += dyv[r * size_t(D) + size_t(d)];
    expect_close(ops::embedding_backward(dy, idx, V), dw, tol_for(dt), "embedding backward");
  }
  EXPECT_THROW(ops::embedding(w, ops::from_vector<int64_t>({7}, {1})), Error);
  EXPECT_THROW(ops::embedding(w, ops::from_vector<int64_t>({-1}, {1})), Error);
}

// ---------------------------------------------------------------- cross-entropy

TEST_P(NnOps, CrossEntropyWithIgnoreIndex) {
  const DType dt = GetParam();
  const int64_t N = 6, C = 11;
  Tensor logits = rnd({N, C}, dt, 110, 3.0);
  const std::vector<int64_t> tg{2, -100, 10, 0, -100, 5};
  Tensor target = ops::from_vector<int64_t>(tg, {N});
  const Vec lv = logits.to_vector<double>();
  const Vec p = ref_softmax(lv, N, C, 1, false);
  double loss = 0;
  int count = 0;
  const double dl = 0.7;
  Vec dlog(size_t(N * C), 0);
  for (int64_t r = 0; r < N; ++r) {
    if (tg[size_t(r)] == -100) continue;
    ++count;
    loss -= std::log(p[size_t(r * C + tg[size_t(r)])]);
  }
  loss /= count;
  for (int64_t r = 0; r < N; ++r) {
    if (tg[size_t(r)] == -100) continue;
    for (int64_t c = 0; c < C; ++c)
      dlog[size_t(r * C + c)] = dl / count * (p[size_t(r * C + c)] - (c == tg[size_t(r)] ? 1.0 : 0.0));
  }
  auto [l, probs] = ops::cross_entropy(logits, target, -100);
  EXPECT_EQ(l.numel(), 1);
  EXPECT_NEAR(l.item<double>(), loss, tol_for(dt) * 10);
  expect_close(probs, p, tol_for(dt), "probs");
  Tensor dlt = ops::cross_entropy_backward(ops::full({}, dl, dt), probs, target, -100);
  expect_close(dlt, dlog, tol_for(dt), "dlogits");

  // every target ignored: loss 0 and zero gradient
  Tensor all_ignored = ops::full({N}, -1, DType::i64);
  auto [l0, p0] = ops::cross_entropy(logits, all_ignored, -1);
  EXPECT_EQ(l0.item<double>(), 0.0);
  for (double v : ops::cross_entropy_backward(ops::ones({}, dt), p0, all_ignored, -1).to_vector<double>())
    EXPECT_EQ(v, 0.0);
  EXPECT_THROW(ops::cross_entropy(logits, ops::full({N}, C, DType::i64), -100), Error);
}

TEST(NnOpsCrossEntropy, StableForHugeLogits) {
  Tensor logits = ops::from_vector<float>({1000.f, 0.f, -1000.f, 50.f, 51.f, 52.f}, {2, 3});
  Tensor target = ops::from_vector<int64_t>({1, 2}, {2});
  auto [l, p] = ops::cross_entropy(logits, target, -100);
  // row 0: lse = 1000 -> loss 1000; row 1: lse = 52 + log(1 + e^-1 + e^-2) -> loss lse - 52
  const double want = (1000.0 + std::log(1 + std::exp(-1.0) + std::exp(-2.0))) / 2;
  EXPECT_NEAR(l.item<double>(), want, 1e-3);
  for (float v : p.to_vector<float>()) EXPECT_TRUE(std::isfinite(v));
}

// ---------------------------------------------------------------- dropout

TEST_P(NnOps, DropoutMaskScaleAndThreadIndependence) {
  const DType dt = GetParam();
  const double p = 0.3;
  Tensor x = rnd({257, 129}, dt, 120);  // odd size: the last Philox block is partial
  Generator g1(42);
  const int prev = get_num_threads();
  set_num_threads(1);
  auto [y1, m1] = ops::dropout(x, p, g1);
  set_num_threads(2);
  Generator g2(42);
  auto [y2, m2] = ops::dropout(x, p, g2);
  set_num_threads(prev);
  EXPECT_EQ(m1.to_vector<uint8_t>(), m2.to_vector<uint8_t>());
  EXPECT_EQ(g1.offset(), g2.offset());
  EXPECT_EQ(g1.offset(), uint64_t((x.numel() + 3) / 4));
  const Vec xv = x.to_vector<double>(), yv = y1.to_vector<double>();
  const auto mv = m1.to_vector<uint8_t>();
  // the mask follows the generator: element i is kept iff uniform(0, i) >= p
  Generator ref(42);
  int64_t kept = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    ASSERT_EQ(mv[i], ref.uniform(0, i) >= float(p) ? 1 : 0) << i;
    kept += mv[i];
    ASSERT_NEAR(yv[i], mv[i] ? xv[i] / (1 - p) : 0.0, tol_for(dt) * (1 + std::abs(xv[i])));
  }
  const double frac = double(kept) / double(xv.size());
  EXPECT_NEAR(frac, 1 - p, 0.01);
  Tensor dy = rnd(x.shape(), dt, 121);
  const Vec dyv = dy.to_vector<double>(), dxv = ops::dropout_backward(dy, m1, p).to_vector<double>();
  for (size_t i = 0; i < dyv.size(); ++i) ASSERT_NEAR(dxv[i], mv[i] ? dyv[i] / (1 - p) : 0.0, 1e-5 * (1 + std::abs(dyv[i])));
  // a second draw from the same generator gives a different mask
  auto [y3, m3] = ops::dropout(x, p, g1);
  EXPECT_NE(m3.to_vector<uint8_t>(), mv);
  // p = 1 drops everything (no inf/nan)
  auto [yz, mz] = ops::dropout(x, 1.0, g1);
  for (double v : yz.to_vector<double>()) ASSERT_EQ(v, 0.0);
  EXPECT_THROW(ops::dropout(x, 1.5, g1), Error);
}

// Every SIMD level (f32 at x86-64-v4 runs the intrinsics rows, 16 Philox blocks a vector):
// the mask is the generator's at each element, y and dx are x * scale (or +0) to the bit,
// at sizes around the 64-element groups and the 128-element steps, from a counter whose low
// word wraps inside a group, split over one and two threads.
TEST(NnOpsDropout, EveryLevelDrawsTheGeneratorsMaskAndScalesExactly) {
  const strata::testing::SimdLevelGuard guard;
  const int prev = get_num_threads();
  const double p = 0.375;
  const float scale = float(1.0 / (1.0 - p));
  for (const int64_t n : {int64_t(1), int64_t(3), int64_t(63), int64_t(64), int64_t(65), int64_t(127),
                          int64_t(128), int64_t(129), int64_t(1000), int64_t(70001)}) {
    for (const uint64_t offset : {uint64_t(0), (uint64_t(1) << 32) - 7}) {
      Tensor x = rnd({n}, DType::f32, 130 + uint64_t(n));
      Tensor dy = rnd({n}, DType::f32, 131 + uint64_t(n));
      const std::vector<float> xv = x.to_vector<float>(), dyv = dy.to_vector<float>();
      Generator ref(7);
      ref.set_state(7, offset);
      std::vector<uint8_t> want(size_t(n), 0);
      for (int64_t i = 0; i < n; ++i) want[size_t(i)] = ref.uniform(offset, uint64_t(i)) >= float(p);
      for (const cpu::SimdLevel lvl : strata::testing::runnable_simd_levels()) {
        ASSERT_EQ(cpu::set_simd_level(lvl), lvl);
        for (const int threads : {1, 2}) {
          set_num_threads(threads);
          const std::string at = "n " + std::to_string(n) + ", offset " + std::to_string(offset) + ", " +
                                 cpu::simd_level_name(lvl) + ", " + std::to_string(threads) + " thread(s)";
          Generator g(7);
          g.set_state(7, offset);
          auto [y, mask] = ops::dropout(x, p, g);
          EXPECT_EQ(g.offset(), offset + uint64_t((n + 3) / 4)) << at;
          ASSERT_EQ(mask.to_vector<uint8_t>(), want) << at;
          const std::vector<float> yv = y.to_vector<float>();
          const std::vector<float> dxv = ops::dropout_backward(dy, mask, p).to_vector<float>();
          for (int64_t i = 0; i < n; ++i) {
            const size_t k = size_t(i);
            ASSERT_EQ(std::bit_cast<uint32_t>(yv[k]), std::bit_cast<uint32_t>(want[k] ? xv[k] * scale : 0.0f))
                << at << " y element " << i;
            ASSERT_EQ(std::bit_cast<uint32_t>(dxv[k]), std::bit_cast<uint32_t>(want[k] ? dyv[k] * scale : 0.0f))
                << at << " dx element " << i;
          }
        }
      }
    }
  }
  set_num_threads(prev);
}

// ---------------------------------------------------------------- optimizers

TEST_P(NnOps, AdamAndAdamWMatchTorchFormulasOverThreeSteps) {
  const DType dt = GetParam();
  const int64_t n = 1031;
  for (bool decoupled : {false, true}) {
    Tensor w = rnd({n}, dt, 130), m = ops::zeros({n}, dt), v = ops::zeros({n}, dt);
    Vec wr = w.to_vector<double>(), mr(size_t(n), 0), vr(size_t(n), 0);
    const double lr = 1e-2, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
    for (int64_t step = 1; step <= 3; ++step) {
      Tensor g = rnd({n}, dt, 140 + uint64_t(step));
      const Vec gv = g.to_vector<double>();
      for (size_t i = 0; i < size_t(n); ++i) {
        double gi = gv[i];
        if (decoupled)
          wr[i] *= 1 - lr * wd;
        else
          gi += wd * wr[i];
        mr[i] = b1 * mr[i] + (1 - b1) * gi;
        vr[i] = b2 * vr[i] + (1 - b2) * gi * gi;
        const double mhat = mr[i] / (1 - std::pow(b1, double(step)));
        const double vhat = vr[i] / (1 - std::pow(b2, double(step)));
        wr[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      }
      ops::adam_step_(w, g, m, v, {lr, b1, b2, eps, wd, step, decoupled});
    }
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    expect_close(w, wr, tol, decoupled ? "adamw param" : "adam param");
    expect_close(m, mr, tol, "m");
    expect_close(v, vr, tol, "v");
  }
}

TEST_P(NnOps, SgdMatchesTorchFormulasOverThreeSteps) {
  const DType dt = GetParam();
  const int64_t n = 517;
  struct Cfg {
    double momentum, dampening, wd;
    bool nesterov;
  };
  for (const Cfg& c : {Cfg{0, 0, 0, false}, Cfg{0, 0, 0.01, false}, Cfg{0.9, 0.1, 0.01, false},
                       Cfg{0.9, 0, 0.05, true}}) {
    Tensor w = rnd({n}, dt, 150);
    Tensor buf = c.momentum != 0 ? ops::zeros({n}, dt) : Tensor();
    Vec wr = w.to_vector<double>(), br(size_t(n), 0);
    const double lr = 0.05;
    for (int step = 1; step <= 3; ++step) {
      Tensor g = rnd({n}, dt, 160 + uint64_t(step));
      const Vec gv = g.to_vector<double>();
      for (size_t i = 0; i < size_t(n); ++i) {
        double d = gv[i] + c.wd * wr[i];
        if (c.momentum != 0) {
          br[i] = step == 1 ? d : c.momentum * br[i] + (1 - c.dampening) * d;
          d = c.nesterov ? d + c.momentum * br[i] : br[i];
        }
        wr[i] -= lr * d;
      }
      ops::sgd_step_(w, g, buf, {lr, c.momentum, c.dampening, c.wd, c.nesterov, step == 1});
    }
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    expect_close(w, wr, tol, "sgd param");
    if (c.momentum != 0) expect_close(buf, br, tol, "sgd buf");
  }
  Tensor w = rnd({4}, dt, 1), g = rnd({4}, dt, 2), none;
  EXPECT_THROW(ops::sgd_step_(w, g, none, {0.1, 0.9, 0, 0, false, true}), Error);  // momentum needs a buffer
  EXPECT_THROW(ops::sgd_step_(w, rnd({5}, dt, 3), none, {0.1, 0, 0, 0, false, true}), Error);
}

}  // namespace

TEST(CausalMask, MarksTheFuturePositions) {
  const Tensor m = ops::causal_mask(3);
  EXPECT_EQ(m.shape(), (Shape{3, 3}));
  EXPECT_EQ(m.dtype(), DType::u8);
  EXPECT_EQ(m.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1, 0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(ops::causal_mask(0).numel(), 0);
}
