// The multi-tensor ops on the CPU: each equals the single-tensor op applied entry by entry,
// bit for bit (the CPU runs the same kernels in list order), for f32 and f64 lists with
// an empty and a one-element entry; the lists are checked and errors name the entry.
#include <gtest/gtest.h>

#include <strata/core/rng.h>
#include <strata/tensor/ops.h>

namespace strata {
namespace {

const std::vector<Shape> kShapes = {{7, 5}, {0}, {1}, {130}, {3, 4, 5}};

std::vector<Tensor> list(DType dt, uint64_t seed, double lo, double hi) {
  std::vector<Tensor> out;
  Generator g(seed);
  for (const Shape& s : kShapes) out.push_back(ops::to_dtype(ops::uniform(s, lo, hi, g), dt));
  return out;
}
std::vector<Tensor> clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(ops::clone(t));
  return out;
}
void expect_bitwise(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i].to_vector<double>(), want[i].to_vector<double>()) << what << " entry " << i;
}

TEST(MultiTensor, AdamEqualsPerTensorSteps) {
  for (DType dt : {DType::f32, DType::f64})
    for (bool decoupled : {false, true}) {
      auto p = list(dt, 1, -1, 1), g = list(dt, 2, -1, 1), m = list(dt, 3, -0.1, 0.1), v = list(dt, 4, 0, 0.1);
      auto p1 = clones(p), m1 = clones(m), v1 = clones(v);
      for (int64_t step = 1; step <= 3; ++step) {
        const ops::AdamParams ap{1e-2, 0.9, 0.999, 1e-8, 0.1, step, decoupled};
        ops::adam_step_multi_(p, g, m, v, ap);
        for (size_t i = 0; i < p1.size(); ++i) ops::adam_step_(p1[i], g[i], m1[i], v1[i], ap);
      }
      const std::string what = std::string(dtype_name(dt)) + (decoupled ? " AdamW" : " Adam");
      expect_bitwise(p, p1, what + " params");
      expect_bitwise(m, m1, what + " m");
      expect_bitwise(v, v1, what + " v");
    }
}

TEST(MultiTensor, SgdEqualsPerTensorSteps) {
  for (DType dt : {DType::f32, DType::f64})
    for (double momentum : {0.0, 0.9})
      for (bool nesterov : {false, true}) {
        if (nesterov && momentum == 0) continue;
        auto p = list(dt, 5, -1, 1), g = list(dt, 6, -1, 1), b = list(dt, 7, 0, 0);
        auto p1 = clones(p), b1 = clones(b);
        std::vector<Tensor> none;
        for (int step = 0; step < 3; ++step) {
          const ops::SgdParams sp{0.05, momentum, 0.0, 0.01, nesterov, step == 0};
          ops::sgd_step_multi_(p, g, momentum != 0 ? std::span<Tensor>(b) : std::span<Tensor>(none), sp);
          for (size_t i = 0; i < p1.size(); ++i) {
            Tensor buf = momentum != 0 ? b1[i] : Tensor();
            ops::sgd_step_(p1[i], g[i], buf, sp);
          }
        }
        const std::string what = std::string(dtype_name(dt)) + " momentum " + std::to_string(momentum) +
                                 (nesterov ? " nesterov" : "");
        expect_bitwise(p, p1, what + " params");
        if (momentum != 0) expect_bitwise(b, b1, what + " buffers");
      }
}

TEST(MultiTensor, SumSquaresAndScaleEqualPerTensorOps) {
  for (DType dt : {DType::f32, DType::f64}) {
    auto ts = list(dt, 8, -3, 3);
    double want = 0;
    for (const Tensor& t : ts) want += ops::sum_squares(t);
    EXPECT_EQ(ops::sum_squares_multi(ts), want) << dtype_name(dt);
    auto t1 = clones(ts);
    ops::mul_multi_(ts, 0.37);
    for (Tensor& t : t1) ops::mul_(t, 0.37);
    expect_bitwise(ts, t1, std::string(dtype_name(dt)) + " mul_multi_");
  }
  EXPECT_EQ(ops::sum_squares_multi(std::vector<Tensor>{}), 0.0);
}

TEST(MultiTensor, ListsAreCheckedAndErrorsNameTheEntry) {
  auto p = list(DType::f32, 1, -1, 1), g = list(DType::f32, 2, -1, 1), m = list(DType::f32, 3, 0, 1),
       v = list(DType::f32, 4, 0, 1);
  const ops::AdamParams ap{1e-2, 0.9, 0.999, 1e-8, 0.0, 1, true};
  auto expect_error = [](const std::function<void()>& f, const std::string& want) {
    try {
      f();
      ADD_FAILURE() << "no error; expected: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  std::vector<Tensor> short_v(v.begin(), v.end() - 1);
  expect_error([&] { ops::adam_step_multi_(p, g, m, short_v, ap); }, "[adam_step_multi_] 4 v for 5 params");
  std::vector<Tensor> bad_g = g;
  bad_g[3] = ops::zeros({131});
  expect_error([&] { ops::adam_step_multi_(p, bad_g, m, v, ap); }, "[adam_step_multi_] grads 3");
  std::vector<Tensor> strided = {ops::transpose(ops::zeros({3, 4}), 0, 1)};
  expect_error([&] { ops::mul_multi_(strided, 2.0); }, "[mul_multi_] entry 0 must be a contiguous tensor");
  std::vector<Tensor> ints = {ops::zeros({2}, DType::i64)};
  expect_error([&] { ops::adam_step_multi_(ints, ints, ints, ints, ap); }, "param 0 must be contiguous f32 or f64");
  std::vector<Tensor> none;
  expect_error([&] { ops::sgd_step_multi_(p, g, none, {0.1, 0.9, 0.0, 0.0, false, true}); },
               "[sgd_step_multi_] momentum 0.9 with 0 momentum buffers");
}

}  // namespace
}  // namespace strata
