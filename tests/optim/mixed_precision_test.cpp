// 16-bit model states in the optimizers: a bf16/f16 parameter gets an f32 master and f32
// state; the step runs in f32 (bit for bit the f32 optimizer fed the widened 16-bit
// gradient) and writes the master rounded to nearest even back into the parameter. The
// allocator's bytes per parameter element are exactly 2 + 2 (grad) + 4 + 8 (Adam).
#include <gtest/gtest.h>

#include <strata/core/memory.h>
#include <strata/optim/adam.h>
#include <strata/optim/sgd.h>
#include <strata/tensor/half_ops.h>
#include <strata/tensor/ops.h>
#include "tests/test_tensors.h"

using namespace strata;
using strata::testing::rnd;

namespace {

std::vector<uint16_t> bits(const Tensor& t16) {
  std::vector<uint16_t> out(size_t(t16.numel()));
  std::memcpy(out.data(), t16.raw_data(), out.size() * 2);
  return out;
}

class MixedPrecision : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Half, MixedPrecision, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Five steps of each optimizer: the master equals the f32 optimizer's parameter bit for
// bit, and the 16-bit parameter is always the master's rounding.
TEST_P(MixedPrecision, StepIsTheF32StepPlusOneRounding) {
  const DType dt = GetParam();
  using Make = std::function<std::unique_ptr<optim::Optimizer>(optim::NamedTensors)>;
  const std::vector<std::pair<std::string, Make>> makers = {
      {"AdamW", [](auto ps) { return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{.lr = 0.01}); }},
      {"Adam", [](auto ps) {
         return std::make_unique<optim::Adam>(std::move(ps), optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
       }},
      {"SGD", [](auto ps) {
         return std::make_unique<optim::SGD>(std::move(ps),
                                             optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01});
       }}};
  for (const auto& [name, make] : makers) {
    Tensor p16 = ops::to_dtype(rnd({33, 7}, DType::f32, 1), dt);
    Tensor p32 = ops::to_dtype(p16, DType::f32);
    p16.set_requires_grad(true);
    p32.set_requires_grad(true);
    auto o16 = make({{"w", p16}});
    auto o32 = make({{"w", p32}});
    ASSERT_TRUE(o16->has_masters());
    ASSERT_FALSE(o32->has_masters());
    for (int s = 0; s < 5; ++s) {
      const Tensor g16 = ops::to_dtype(rnd({33, 7}, DType::f32, 10 + uint64_t(s)), dt);
      p16.set_grad(g16);
      p32.set_grad(ops::to_dtype(g16, DType::f32));
      o16->step();
      o32->step();
      EXPECT_EQ(o16->master(0).to_vector<float>(), p32.to_vector<float>()) << name << " step " << s;
      EXPECT_EQ(bits(p16), bits(ops::to_dtype(p32, dt))) << name << " step " << s;
    }
    // the state is f32 and shaped like the parameter
    for (const auto& [sname, t] : o16->state_dict().tensors) EXPECT_EQ(t.dtype(), DType::f32) << sname;
  }
}

TEST_P(MixedPrecision, BytesPerParameterAreExactly2Plus2Plus12) {
  const DType dt = GetParam();
  const int64_t n = 4096 * 3;
  MemoryTracker& mem = cpu_memory();
  const auto cur = [&](MemCategory c) { return mem.stats(c).current; };
  const int64_t p0 = cur(MemCategory::params), g0 = cur(MemCategory::grads), o0 = cur(MemCategory::optimizer);
  Tensor p;
  {
    MemoryScope s(MemCategory::params);
    p = ops::zeros({n}, dt);
  }
  p.set_requires_grad(true);
  {
    MemoryScope s(MemCategory::grads);
    p.set_grad(ops::full({n}, 0.5, dt));
  }
  optim::AdamW opt({{"p", p}}, optim::AdamWOptions{});
  opt.step();
  EXPECT_EQ(cur(MemCategory::params) - p0, 2 * n);
  EXPECT_EQ(cur(MemCategory::grads) - g0, 2 * n);
  EXPECT_EQ(cur(MemCategory::optimizer) - o0, (4 + 8) * n) << "f32 master + two f32 moments";
}

// Checkpointed state moves between precisions: f32 moments of an f32 run load into a
// 16-bit run and back; set_weight gives the master the f32 value exactly.
TEST_P(MixedPrecision, StateAndWeightsMoveBetweenPrecisions) {
  const DType dt = GetParam();
  Tensor p32 = rnd({50}, DType::f32, 3);
  p32.set_requires_grad(true);
  optim::AdamW o32({{"w", p32}}, optim::AdamWOptions{.lr = 0.01});
  p32.set_grad(rnd({50}, DType::f32, 4));
  o32.step();

  Tensor p16 = ops::zeros({50}, dt);
  p16.set_requires_grad(true);
  optim::AdamW o16({{"w", p16}}, optim::AdamWOptions{.lr = 0.01});
  o16.load_state_dict(o32.state_dict());
  o16.set_weight("w", p32);
  EXPECT_EQ(o16.master(0).to_vector<float>(), p32.to_vector<float>());
  EXPECT_EQ(bits(p16), bits(ops::to_dtype(p32, dt)));
  // the next step from either is the same f32 step
  const Tensor g = ops::to_dtype(rnd({50}, DType::f32, 5), dt);
  p16.set_grad(g);
  p32.set_grad(ops::to_dtype(g, DType::f32));
  o16.step();
  o32.step();
  EXPECT_EQ(o16.master(0).to_vector<float>(), p32.to_vector<float>());

  // and back: the 16-bit run's f32 state loads into an f32 run
  Tensor q32 = ops::zeros({50});
  q32.set_requires_grad(true);
  optim::AdamW back({{"w", q32}}, optim::AdamWOptions{.lr = 0.01});
  back.load_state_dict(o16.state_dict());
  back.set_weight("w", o16.master(0));
  EXPECT_EQ(q32.to_vector<float>(), p32.to_vector<float>());
}

TEST(MixedPrecisionOps, RejectsMismatchedOperands) {
  Tensor master = ops::zeros({4}), p16 = ops::zeros({4}, DType::bf16), m = ops::zeros({4}), v = ops::zeros({4});
  const ops::AdamParams ap{0.1, 0.9, 0.999, 1e-8, 0, 1, true};
  Tensor g_f16 = ops::zeros({4}, DType::f16);
  EXPECT_THROW(ops::adam_step_mixed_(master, p16, g_f16, m, v, ap), Error);  // f16 grad for a bf16 param
  Tensor m16 = ops::zeros({4}, DType::bf16);
  EXPECT_THROW(ops::adam_step_mixed_(master, p16, p16, m16, v, ap), Error);  // state must be f32
  EXPECT_NO_THROW(ops::adam_step_mixed_(master, p16, p16, m, v, ap));
}

}  // namespace
