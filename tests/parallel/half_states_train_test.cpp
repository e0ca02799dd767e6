// 16-bit model states end to end: a GPT whose parameters, activations and gradients are
// bf16 (f32 masters and moments in the optimizer) tracks the f32 run's loss over 200
// steps; DDP and ZeRO-1/2/3 on 2 and 4 local ranks train the same bf16 model as one
// process does; and the allocator's static bytes after a step equal the planner's
// 16-bit formulas exactly.
//
// Equivalence tolerance: a layout computes the same gradients in a different order (each
// rank's shard in bf16, averaged in f32 and rounded once to bf16), so gradients differ by
// about one bf16 ulp (2^-8 relative) and the f32 masters by a fraction of lr x that; a
// master that moves across a bf16 rounding boundary moves its bf16 parameter by one ulp
// (up to 2^-7 of the value: bf16 keeps 8 significant bits). So parameters must agree to 2
// bf16 ulps of each tensor's largest element (2^-6) and the per-step losses to 1%: a layout that dropped or double-counted a shard's gradient, or
// trained on stale masters, misses both by far.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include <strata/autograd/autocast.h>
#include <strata/comm/local.h>
#include <strata/nn/gpt_plans.h>
#include <strata/core/memory.h>
#include <strata/core/thread_memory.h>
#include <strata/optim/grad_scaler.h>
#include <strata/parallel/memory_plan.h>
#include <strata/parallel/data/zero.h>
#include <strata/parallel/data/zero_schedule.h>
#include "equivalence.h"

namespace strata::testing {
namespace {

constexpr double kParamTol = 1.0 / 64;  // 2 bf16 ulps of the tensor's largest element
constexpr double kLossTol = 1e-2;

// bf16 model states: the model in bf16, floating inputs cast to bf16 (tokens stay i64).
Tensor input_for(const Tensor& x, DType dt) { return x.dtype() == DType::f32 ? ops::to_dtype(x, dt) : x; }

// eps: the GPT's attention key bias has an exactly-zero true gradient (softmax ignores a
// constant shift), so what it gets is rounding noise, which Adam with eps 1e-8 turns into
// full-size steps of either sign; the layouts use eps 1e-3, which keeps such noise small.
parallel::OptimizerFactory adamw(double lr, double eps = 1e-8) {
  return [lr, eps](optim::NamedTensors ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(std::move(ps),
                                          optim::AdamWOptions{.lr = lr, .eps = eps, .weight_decay = 0.0});
  };
}

// ------------------------------------------------------------------ 200 steps against f32

// Next-token data with structure to learn: x[t+1] = (3 x[t] + 1) mod V for most tokens.
std::pair<Tensor, Tensor> pattern_batch(int64_t b, int64_t t, int64_t vocab, int step) {
  Generator g(500 + uint64_t(step));
  const auto u = ops::uniform({b * (t + 1)}, 0.0, 1.0, g).to_vector<float>();
  std::vector<int64_t> seq(size_t(b * (t + 1)));
  for (int64_t i = 0; i < b; ++i) {
    seq[size_t(i * (t + 1))] = int64_t(u[size_t(i * (t + 1))] * float(vocab)) % vocab;
    for (int64_t j = 1; j <= t; ++j) {
      const size_t k = size_t(i * (t + 1) + j);
      seq[k] = u[k] < 0.1f ? int64_t(u[k] * 10 * float(vocab)) % vocab : (3 * seq[k - 1] + 1) % vocab;
    }
  }
  std::vector<int64_t> x, y;
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < t; ++j) {
      x.push_back(seq[size_t(i * (t + 1) + j)]);
      y.push_back(seq[size_t(i * (t + 1) + j + 1)]);
    }
  return {ops::from_vector(x, {b, t}), ops::from_vector(y, {b, t})};
}

// Each 20-step window's summed loss of `got` within 2% of `ref`'s (the issue's "track the
// f32 loss curve within 2% over 200 steps"); returns the worst window's relative gap.
double expect_tracks_within_2_percent(const std::vector<double>& ref, const std::vector<double>& got) {
  constexpr size_t kWindow = 20;
  EXPECT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t w = 0; w + kWindow <= std::min(ref.size(), got.size()); w += kWindow) {
    double a = 0, b = 0;
    for (size_t s = w; s < w + kWindow; ++s) a += ref[s], b += got[s];
    worst = std::max(worst, std::abs(b - a) / a);
    EXPECT_NEAR(b, a, 0.02 * a) << "steps " << w << ".." << w + kWindow - 1;
  }
  return worst;
}

std::vector<double> gpt_losses(std::optional<DType> dt, int steps) {
  Generator gen(7);
  auto model = std::make_shared<nn::GPT>(
      nn::GPTConfig{.vocab = 32, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32}, gen);
  if (dt) model->to(*dt);
  auto opt = adamw(3e-3)(model->named_parameters());
  std::vector<double> out;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = pattern_batch(8, 16, 32, s);
    Tensor loss = model->loss(x, y);
    EXPECT_EQ(loss.dtype(), DType::f32) << "the loss is computed in f32";
    out.push_back(loss.item<double>());
    backward(loss);
    if (dt)
      for (const auto& [n, p] : model->named_parameters()) {
        EXPECT_EQ(p.dtype(), *dt) << n;
        EXPECT_EQ(p.grad().dtype(), *dt) << n << ": gradients are 16-bit";
      }
    opt->step();
    opt->zero_grad();
  }
  return out;
}

TEST(HalfStatesTrain, GptBf16ParamsTracksF32Over200Steps) {
  constexpr int kSteps = 200;
  const auto l32 = gpt_losses(std::nullopt, kSteps);
  const auto l16 = gpt_losses(DType::bf16, kSteps);
  EXPECT_LT(l32.back(), 0.5 * l32.front()) << "the f32 run must learn, or the comparison says nothing";
  const double worst = expect_tracks_within_2_percent(l32, l16);
  std::printf("[bf16_params] GPT 200 steps: f32 loss %.4f -> %.4f, bf16 %.4f -> %.4f, worst 20-step window %.2f%%\n",
              l32.front(), l32.back(), l16.front(), l16.back(), 100 * worst);
}

// The CNN (conv, batch norm, max pooling; 16-bit kernels widen inside) in bf16_params
// against f32 over 200 steps of a learnable task: the class is which quadrant-half sums
// of an 8x8 N(0,1) image are positive (top half > 0) * 2 + (left half > 0).
constexpr int64_t kCnnBatch = 64;

std::vector<double> cnn_losses(std::optional<DType> dt, int steps) {
  Generator gen(11);
  nn::CNNConfig c{.in_channels = 1, .channels = {4, 8}, .classes = 4, .batch_norm = true, .dropout = 0.0,
                  .image_size = 8, .hidden = 16};
  auto model = std::make_shared<nn::CNN>(c, gen);
  if (dt) model->to(*dt);
  auto opt = adamw(3e-3)(model->named_parameters());
  std::vector<double> out;
  for (int s = 0; s < steps; ++s) {
    Generator g(700 + uint64_t(s));
    Tensor x = ops::normal({kCnnBatch, 1, 8, 8}, 0.0, 1.0, g);
    const auto v = x.to_vector<float>();
    std::vector<int64_t> y(kCnnBatch);
    for (int64_t i = 0; i < kCnnBatch; ++i) {
      double top = 0, left = 0;
      for (int64_t r = 0; r < 8; ++r)
        for (int64_t q = 0; q < 8; ++q) {
          const double e = v[size_t(i * 64 + r * 8 + q)];
          if (r < 4) top += e;
          if (q < 4) left += e;
        }
      y[size_t(i)] = (top > 0) * 2 + (left > 0);
    }
    Tensor loss = cross_entropy(model->forward(input_for(x, dt.value_or(DType::f32))), ops::from_vector(y, {kCnnBatch}));
    out.push_back(loss.item<double>());
    backward(loss);
    if (dt)
      for (const auto& [n, p] : model->named_parameters()) {
        EXPECT_EQ(p.grad().dtype(), *dt) << n;
      }
    opt->step();
    opt->zero_grad();
  }
  return out;
}

TEST(HalfStatesTrain, CnnBf16ParamsTracksF32Over200Steps) {
  constexpr int kSteps = 200;
  const auto l32 = cnn_losses(std::nullopt, kSteps);
  const auto l16 = cnn_losses(DType::bf16, kSteps);
  EXPECT_LT(l32.back(), 0.6 * l32.front()) << "the f32 run must learn, or the comparison says nothing";
  const double worst = expect_tracks_within_2_percent(l32, l16);
  std::printf("[bf16_params] CNN 200 steps: f32 loss %.4f -> %.4f, bf16 %.4f -> %.4f, worst 20-step window %.2f%%\n",
              l32.front(), l32.back(), l16.front(), l16.back(), 100 * worst);
}

// ------------------------------------------------------------------ f16 model states + loss scaling

// run.precision f16_params: an f16 GPT (f32 masters and moments) stepped through the
// GradScaler as the trainer does: scale(loss).backward(), unscale_ (1/scale applied in
// f32 to each f16 gradient, which is then rounded back to f16, and checked for inf/NaN),
// step (skipped on a non-finite gradient), update (backoff / growth).
struct F16Run {
  std::vector<double> losses;  // of the steps taken (skipped ones included: their loss was computed)
  std::vector<double> scales;  // the scale each step ran with
  std::vector<bool> stepped;
};

// Largest |a - b| (both widened to f64): 0 when every value is the same.
double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto x = ops::to_dtype(a, DType::f64).to_vector<double>(), y = ops::to_dtype(b, DType::f64).to_vector<double>();
  double m = x.size() == y.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

F16Run gpt_f16(int steps, optim::GradScalerOptions so) {
  Generator gen(7);
  auto model = std::make_shared<nn::GPT>(
      nn::GPTConfig{.vocab = 32, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32}, gen);
  model->to(DType::f16);
  auto opt = adamw(3e-3)(model->named_parameters());
  optim::GradScaler scaler(so);
  F16Run out;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = pattern_batch(8, 16, 32, s);
    Tensor loss = model->loss(x, y);
    out.losses.push_back(loss.item<double>());
    out.scales.push_back(scaler.get_scale());
    backward(scaler.scale(loss));
    for (const auto& [n, p] : model->named_parameters()) EXPECT_EQ(p.grad().dtype(), DType::f16) << n;
    nn::NamedTensors before;
    for (const auto& [n, p] : model->named_parameters()) before.emplace_back(n, ops::clone(p));
    const Tensor master0 = ops::clone(opt->master(0));
    const bool stepped = scaler.step(*opt);
    scaler.update();
    out.stepped.push_back(stepped);
    if (!stepped) {  // a skipped step leaves parameters and masters exactly as they were
      size_t i = 0;
      for (const auto& [n, p] : model->named_parameters()) {
        EXPECT_EQ(max_abs_diff(p, before[i++].second), 0.0) << n << " changed on a skipped step " << s;
      }
      EXPECT_EQ(max_abs_diff(opt->master(0), master0), 0.0) << "master changed on a skipped step " << s;
    }
    opt->zero_grad();
  }
  return out;
}

// Overflow: at scale 2^40 the scaled gradients overflow f16 (max 65504), so steps are
// skipped and the scale halves each time until the gradients fit; then training goes on,
// and after growth_interval clean steps the scale doubles.
TEST(HalfStatesTrain, F16ParamsSkipOnOverflowBackOffAndGrow) {
  const F16Run r = gpt_f16(40, {.init_scale = std::ldexp(1.0, 40), .growth_interval = 10});
  ASSERT_FALSE(r.stepped[0]) << "scale 2^40 must overflow f16 gradients";
  size_t first = 0;
  while (first < r.stepped.size() && !r.stepped[first]) ++first;
  ASSERT_LT(first, r.stepped.size()) << "never stepped";
  for (size_t s = 1; s <= first; ++s) EXPECT_EQ(r.scales[s], r.scales[s - 1] / 2) << "backoff at step " << s;
  // growth: 10 clean steps in a row double the scale (unless an overflow came first)
  bool grew = false;
  for (size_t s = first + 1; s < r.scales.size(); ++s) grew |= r.scales[s] == 2 * r.scales[s - 1];
  EXPECT_TRUE(grew) << "the scale never grew after clean steps";
  EXPECT_LT(r.losses.back(), r.losses[first]) << "training after the skipped steps must lower the loss";
  std::printf("[f16_params] skipped %zu steps from scale 2^40 to %g; loss %.4f -> %.4f\n", first, r.scales[first],
              r.losses[first], r.losses.back());
}

// 200 steps at the default scale (2^16, growth every 20 clean steps) track f32's loss
// within 2% per 20-step window, as bf16_params does.
TEST(HalfStatesTrain, F16ParamsTracksF32Over200Steps) {
  constexpr int kSteps = 200;
  const auto l32 = gpt_losses(std::nullopt, kSteps);
  const F16Run r = gpt_f16(kSteps, {.growth_interval = 20});
  int skipped = 0;
  for (bool b : r.stepped) skipped += !b;
  const double worst = expect_tracks_within_2_percent(l32, r.losses);
  std::printf("[f16_params] GPT 200 steps: f32 %.4f -> %.4f, f16 %.4f -> %.4f, worst window %.2f%%, %d skipped, "
              "final scale %g\n",
              l32.front(), l32.back(), r.losses.front(), r.losses.back(), 100 * worst, skipped, r.scales.back());
}

// ------------------------------------------------------------------ layouts vs one process

struct Result {
  std::vector<double> losses;
  nn::NamedTensors state;
  parallel::MemoryPlan measured{};  // all ranks' static bytes after the last step (before zero_grad)
  parallel::MemoryPlan rank_static{};  // this rank's own (ThreadMemoryScope), same moment
  parallel::MemoryPlan peak{};      // this rank's per-category peak over the last backward + finalize
  std::optional<parallel::ZeroBackwardSchedule> schedule;  // ZeRO's units and launch order
  std::vector<int64_t> units;       // ZeRO: the flat units' element counts
  int64_t reduce_bytes = 0;  // all-reduce + reduce-scatter bytes this rank sent in the last step
  int64_t gather_bytes = 0;  // all-gather bytes this rank sent in the last step
};

constexpr int kSteps = 4;
constexpr int64_t kBatch = 8;

Result one_process(const std::string& kind, DType dt = DType::bf16) {
  auto model = make_model(kind, kModelSeed);
  model->to(dt);
  auto opt = adamw(1e-2, 1e-3)(model->named_parameters());
  Result r;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = make_batch(kind, kBatch, s);
    Tensor loss = batch_loss(*model, input_for(x, dt), y);
    r.losses.push_back(loss.item<double>());
    backward(loss);
    opt->step();
    opt->zero_grad();
  }
  r.state = model->state_dict();
  return r;
}

int64_t mem(MemCategory c) { return cpu_memory().stats(c).current; }

parallel::MemoryPlan categories(const MemoryTracker& t, bool peak) {
  auto v = [&](MemCategory c) { return peak ? t.stats(c).peak : t.stats(c).current; };
  return {v(MemCategory::params), v(MemCategory::grads), v(MemCategory::optimizer), v(MemCategory::comm)};
}

struct Units {
  parallel::DDPOptions ddp{};          // DDP buckets, ZeRO-1/2 units
  std::vector<std::string> wrap{};     // ZeRO-3 units
};

// Units small enough that the GPT (Ψ = 1952, 2 blocks) splits into several: at stages
// 1-2 byte caps (5 bf16 units, 9 f32 ones; DDP several buckets), at stage 3 each block's
// attention and MLP (4 wrapped units; the LayerNorms join the root, whose gradients then
// arrive all through backward), so the backward peak depends on the launch windows.
Units small_units() {
  Units u;
  u.ddp.bucket_cap_mb = 1200.0 / (1 << 20);
  u.ddp.first_bucket_mb = u.ddp.last_bucket_mb = 600.0 / (1 << 20);
  u.wrap = {"h.0.attn", "h.0.mlp", "h.1.attn", "h.1.mlp"};
  return u;
}

// Every rank of `g` trains its shard. Memory: the allocator's counters over all ranks
// (they share it) after the last optimizer step, and each rank's own counters
// (ThreadMemoryScope: what the rank's thread allocated and freed) after that step and,
// as peaks, from the end of the last forward to the end of finalize(). Returns
// rank-averaged losses.
Result layout(comm::ProcessGroup& g, const std::string& kind, int stage, DType dt = DType::bf16,
              const Units& units = {}) {
  MemoryTracker mine;
  ThreadMemoryScope scope(mine);
  const int n = g.size(), rank = g.rank();
  auto model = make_model(kind, rank == 0 ? kModelSeed : kModelSeed + 77 * uint64_t(rank));
  model->to(dt);
  auto sent = [&] {
    const comm::CommStats st = g.stats();
    return std::pair{st[comm::OpKind::all_reduce].bytes_sent + st[comm::OpKind::reduce_scatter].bytes_sent,
                     st[comm::OpKind::all_gather].bytes_sent};
  };
  std::shared_ptr<comm::ProcessGroup> world(&g, [](comm::ProcessGroup*) {});
  const parallel::ParallelDims dims = parallel::ParallelDims{.zero_stage = stage}.resolve(n);
  auto pm = parallel::parallelize(model, comm::DeviceMesh(world, dims.mesh_shape()),
                                  {.dims = dims, .ddp = units.ddp, .fsdp_prefetch = true, .fsdp_wrap = units.wrap,
                                   .make_optimizer = adamw(1e-2, 1e-3)});
  const int64_t per = kBatch / n;
  Result r;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = make_batch(kind, kBatch, s);
    Tensor xs = input_for(ops::narrow(x, 0, rank * per, per), dt), ys = ops::narrow(y, 0, rank * per, per);
    Tensor loss = pm->forward_with([&] { return batch_loss(*model, xs, ys); });
    const double lv = loss.item<double>();
    const auto before = sent();
    const bool last = s + 1 == kSteps;
    if (last) {  // the backward peak: every category's high-water mark from here to finalize
      g.barrier().wait();
      mine.reset_peaks();
    }
    backward(loss);
    pm->finalize();
    if (last) r.peak = categories(mine, true);
    pm->step();
    const auto after = sent();
    r.reduce_bytes = after.first - before.first;
    r.gather_bytes = after.second - before.second;
    r.losses.push_back(rank_mean(g, lv));
    if (s + 1 == kSteps) {
      g.barrier().wait();
      loss = Tensor();
      r.measured = {mem(MemCategory::params), mem(MemCategory::grads), mem(MemCategory::optimizer),
                    mem(MemCategory::comm)};
      r.rank_static = categories(mine, false);
      g.barrier().wait();
    }
    pm->zero_grad();
  }
  if (pm->zero()) {
    for (const auto& u : pm->zero()->units()) r.units.push_back(u.numel);
    r.schedule = parallel::zero_backward_schedule(*pm->zero());
  }
  {
    const parallel::ParallelModel::FullParams full = pm->summon_full_params();  // ZeRO-3 units, tp shards
    for (const auto& [name, t] : pm->module().state_dict()) r.state.emplace_back(name, ops::clone(t));
  }
  return r;
}

comm::CommOptions native_comm() { return comm::CommOptions{.algorithm = comm::Algorithm::native, .timeout_s = 120}; }

void check_layout(const std::string& kind, int stage, int n, comm::CommOptions opts = native_comm(),
                  DType dt = DType::bf16, const Units& units = small_units()) {
  const Result ref = one_process(kind, dt);
  std::vector<Result> got(static_cast<size_t>(n));
  const int64_t p0 = mem(MemCategory::params), g0 = mem(MemCategory::grads), o0 = mem(MemCategory::optimizer),
                c0 = mem(MemCategory::comm);
  comm::run_local(
      n, [&](comm::ProcessGroup& g) { got[size_t(g.rank())] = layout(g, kind, stage, dt, units); },
      opts);
  const std::string what = kind + " " + dtype_name(dt) + " stage " + std::to_string(stage) + " N=" +
                           std::to_string(n) + " " +
                           comm::algorithm_name(opts.algorithm) + " reduce_dtype " +
                           comm::reduce_dtype_name(opts.reduce_dtype);
  for (int r = 0; r < n; ++r) {
    std::string worst;
    EXPECT_LT(max_relative_error(got[size_t(r)].state, ref.state, &worst), kParamTol) << what << " rank " << r
                                                                                       << ": worst " << worst;
    for (const auto& [name, t] : got[size_t(r)].state) {
      if (name.find("running") == std::string::npos) {
        EXPECT_EQ(t.dtype(), dt) << name;
      }
    }
  }
  for (int s = 0; s < kSteps; ++s)
    EXPECT_NEAR(got[0].losses[size_t(s)], ref.losses[size_t(s)], kLossTol * ref.losses[size_t(s)])
        << what << " step " << s;

  // static bytes: all ranks share the allocator, so the sum over ranks is N x the plan
  auto model = make_model(kind, kModelSeed);
  parallel::MemoryPlanInput in;
  for (const auto& p : model->parameters()) in.param_elements += p.numel();
  in.optimizer_states = 2;
  in.world_size = n;
  in.zero_stage = stage;
  in.ddp_bucket_bytes = (n > 1 && stage == 0) ? int64_t(element_size(dt)) * in.param_elements : 0;  // one bucket copy
  in.flat_units = got[0].units;
  if (dt != DType::f32) in = parallel::sixteen_bit_states(in);
  const parallel::MemoryPlan plan = parallel::plan_memory(in);
  const parallel::MemoryPlan& m = got[0].measured;
  EXPECT_EQ(m.params - p0, n * plan.params) << what;
  EXPECT_EQ(m.grads - g0, n * plan.grads) << what;
  EXPECT_EQ(m.optimizer - o0, n * plan.optimizer) << what;
  EXPECT_EQ(m.comm - c0, n * plan.comm) << what;
  // Each rank's own bytes (its thread's allocations and frees) after the step equal the
  // plan, and so does its backward peak (reset after forward, read after finalize), per
  // category, with the local backend's native reduction, which stages nothing.
  const parallel::MemoryPlan bp =
      got[0].schedule ? parallel::plan_backward_peak(in, *got[0].schedule) : parallel::plan_backward_peak(in);
  for (int r = 0; r < n; ++r) {
    const parallel::MemoryPlan &rs = got[size_t(r)].rank_static, &pk = got[size_t(r)].peak;
    const std::string who = what + " rank " + std::to_string(r);
    EXPECT_EQ(rs.params, plan.params) << who;
    EXPECT_EQ(rs.grads, plan.grads) << who;
    EXPECT_EQ(rs.optimizer, plan.optimizer) << who;
    EXPECT_EQ(rs.comm, plan.comm) << who;
    if (opts.algorithm != comm::Algorithm::native) continue;  // ring: its chunk scratch is the comm thread's
    EXPECT_EQ(pk.params, bp.params) << who << " backward peak";
    EXPECT_EQ(pk.grads, bp.grads) << who << " backward peak";
    EXPECT_EQ(pk.optimizer, bp.optimizer) << who << " backward peak";
    EXPECT_EQ(pk.comm, bp.comm) << who << " backward peak";
  }
  const parallel::MemoryPlan& pk = got[0].peak;
  std::printf("[bf16_params] %s: %zu units; backward peak per rank params %lld grads %lld optimizer %lld comm %lld "
              "(plan %lld %lld %lld %lld)\n",
              what.c_str(), got[0].units.size(), (long long)pk.params, (long long)pk.grads, (long long)pk.optimizer,
              (long long)pk.comm, (long long)bp.params, (long long)bp.grads, (long long)bp.optimizer,
              (long long)bp.comm);
  std::printf("[bf16_params] %s: per rank params %lld grads %lld optimizer %lld comm %lld bytes (Psi %lld)\n",
              what.c_str(), (long long)((m.params - p0) / n), (long long)((m.grads - g0) / n),
              (long long)((m.optimizer - o0) / n), (long long)((m.comm - c0) / n), (long long)in.param_elements);
}

TEST(HalfStatesLayouts, DdpMatchesOneProcessAndPlan) {
  for (int n : {1, 2, 4}) check_layout("gpt", 0, n);
  check_layout("mlp", 0, 2);
}

TEST(HalfStatesLayouts, Zero123MatchOneProcessAndPlan) {
  for (int stage : {1, 2, 3})
    for (int n : {1, 2, 4}) check_layout("gpt", stage, n);
}

// The same planner serves f32 states (B = 4, no masters): the static bytes and the
// backward peak per rank equal it at stages 2 and 3 too.
TEST(HalfStatesLayouts, F32ZeroBackwardPeakMatchesPlan) {
  for (int stage : {2, 3})
    for (int n : {1, 2, 4}) check_layout("gpt", stage, n, native_comm(), DType::f32);
}

// comm.reduce_dtype at each setting on the counted ring algorithm (the tests above run
// the local backend's native reduction, which sums in f32 and rounds once):
//  - param: every ring hop rounds the partial sum to bf16, so at N = 4 a gradient takes
//    3 roundings (<= 1.5 bf16 ulps of the sum) and the avg's scaling by 1/4 is exact; the
//    gradients stay within a couple of bf16 ulps of the one-process ones, below what the
//    tolerance (2 ulps of each tensor's largest parameter, 1% loss) already allows for
//    the different summation order.
//  - f32: f32 partial sums and one rounding, as the native reduction.
TEST(HalfStatesLayouts, ReduceDtypeParamAndF32MatchOneProcess) {
  for (comm::ReduceDtype rd : {comm::ReduceDtype::param, comm::ReduceDtype::f32}) {
    const comm::CommOptions o{.algorithm = comm::Algorithm::ring, .timeout_s = 120, .reduce_dtype = rd};
    check_layout("gpt", 0, 4, o);
    check_layout("gpt", 2, 4, o);
    check_layout("gpt", 3, 4, o);
  }
}

// Bytes sent per step. Parameters travel in 16 bits: ZeRO's all-gathers, counted on the
// ring algorithm (real messages), move exactly half the f32 bytes. Gradients: with
// comm.reduce_dtype param (the default) the reduce-scatter / all-reduce moves 16 bits,
// half of f32's bytes, counted on the ring (each hop rounds) and modelled on the native
// local backend (f32 accumulation, rounded once); with comm.reduce_dtype f32 they are
// widened and reduced in f32 on either algorithm, so the reduction's bytes equal f32's
// (docs/precision.md).
TEST(HalfStatesLayouts, BytesSentPerStepHalveAgainstF32) {
  for (comm::ReduceDtype rd : {comm::ReduceDtype::param, comm::ReduceDtype::f32})
    for (int stage : {0, 1, 2, 3})
      for (comm::Algorithm algo : {comm::Algorithm::ring, comm::Algorithm::native}) {
        std::map<DType, Result> got;
        for (DType dt : {DType::f32, DType::bf16}) {
          std::vector<Result> per_rank(2);
          comm::run_local(2, [&](comm::ProcessGroup& g) { per_rank[size_t(g.rank())] = layout(g, "gpt", stage, dt); },
                          comm::CommOptions{.algorithm = algo, .timeout_s = 120, .reduce_dtype = rd});
          got[dt] = per_rank[0];
        }
        const Result &f = got[DType::f32], &h = got[DType::bf16];
        const bool ring = algo == comm::Algorithm::ring, half_wire = rd == comm::ReduceDtype::param;
        const std::string what = std::string("stage ") + std::to_string(stage) + " " + comm::algorithm_name(algo) +
                                 " reduce_dtype " + comm::reduce_dtype_name(rd);
        EXPECT_GT(f.reduce_bytes, 0) << what;
        EXPECT_EQ(2 * h.gather_bytes, f.gather_bytes) << what;
        EXPECT_EQ((half_wire ? 2 : 1) * h.reduce_bytes, f.reduce_bytes) << what;
        if (stage > 0) {
          EXPECT_GT(f.gather_bytes, 0) << what;
        }
        std::printf("[bf16_params] stage %d N=2 %s reduce_dtype %s: bytes per step per rank: reduce f32 %lld bf16 "
                    "%lld, gather f32 %lld bf16 %lld\n",
                    stage, ring ? "ring (counted)" : "native (modelled)", comm::reduce_dtype_name(rd),
                    (long long)f.reduce_bytes, (long long)h.reduce_bytes, (long long)f.gather_bytes,
                    (long long)h.gather_bytes);
      }
}

}  // namespace
}  // namespace strata::testing

namespace strata::testing {
namespace {

// f16_params under ZeRO-1/2/3 at N = 2 against one process, through ParallelModel as the
// trainer drives it: scale(loss).backward(), finalize, unscale_ (the found-inf flag agreed
// over the dp ranks: each rank checks only its gradient shard), step (skipped on every
// rank together), update. From scale 2^31 with backoff x0.25 the first 7 steps
// overflow on every layout and in one process, and 2^17 fits them all (no growth: the
// scale stays there); in between, whether a scale overflows depends on the f16 values a
// layout computes (a rank's half batch), so the schedule steps over that band. At step
// kInject an inf is written into one gradient element: under ZeRO into rank 1's shard
// only, so rank 0's own check finds nothing and must skip by agreement (in one process
// into the first parameter's gradient: the whole step is skipped there). The skipped
// steps, the scales, the losses and the parameters must match the one-process run's.
struct F16Layout {
  std::vector<double> losses, scales;
  std::vector<bool> stepped;
  nn::NamedTensors state;
  int agreed_only = 0;  // steps skipped although this rank's own shard was finite
};

constexpr int kF16Steps = 30;
constexpr int kInject = 12;

void inject_inf(optim::Optimizer& opt) {
  Tensor g = opt.named_parameters().front().second.grad();
  Tensor first = ops::narrow(ops::reshape(g, {g.numel()}), 0, 0, 1);  // a view: .grad is contiguous
  ops::fill_(first, INFINITY);
}
const optim::GradScalerOptions kF16Scaler{
    .init_scale = 2147483648.0 /* 2^31 */, .backoff_factor = 0.25, .growth_interval = 1000};

// How the f16 run computes: f16 model states (f16_params), or f32 parameters with the
// forward under f16 autocast (run.precision f16).
enum class F16Mode { states, autocast };

// Under autocast only the 16-bit ops' outputs and gradients are f16, and whether a scale
// between 2^16 and 2^19 overflows depends on the layout's f16 values; from 2^25 one
// backoff of 2^-10 lands on 2^15, which no layout overflows.
const optim::GradScalerOptions kF16AutocastScaler{
    .init_scale = 33554432.0 /* 2^25 */, .backoff_factor = 1.0 / 1024, .growth_interval = 1000};
const optim::GradScalerOptions& scaler_options(F16Mode mode) {
  return mode == F16Mode::states ? kF16Scaler : kF16AutocastScaler;
}

Tensor f16_loss(nn::Module& model, const Tensor& x, const Tensor& y, F16Mode mode) {
  AutocastGuard guard(mode == F16Mode::autocast ? std::optional(DType::f16) : std::nullopt);
  return batch_loss(model, x, y);
}

F16Layout f16_one_process(F16Mode mode) {
  auto model = make_model("gpt", kModelSeed);
  if (mode == F16Mode::states) model->to(DType::f16);
  auto opt = adamw(1e-2, 1e-3)(model->named_parameters());
  optim::GradScaler scaler(scaler_options(mode));
  F16Layout r;
  for (int s = 0; s < kF16Steps; ++s) {
    auto [x, y] = make_batch("gpt", kBatch, s);
    Tensor loss = f16_loss(*model, x, y, mode);
    r.losses.push_back(loss.item<double>());
    r.scales.push_back(scaler.get_scale());
    backward(scaler.scale(loss));
    if (s == kInject) inject_inf(*opt);
    r.stepped.push_back(scaler.step(*opt));
    scaler.update();
    opt->zero_grad();
  }
  r.state = model->state_dict();
  return r;
}

F16Layout f16_layout(comm::ProcessGroup& g, parallel::ParallelDims layout, F16Mode mode) {
  const int n = g.size(), rank = g.rank();
  auto model = make_model("gpt", rank == 0 ? kModelSeed : kModelSeed + 77 * uint64_t(rank));
  if (mode == F16Mode::states) model->to(DType::f16);
  std::shared_ptr<comm::ProcessGroup> world(&g, [](comm::ProcessGroup*) {});
  const parallel::ParallelDims dims = layout.resolve(n);
  // The harness GPT's own tensor-parallel plan (2 heads: tp 2 gives each rank one).
  const parallel::TpPlan plan =
      dims.tp > 1 ? nn::gpt_tp_plan(nn::GPTConfig{.vocab = 16, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 8},
                                    false)
                  : parallel::TpPlan{};
  auto pm = parallel::parallelize(model, comm::DeviceMesh(world, dims.mesh_shape()),
                                  {.dims = dims, .ddp = small_units().ddp, .fsdp_prefetch = true,
                                   .fsdp_wrap = small_units().wrap, .tp_plan = plan, .make_optimizer = adamw(1e-2, 1e-3)});
  optim::GradScaler scaler(scaler_options(mode));
  const int64_t dp = dims.dp, per = kBatch / dp, dp_rank = rank / (n / dp);  // tp ranks are consecutive
  F16Layout r;
  for (int s = 0; s < kF16Steps; ++s) {
    auto [x, y] = make_batch("gpt", kBatch, s);
    Tensor xs = ops::narrow(x, 0, dp_rank * per, per), ys = ops::narrow(y, 0, dp_rank * per, per);
    Tensor loss = pm->forward_with([&] { return f16_loss(pm->module(), xs, ys, mode); });
    r.losses.push_back(rank_mean(g, loss.item<double>()));
    r.scales.push_back(scaler.get_scale());
    backward(scaler.scale(loss));
    pm->finalize();
    if (s == kInject && rank == 1) inject_inf(pm->optimizer());
    pm->unscale_(scaler);
    r.stepped.push_back(!scaler.found_inf(pm->optimizer()));
    r.agreed_only += scaler.found_inf(pm->optimizer()) && scaler.non_finite(pm->optimizer()).empty();
    pm->step(&scaler);
    pm->zero_grad();
  }
  {
    const parallel::ParallelModel::FullParams full = pm->summon_full_params();  // ZeRO-3 units, tp shards
    for (const auto& [name, t] : pm->module().state_dict()) r.state.emplace_back(name, ops::clone(t));
  }
  return r;
}

// Each layout of `layouts` at N = 2 against one process in `mode`: the same skipped
// steps and scales on every rank, the same losses and parameters; at least one skip
// decided by agreement alone (rank 0's own gradients finite) per layout.
void expect_f16_layouts_match_one_process(F16Mode mode, const std::vector<std::pair<std::string, parallel::ParallelDims>>& layouts) {
  const char* tag = mode == F16Mode::states ? "f16_params" : "f16 autocast";
  const F16Layout ref = f16_one_process(mode);
  int skipped = 0;
  for (bool b : ref.stepped) skipped += !b;
  ASSERT_GT(skipped, 1) << "the initial scale must overflow f16 gradients, or the agreement is not exercised";
  ASSERT_LT(skipped, kF16Steps - 10) << "the run must train after the overflows";
  for (const auto& [name, layout] : layouts) {
    std::vector<F16Layout> got(2);
    comm::run_local(2, [&](comm::ProcessGroup& g) { got[size_t(g.rank())] = f16_layout(g, layout, mode); }, native_comm());
    const std::string what = std::string(tag) + " " + name + " N=2";
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(got[size_t(r)].stepped, ref.stepped) << what << " rank " << r << ": skipped steps";
      EXPECT_EQ(got[size_t(r)].scales, ref.scales) << what << " rank " << r << ": loss scales";
      std::string worst;
      EXPECT_LT(max_relative_error(got[size_t(r)].state, ref.state, &worst), kParamTol) << what << " rank " << r
                                                                                         << ": worst " << worst;
    }
    for (int s = 0; s < kF16Steps; ++s)
      EXPECT_NEAR(got[0].losses[size_t(s)], ref.losses[size_t(s)], kLossTol * ref.losses[size_t(s)])
          << what << " step " << s;
    EXPECT_GE(got[0].agreed_only, 1) << what << ": rank 0 must have skipped step " << kInject << " by agreement";
    std::printf("[%s] %s: %d of %d steps skipped on every rank as in one process (%d + %d skipped by a rank "
                "whose own gradients were finite), scale %g -> %g, loss %.4f -> %.4f (one process %.4f -> %.4f)\n",
                tag, what.c_str(), skipped, kF16Steps, got[0].agreed_only, got[1].agreed_only, got[0].scales.front(), got[0].scales.back(),
                got[0].losses.front(), got[0].losses.back(), ref.losses.front(), ref.losses.back());
  }
}

const std::vector<std::pair<std::string, parallel::ParallelDims>> kZeroStages = {
    {"ZeRO-1", {.zero_stage = 1}}, {"ZeRO-2", {.zero_stage = 2}}, {"ZeRO-3", {.zero_stage = 3}}};

TEST(HalfStatesLayouts, F16ParamsZeroAgreesOnSkippedStepsAndMatchesOneProcess) {
  expect_f16_layouts_match_one_process(F16Mode::states, kZeroStages);
}

// run.precision f16 (f32 parameters, f16 autocast forward) under ZeRO: each rank checks its
// gradient shard, the flag is agreed over the run's ranks.
TEST(HalfStatesLayouts, F16AutocastZeroAgreesOnSkippedStepsAndMatchesOneProcess) {
  expect_f16_layouts_match_one_process(F16Mode::autocast, kZeroStages);
}

// Tensor parallelism shards the gradients over tp (each rank checks its own shards and
// its copy of the replicated ones): the skip decision is agreed over the tp ranks too.
TEST(HalfStatesLayouts, F16UnderTensorParallelAgreesOnSkippedStepsAndMatchesOneProcess) {
  const std::vector<std::pair<std::string, parallel::ParallelDims>> tp2 = {{"tp 2", {.tp = 2}}};
  expect_f16_layouts_match_one_process(F16Mode::states, tp2);
  expect_f16_layouts_match_one_process(F16Mode::autocast, tp2);
}

}  // namespace
}  // namespace strata::testing
