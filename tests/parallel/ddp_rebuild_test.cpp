// DDP bucket rebuild: a model registered in the opposite order to its forward gets its
// buckets laid out in the order gradients really arrive after the first synchronized
// step, so more buckets go out during backward; training stays equal to one process.
#include <gtest/gtest.h>

#include <strata/comm/local.h>
#include "equivalence.h"
#include <strata/nn/linear.h>

namespace strata::testing {
namespace {

// Forward runs a -> b -> c, but the layers are registered c, b, a: reverse registration
// order (DDP's first guess) puts a's gradients, which backward produces last, first.
class Backwards : public nn::Module {
 public:
  explicit Backwards(uint64_t seed) {
    Generator g(seed);
    c_ = register_module("c", std::make_shared<nn::Linear>(10, kClasses, g));
    b_ = register_module("b", std::make_shared<nn::Linear>(12, 10, g));
    a_ = register_module("a", std::make_shared<nn::Linear>(16, 12, g));
  }
  Tensor forward(const Tensor& x) override { return c_->forward(relu(b_->forward(relu(a_->forward(x))))); }
  std::string type_name() const override { return "Backwards"; }

 private:
  std::shared_ptr<nn::Linear> a_, b_, c_;
};

constexpr int kSteps = 4;
constexpr int64_t kBatch = 8;

// ~8-float buckets: every layer spans several.
parallel::DDPOptions small_buckets(bool view) {
  return {.bucket_cap_mb = 32.0 / 1048576, .first_bucket_mb = 32.0 / 1048576, .last_bucket_mb = 32.0 / 1048576,
          .gradient_as_bucket_view = view};
}

struct Trace {
  nn::NamedTensors state;
  std::vector<int64_t> launched_in_backward, buckets;  // per step
  std::vector<int64_t> last_param_buckets;  // per step: buckets holding the last laid-out parameter
  std::vector<std::string> first_bucket_param;          // per step: the parameter bucket 0 starts with
};

Trace train_ddp(comm::ProcessGroup& g, bool view) {
  auto m = std::make_shared<Backwards>(g.rank() == 0 ? 7 : 8);  // rank 1 starts elsewhere: the wrap broadcasts
  auto ddp = parallel::apply_ddp(m, g, small_buckets(view));
  optim::SGD opt(m->named_parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  Trace run;
  const int64_t per = kBatch / g.size();
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = make_batch("mlp", kBatch, s);
    const auto& plan = ddp->reducer().plan();
    run.first_bucket_param.push_back(ddp->reducer().param_names()[size_t(plan.buckets[0].params[0])]);
    run.last_param_buckets.push_back(int64_t(plan.param_buckets[size_t(plan.buckets.back().params.back())].size()));
    Tensor xs = ops::narrow(x, 0, g.rank() * per, per), ys = ops::narrow(y, 0, g.rank() * per, per);
    backward(cross_entropy(ddp->forward(xs), ys));
    ddp->finalize();
    run.launched_in_backward.push_back(ddp->reducer().last_stats().launched_in_backward);
    run.buckets.push_back(ddp->reducer().last_stats().buckets);
    opt.step();
    ddp->zero_grad();
  }
  run.state = m->state_dict();
  return run;
}

nn::NamedTensors train_reference() {
  auto m = std::make_shared<Backwards>(7);
  optim::SGD opt(m->named_parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = make_batch("mlp", kBatch, s);
    backward(cross_entropy(m->forward(x), y));
    opt.step();
    opt.zero_grad();
  }
  return m->state_dict();
}

TEST(DDPRebuild, MoreBucketsLaunchDuringBackwardAfterTheFirstStep) {
  const nn::NamedTensors want = train_reference();
  for (bool view : {false, true}) {
    comm::run_local(2, [&](comm::ProcessGroup& g) {
      const Trace run = train_ddp(g, view);
      const std::string ctx = std::string(view ? "bucket views" : "copies") + ", rank " + std::to_string(g.rank());
      // Step 0 runs on the guess: bucket 0 holds a's parameters, ready last, and buckets
      // launch in order, so (almost) nothing goes out before backward ends.
      EXPECT_EQ(run.first_bucket_param[0], "a.bias") << ctx;
      EXPECT_LE(run.launched_in_backward[0], 1) << ctx;
      // From step 1 on, buckets follow backward: c's gradients first, and every bucket but
      // those holding the last gradient (a's weight, ready last) is on the wire while
      // backward runs.
      for (int s = 1; s < kSteps; ++s) {
        EXPECT_EQ(run.first_bucket_param[size_t(s)].rfind("c.", 0), 0u) << ctx << " step " << s;
        EXPECT_GT(run.launched_in_backward[size_t(s)], run.launched_in_backward[0]) << ctx;
        EXPECT_EQ(run.launched_in_backward[size_t(s)], run.buckets[size_t(s)] - run.last_param_buckets[size_t(s)])
            << ctx << " step " << s;
        EXPECT_EQ(run.buckets[size_t(s)], run.buckets[0]) << ctx << ": same caps, same bucket count";
      }
      std::string worst;
      const double err = max_relative_error(run.state, want, &worst);
      EXPECT_LT(err, 1e-5) << ctx << ": worst " << worst;
    }, comm::CommOptions{.timeout_s = 30});
  }
}

// out = p(x) + q(x); `swap` builds q's branch first and adds in the other order, so
// backward reaches the two heads in the opposite order.
class Pair : public nn::Module {
 public:
  explicit Pair(bool swap) : swap_(swap) {
    Generator g(3);
    p_ = register_module("p", std::make_shared<nn::Linear>(16, kClasses, g));
    q_ = register_module("q", std::make_shared<nn::Linear>(16, kClasses, g));
  }
  Tensor forward(const Tensor& x) override {
    if (!swap_) {
      Tensor a = p_->forward(x);
      Tensor b = q_->forward(x);
      return a + b;
    }
    Tensor b = q_->forward(x);
    Tensor a = p_->forward(x);
    return b + a;
  }
  std::string type_name() const override { return "Pair"; }

 private:
  bool swap_;
  std::shared_ptr<nn::Linear> p_, q_;
};

// Slot offsets after one synchronized step of a Pair on `g`.
std::vector<int64_t> layout_after_one_step(comm::ProcessGroup& g, bool swap) {
  auto m = std::make_shared<Pair>(swap);
  auto ddp = parallel::apply_ddp(m, g, small_buckets(false));
  auto [x, y] = make_batch("mlp", 4, 0);
  backward(cross_entropy(ddp->forward(x), y));
  ddp->finalize();
  std::vector<int64_t> layout;
  for (const auto& slot : ddp->reducer().plan().slots) layout.push_back(slot.offset);
  return layout;
}

TEST(DDPRebuild, EveryRankTakesRankZerosOrder) {
  // Rank 1 sees its gradients in the opposite order to rank 0; the rebuilt buckets must
  // still be identical everywhere (else ranks would all-reduce mismatched slots), and
  // they are rank 0's.
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    const bool swap = g.rank() == 1;
    auto alone = comm::make_local_world(1);
    const std::vector<int64_t> own = layout_after_one_step(*alone[0], swap);  // this rank's own order
    const std::vector<int64_t> shared = layout_after_one_step(g, swap);
    const int64_t n = int64_t(own.size());
    const auto owns = comm::all_gather_host(g, ops::from_vector(own, {n})).to_vector<int64_t>();
    const auto shareds = comm::all_gather_host(g, ops::from_vector(shared, {n})).to_vector<int64_t>();
    const std::vector<int64_t> own0(owns.begin(), owns.begin() + n), own1(owns.begin() + n, owns.end());
    const std::vector<int64_t> shared0(shareds.begin(), shareds.begin() + n), shared1(shareds.begin() + n, shareds.end());
    EXPECT_NE(own0, own1) << "premise: the two ranks see their gradients in different orders";
    EXPECT_EQ(shared0, shared1);
    EXPECT_EQ(shared0, own0);
  }, comm::CommOptions{.timeout_s = 30});
}

}  // namespace
}  // namespace strata::testing
