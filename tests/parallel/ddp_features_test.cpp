// DDP behaviour beyond plain equivalence: wrap-time broadcast, unused parameters (the
// error that names them, and find_unused_parameters), misuse errors, broadcast_buffers,
// no_sync silence, buckets launched while backward runs, memory categories and uneven
// data with DistributedSampler.
#include <gtest/gtest.h>

#include <strata/comm/local.h>
#include <strata/core/memory.h>
#include <strata/data/sampler.h>
#include "equivalence.h"
#include <strata/nn/linear.h>
#include <strata/nn/normalization.h>

namespace strata::testing {
namespace {

comm::CommOptions quick() { return comm::CommOptions{.timeout_s = 30}; }

// trunk -> head_a or head_b (chosen per call); head_c is never used.
class Branchy : public nn::Module {
 public:
  explicit Branchy(uint64_t seed) {
    Generator g(seed);
    trunk_ = register_module("trunk", std::make_shared<nn::Linear>(16, 8, g));
    a_ = register_module("head_a", std::make_shared<nn::Linear>(8, kClasses, g));
    b_ = register_module("head_b", std::make_shared<nn::Linear>(8, kClasses, g));
    register_module("head_c", std::make_shared<nn::Linear>(8, kClasses, g));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(trunk_->forward(x));
    return which == 0 ? a_->forward(h) : b_->forward(h);
  }
  std::string type_name() const override { return "Branchy"; }
  int which = 0;

 private:
  std::shared_ptr<nn::Linear> trunk_, a_, b_;
};

TEST(DDP, WrapBroadcastsRankZeroParametersAndBuffers) {
  const nn::NamedTensors want = make_model("cnn_bn", kModelSeed)->state_dict();
  std::vector<nn::NamedTensors> got(3);
  comm::run_local(3, [&](comm::ProcessGroup& g) {
    auto m = make_model("cnn_bn", g.rank() == 0 ? kModelSeed : 99 + uint64_t(g.rank()));
    for (auto& [name, b] : m->named_buffers())  // rank-specific buffers must be replaced too
      if (name.find("running_mean") != std::string::npos) ops::fill_(b, double(g.rank()));
    auto ddp = parallel::apply_ddp(m, g, {});
    got[size_t(g.rank())] = m->state_dict();
  }, quick());
  auto ref = want;
  for (auto& [name, b] : ref)
    if (name.find("running_mean") != std::string::npos) ops::fill_(b, 0.0);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(max_relative_error(got[size_t(r)], ref, nullptr), 0.0) << "rank " << r;
}

TEST(DDP, UnusedParameterWithoutFindUnusedNamesIt) {
  try {
    comm::run_local(2, [&](comm::ProcessGroup& g) {
      auto m = std::make_shared<Branchy>(kModelSeed);
      auto ddp = parallel::apply_ddp(m, g, {});
      auto [x, y] = make_batch("mlp", 4, 0);
      backward(cross_entropy(ddp->forward(x), y));
      ddp->finalize();
    }, quick());
    FAIL() << "finalize accepted parameters without gradients";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* name : {"'head_b.weight'", "'head_b.bias'", "'head_c.weight'", "'head_c.bias'"})
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
    EXPECT_EQ(msg.find("head_a"), std::string::npos) << msg;
    EXPECT_NE(msg.find("find_unused_parameters"), std::string::npos) << msg;
  }
}

// Reference: the N shards' losses (each with its rank's head) averaged, one optimizer step.
nn::NamedTensors branchy_reference(int n, int steps) {
  auto m = std::make_shared<Branchy>(kModelSeed);
  auto opt = make_optimizer("adam", *m);
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = make_batch("mlp", 12, s);
    const int64_t per = 12 / n;
    for (int r = 0; r < n; ++r) {
      m->which = r % 2;
      backward(cross_entropy(m->forward(ops::narrow(x, 0, r * per, per)), ops::narrow(y, 0, r * per, per)) *
               (1.0 / double(n)));
    }
    opt->step();
    opt->zero_grad();
  }
  return m->state_dict();
}

void check_find_unused(int n, bool bucket_view) {
  const int steps = 3;
  const nn::NamedTensors ref = branchy_reference(n, steps);
  const nn::NamedTensors init = std::make_shared<Branchy>(kModelSeed)->state_dict();
  std::vector<nn::NamedTensors> got(static_cast<size_t>(n));
  std::vector<int> head_c_grad(size_t(n), -1);
  comm::run_local(n, [&](comm::ProcessGroup& g) {
    auto m = std::make_shared<Branchy>(kModelSeed);
    m->which = g.rank() % 2;
    // 23-float buckets: head_c (never used anywhere) shares buckets with used tensors.
    auto ddp = parallel::apply_ddp(m, g, {.bucket_cap_mb = 92.0 / 1048576, .first_bucket_mb = 92.0 / 1048576,
                                          .find_unused_parameters = true, .gradient_as_bucket_view = bucket_view});
    auto opt = make_optimizer("adam", *m);
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = make_batch("mlp", 12, s);
      const int64_t per = 12 / n;
      backward(cross_entropy(ddp->forward(ops::narrow(x, 0, g.rank() * per, per)),
                             ops::narrow(y, 0, g.rank() * per, per)));
      ddp->finalize();
      if (s == 0) {
        const Tensor gc = m->parameter("head_c.weight").grad();
        head_c_grad[size_t(g.rank())] = gc.defined() ? 1 : 0;
        EXPECT_EQ(ddp->reducer().last_stats().unused_params, 4);  // the other head and head_c
      }
      opt->step();
      opt->zero_grad();
    }
    got[size_t(g.rank())] = m->state_dict();
  }, quick());
  for (int r = 0; r < n; ++r) {
    std::string worst;
    EXPECT_LT(max_relative_error(got[size_t(r)], ref, &worst), 1e-5) << "N=" << n << " rank " << r << " " << worst;
    EXPECT_EQ(head_c_grad[size_t(r)], 0) << "a parameter no rank used must keep .grad undefined";
    for (size_t i = 0; i < init.size(); ++i) {
      if (init[i].first.rfind("head_c", 0) == 0) {
        EXPECT_EQ(max_relative_error({got[size_t(r)][i]}, {init[i]}, nullptr), 0.0) << init[i].first;
      }
    }
  }
}

TEST(DDP, FindUnusedParametersMatchesReference) {
  check_find_unused(1, false);
  check_find_unused(2, false);
  check_find_unused(3, false);
  check_find_unused(2, true);
}

TEST(DDP, SecondBackwardBeforeFinalizeIsRefused) {
  auto world = comm::make_local_world(1);
  auto m = make_model("mlp", kModelSeed);
  auto ddp = parallel::apply_ddp(m, *world[0], {});
  auto [x, y] = make_batch("mlp", 4, 0);
  Tensor loss = cross_entropy(ddp->forward(x), y);
  backward(loss, Tensor(), /*retain_graph=*/true);
  try {
    backward(loss);
    FAIL() << "a second backward before finalize was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second gradient before finalize()"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)ddp->forward(x), Error);  // a new forward before finalize
}

TEST(DDP, BroadcastBuffersBeforeForward) {
  for (bool on : {true, false}) {
    std::vector<float> seen(3);
    comm::run_local(3, [&](comm::ProcessGroup& g) {
      auto m = make_model("cnn_bn", kModelSeed);
      auto ddp = parallel::apply_ddp(m, g, {.broadcast_buffers = on});
      Tensor rm = m->named_buffers()[0].second;  // features.1.running_mean
      ops::fill_(rm, 10.0 + g.rank());
      m->eval();  // eval: forward reads the running stats and leaves them alone
      NoGradGuard ng;
      (void)ddp->forward(make_batch("cnn", 2, 0).first);
      seen[size_t(g.rank())] = rm.to_vector<float>()[0];
    }, quick());
    for (int r = 0; r < 3; ++r) EXPECT_EQ(seen[size_t(r)], on ? 10.0f : 10.0f + float(r)) << "broadcast " << on;
  }
}

TEST(DDP, NoSyncCommunicatesNothing) {
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    auto m = make_model("mlp", kModelSeed);
    auto ddp = parallel::apply_ddp(m, g, {.bucket_cap_mb = 100.0 / 1048576});
    auto [x, y] = make_batch("mlp", 8, g.rank());  // different data per rank
    const int64_t before = g.stats()[comm::OpKind::all_reduce].calls;
    {
      auto guard = ddp->no_sync();
      backward(cross_entropy(ddp->forward(x), y));
      ddp->finalize();
    }
    EXPECT_EQ(g.stats()[comm::OpKind::all_reduce].calls, before);
    Tensor local = ops::clone(m->parameter("net.1.weight").grad());
    backward(cross_entropy(ddp->forward(x), y));
    ddp->finalize();
    EXPECT_EQ(g.stats()[comm::OpKind::all_reduce].calls - before,
              int64_t(ddp->reducer().plan().buckets.size()));
    // After the sync step, .grad is the same on both ranks: average of (2 x local grads).
    Tensor avg = ops::clone(m->parameter("net.1.weight").grad());
    g.all_reduce(local, comm::ReduceOp::avg).wait();
    ops::mul_(local, 2.0);
    expect_close(avg, local, 1e-6, "accumulated average");
  }, quick());
}

TEST(DDP, BucketsLaunchWhileBackwardRuns) {
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    auto m = make_model("mlp", kModelSeed);
    // 10-float buckets after a 5-float first one (exactly the last layer's bias).
    auto ddp = parallel::apply_ddp(m, g, {.bucket_cap_mb = 40.0 / 1048576, .first_bucket_mb = 20.0 / 1048576});
    // Parameters: 0 net.1.weight, 1 net.1.bias, 2 net.3.weight, 3 net.3.bias, 4 net.5.weight, 5 net.5.bias.
    ASSERT_EQ(ddp->reducer().param_names()[2], "net.3.weight");
    int64_t launched_mid = -1;
    Tensor w = m->parameter("net.3.weight");
    w.register_post_accumulate_grad_hook(
        [&](Tensor&) { launched_mid = ddp->reducer().launched_buckets(); });
    auto [x, y] = make_batch("mlp", 8, 0);
    backward(cross_entropy(ddp->forward(x), y));
    const auto& plan = ddp->reducer().plan();
    const int64_t total = int64_t(plan.buckets.size());
    const int64_t only_later = buckets_only_from(plan, 2);  // layers 2 and 3: ready once net.3.weight is
    // While the first layer's gradients do not exist yet, every bucket of the later
    // layers is already on the wire, and none of the rest.
    EXPECT_EQ(launched_mid, only_later);
    EXPECT_GT(only_later, 5);
    EXPECT_LT(only_later, total);
    ddp->finalize();
    EXPECT_EQ(ddp->reducer().last_stats().buckets, total);
  }, quick());
}

TEST(DDP, HooksFireDuringBackwardOnEveryStep) {
  // The input's gradient is the last thing backward computes. Every parameter's hook
  // must have fired (and launched its buckets) by then, on the first step and on later
  // ones, whose cached AccumulateGrad nodes would otherwise run after everything else.
  comm::run_local(2, [&](comm::ProcessGroup& g) {
    auto m = make_model("mlp", kModelSeed);
    auto ddp = parallel::apply_ddp(m, g, {.bucket_cap_mb = 40.0 / 1048576, .first_bucket_mb = 20.0 / 1048576});
    auto opt = make_optimizer("sgd", *m);
    const int64_t total = int64_t(ddp->reducer().plan().buckets.size());
    for (int step = 0; step < 3; ++step) {
      auto [xd, y] = make_batch("mlp", 8, step);
      Tensor x = ops::clone(xd);
      x.set_requires_grad(true);
      int64_t launched_at_input = -1;
      x.register_post_accumulate_grad_hook([&](Tensor&) { launched_at_input = ddp->reducer().launched_buckets(); });
      backward(cross_entropy(ddp->forward(x), y));
      EXPECT_EQ(launched_at_input, total) << "step " << step;
      ddp->finalize();
      opt->step();
      ddp->zero_grad();
    }
  }, quick());
}

TEST(DDP, MemoryCategoriesAndBucketViews) {
  auto world = comm::make_local_world(1);
  for (bool view : {false, true}) {
    auto m = make_model("mlp", kModelSeed);
    const int64_t psi_bytes = m->num_parameters() * 4;
    const int64_t comm0 = cpu_memory().stats(MemCategory::comm).current;
    auto ddp = parallel::apply_ddp(m, *world[0], {.gradient_as_bucket_view = view});
    EXPECT_EQ(cpu_memory().stats(MemCategory::comm).current - comm0, psi_bytes);
    EXPECT_EQ(ddp->reducer().buffer_bytes(), psi_bytes);
    const int64_t grads0 = cpu_memory().stats(MemCategory::grads).current;
    ddp->zero_grad();
    auto [x, y] = make_batch("mlp", 4, 0);
    backward(cross_entropy(ddp->forward(x), y));
    ddp->finalize();
    const int64_t grad_bytes = cpu_memory().stats(MemCategory::grads).current - grads0;
    EXPECT_EQ(grad_bytes, view ? 0 : psi_bytes) << "view " << view;
    for (auto& p : m->parameters()) EXPECT_EQ(p.grad().shares_storage(ddp->reducer().buffer(0)), view);
    m->zero_grad();
  }
}

TEST(DDP, DistributedSamplerKeepsUnevenRanksInStep) {
  // 10 samples over 4 ranks: a plain split would give 3, 3, 2, 2 steps and the ranks with
  // 3 would wait forever in the third all-reduce. DistributedSampler pads to 12.
  const int64_t n = 10;
  auto [x, y] = make_batch("mlp", n, 0);
  std::vector<int64_t> steps(4, 0);
  comm::run_local(4, [&](comm::ProcessGroup& g) {
    data::DistributedSampler sampler(n, {.num_replicas = g.size(), .rank = g.rank(), .seed = 3});
    auto m = make_model("mlp", kModelSeed);
    auto ddp = parallel::apply_ddp(m, g, {});
    auto opt = make_optimizer("sgd", *m);
    for (int64_t idx : sampler.indices()) {
      Tensor i = ops::from_vector(std::vector<int64_t>{idx}, {1});
      backward(cross_entropy(ddp->forward(ops::index_select(x, 0, i)), ops::index_select(y, 0, i)));
      ddp->finalize();
      opt->step();
      ddp->zero_grad();
      ++steps[size_t(g.rank())];
    }
  }, comm::CommOptions{.timeout_s = 10});
  EXPECT_EQ(steps, (std::vector<int64_t>{3, 3, 3, 3}));
}

}  // namespace
}  // namespace strata::testing
