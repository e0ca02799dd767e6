// The DDP measurements (see ddp_bench.h). Every phase starts with a barrier so ranks
// time the same thing; timings are averaged over steps and maxed over ranks.
#include "parallel/ddp_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>

#include "autograd/engine.h"
#include "comm/local.h"
#include "core/memory.h"
#include "core/threads.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "parallel/bench_util.h"
#include "parallel/ddp.h"

namespace strata::parallel {
namespace {

using Clock = detail::BenchClock;
using detail::max_over_ranks;
using detail::median;
using detail::since;

struct Gpt {
  std::shared_ptr<nn::GPT> model;
  std::unique_ptr<optim::Optimizer> opt;
  Tensor idx, tgt;
};

Gpt make_gpt(const DDPBenchOptions& o, int rank) {
  Generator g(17);  // same init everywhere (DDP broadcasts anyway)
  Gpt s;
  s.model = std::make_shared<nn::GPT>(o.gpt, g);
  s.opt = std::make_unique<optim::AdamW>(s.model->named_parameters(), optim::AdamWOptions{.lr = 1e-4});
  Generator d(1000 + uint64_t(rank));
  const double v = double(o.gpt.vocab);
  s.idx = ops::to_dtype(ops::uniform({o.gpt_batch, o.gpt.block_size}, 0, v - 0.5, d), DType::i64);
  s.tgt = ops::to_dtype(ops::uniform({o.gpt_batch, o.gpt.block_size}, 0, v - 0.5, d), DType::i64);
  return s;
}

// Median step time of `step` over opts.steps after opts.warmup; the slowest rank's.
// Medians, not means: on a shared machine a few steps lose the CPU for milliseconds.
template <class F>
double time_steps(comm::ProcessGroup& g, const DDPBenchOptions& o, F&& step) {
  for (int i = 0; i < o.warmup; ++i) step();
  g.barrier().wait();
  std::vector<double> t;
  for (int i = 0; i < o.steps; ++i) {
    const auto t0 = Clock::now();
    step();
    t.push_back(since(t0));
  }
  return max_over_ranks(g, median(t));
}

int64_t optimizer_bytes(const optim::Optimizer& opt) {
  int64_t b = 0;
  for (const auto& [name, t] : opt.state_dict().tensors) b += t.nbytes();
  return b;
}

// One DDP step on a fresh GPT, then the bytes it holds: counted tensor by tensor, and the
// MemoryTracker's growth per category over the whole phase (per rank).
void measure_memory(comm::ProcessGroup& g, const DDPBenchOptions& o, bool view, RankMemory& tally,
                    RankMemory& tracked) {
  const bool shared_tracker = std::string(g.backend_kind()) == "local";
  auto snap = [] {
    RankMemory m;
    m.params = cpu_memory().stats(MemCategory::params).current;
    m.grads = cpu_memory().stats(MemCategory::grads).current;
    m.buckets = cpu_memory().stats(MemCategory::comm).current;
    m.optimizer = cpu_memory().stats(MemCategory::optimizer).current;
    return m;
  };
  g.barrier().wait();
  const RankMemory before = snap();
  g.barrier().wait();
  {
    Gpt s = make_gpt(o, g.rank());
    auto ddp = apply_ddp(s.model, g, {.gradient_as_bucket_view = view});
    ddp->zero_grad();
    backward(ddp->forward_with([&] { return s.model->loss(s.idx, s.tgt); }));
    ddp->finalize();
    s.opt->step();
    g.barrier().wait();
    const RankMemory after = snap();
    const int64_t div = shared_tracker ? g.size() : 1;
    tracked.params = (after.params - before.params) / div;
    tracked.grads = (after.grads - before.grads) / div;
    tracked.buckets = (after.buckets - before.buckets) / div;
    tracked.optimizer = (after.optimizer - before.optimizer) / div;
    const Tensor& buf = ddp->reducer().buffer(0);
    for (const auto& p : s.model->parameters()) {
      tally.params += p.nbytes();
      if (p.grad().defined() && !p.grad().shares_storage(buf)) tally.grads += p.grad().nbytes();
    }
    tally.buckets = ddp->reducer().buffer_bytes();
    tally.optimizer = optimizer_bytes(*s.opt);
    g.barrier().wait();
  }
}

// One GPT training setup timed step by step: compute-only (no ddp) or DDP at a cap.
struct Variant {
  Gpt s;
  std::unique_ptr<DistributedDataParallel> ddp;
  double cap = 0;
  std::vector<double> times, waits;

  void step() {
    if (!ddp) {
      backward(s.model->loss(s.idx, s.tgt));
      s.opt->step();
      s.opt->zero_grad();
      return;
    }
    backward(ddp->forward_with([&] { return s.model->loss(s.idx, s.tgt); }));
    ddp->finalize();
    s.opt->step();
    ddp->zero_grad();
  }
};

// Runs every variant's steps interleaved (step i of each, in turn, each after a barrier),
// so a shared machine's changing load hits all of them alike.
void run_interleaved(comm::ProcessGroup& g, const DDPBenchOptions& o, std::vector<Variant>& vs) {
  for (int i = 0; i < o.warmup + o.steps; ++i)
    for (auto& v : vs) {
      g.barrier().wait();
      const auto t0 = Clock::now();
      v.step();
      if (i < o.warmup) continue;
      v.times.push_back(since(t0));
      if (v.ddp) v.waits.push_back(v.ddp->reducer().last_stats().wait_s);
    }
}

// The exposed communication of a step is the finalize() wait of the rank that finished
// backward last (the minimum over ranks): the others also wait for that rank, which is
// skew, not communication. Median over steps.
CapTiming summarize(comm::ProcessGroup& g, const DDPBenchOptions& o, Variant& v) {
  CapTiming t;
  t.cap_mb = v.cap;
  t.buckets = int64_t(v.ddp->reducer().plan().buckets.size());
  t.step_s = max_over_ranks(g, median(v.times));
  const Tensor w =
      comm::all_reduce_host(g, ops::from_vector(v.waits, {int64_t(v.waits.size())}), comm::ReduceOp::min);
  t.exposed_s = median(w.to_vector<double>());
  // The same buckets all-reduced alone, back to back.
  std::vector<Tensor> views;
  for (const auto& b : v.ddp->reducer().plan().buckets)
    views.push_back(ops::narrow(v.ddp->reducer().buffer(size_t(b.buffer)), 0, b.begin, b.numel()));
  t.comm_only_s = time_steps(g, o, [&] {
    std::vector<comm::Work> ws;
    for (auto& x : views) ws.push_back(g.all_reduce(x, comm::ReduceOp::avg));
    for (auto& x : ws) x.wait();
  });
  t.hidden_fraction = t.comm_only_s > 0 ? std::clamp(1.0 - t.exposed_s / t.comm_only_s, 0.0, 1.0) : 1.0;
  return t;
}

}  // namespace

DDPBenchReport bench_ddp(comm::ProcessGroup& g, const DDPBenchOptions& o) {
  STRATA_CHECK(o.steps >= 1 && o.warmup >= 0, "[bench ddp] steps must be >= 1 and warmup >= 0, got ", o.steps,
               " and ", o.warmup);
  const int prev_threads = get_num_threads();
  set_num_threads(o.threads);
  DDPBenchReport r;
  r.ranks = g.size();
  r.backend = g.backend_kind();
  r.threads = get_num_threads();
  r.steps = o.steps;

  // 1-4. GPT: compute only (the same per-rank work, no communication) and DDP at every
  // bucket cap (25 MiB is the headline), interleaved.
  {
    std::vector<double> caps = o.bucket_caps_mb;
    if (std::find(caps.begin(), caps.end(), 25.0) == caps.end()) caps.push_back(25.0);
    std::vector<Variant> vs;
    vs.push_back(Variant{make_gpt(o, g.rank()), nullptr, 0, {}, {}});
    for (double cap : caps) {
      Variant v{make_gpt(o, g.rank()), nullptr, cap, {}, {}};
      v.ddp = apply_ddp(v.s.model, g, {.bucket_cap_mb = cap, .first_bucket_mb = std::min(1.0, cap)});
      vs.push_back(std::move(v));
    }
    r.gpt_params = r.psi = vs[0].s.model->num_parameters();
    run_interleaved(g, o, vs);
    r.compute_step_s = max_over_ranks(g, median(vs[0].times));
    for (size_t k = 1; k < vs.size(); ++k) {
      const CapTiming t = summarize(g, o, vs[k]);
      if (std::find(o.bucket_caps_mb.begin(), o.bucket_caps_mb.end(), t.cap_mb) != o.bucket_caps_mb.end())
        r.caps.push_back(t);
      if (t.cap_mb == 25.0) {
        r.gpt_buckets = t.buckets;
        r.ddp_step_s = t.step_s;
        r.comm_only_s = t.comm_only_s;
        r.exposed_comm_s = t.exposed_s;
        r.hidden_fraction = t.hidden_fraction;
      }
    }
  }
  // 5. CNN throughput: a step of rank 0 alone, then a step of every rank, in turn.
  {
    auto solo = g.new_group({0}, "bench_solo");
    struct Cnn {
      std::shared_ptr<nn::CNN> model;
      std::unique_ptr<optim::SGD> opt;
      std::unique_ptr<DistributedDataParallel> ddp;
      std::vector<double> times;
    };
    Generator d(77 + uint64_t(g.rank()));
    const Tensor x = ops::normal({o.cnn_batch, o.cnn.in_channels, o.cnn.image_size, o.cnn.image_size}, 0, 1, d);
    const Tensor y = ops::to_dtype(ops::uniform({o.cnn_batch}, 0, double(o.cnn.classes) - 0.5, d), DType::i64);
    auto make = [&](comm::ProcessGroup* grp) {
      Generator gen(5);
      Cnn c;
      c.model = std::make_shared<nn::CNN>(o.cnn, gen);
      c.opt = std::make_unique<optim::SGD>(c.model->named_parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
      if (grp) c.ddp = apply_ddp(c.model, *grp, {});
      return c;
    };
    auto step = [&](Cnn& c) {
      const auto t0 = Clock::now();
      if (c.ddp) {
        backward(cross_entropy(c.ddp->forward(x), y));
        c.ddp->finalize();
        c.opt->step();
        c.ddp->zero_grad();
      } else {
        backward(cross_entropy(c.model->forward(x), y));
        c.opt->step();
        c.opt->zero_grad();
      }
      return since(t0);
    };
    std::optional<Cnn> one;
    if (solo) one = make(solo.get());
    Cnn all = make(&g), plain = make(nullptr);
    r.cnn_params = all.model->num_parameters();
    for (int i = 0; i < o.warmup + o.steps; ++i) {
      g.barrier().wait();
      if (one) {
        const double t = step(*one);
        if (i >= o.warmup) one->times.push_back(t);
      }
      g.barrier().wait();
      const double t = step(all);
      if (i >= o.warmup) all.times.push_back(t);
      g.barrier().wait();
      const double tp = step(plain);  // every rank at once, no communication: the host's ceiling
      if (i >= o.warmup) plain.times.push_back(tp);
    }
    const double t1 = max_over_ranks(g, one ? median(one->times) : 0.0);
    const double tn = max_over_ranks(g, median(all.times));
    r.cnn_samples_s_1 = double(o.cnn_batch) / t1;
    r.cnn_samples_s_n = double(o.cnn_batch) * g.size() / tn;
    r.scaling_efficiency = r.cnn_samples_s_n / (double(g.size()) * r.cnn_samples_s_1);
    r.cnn_samples_s_n_nocomm = double(o.cnn_batch) * g.size() / max_over_ranks(g, median(plain.times));
  }
  // 6. memory per rank.
  measure_memory(g, o, false, r.tally, r.tracked);
  measure_memory(g, o, true, r.tally_view, r.tracked_view);

  set_num_threads(prev_threads);
  return r;
}

DDPBenchReport bench_ddp_local(int ranks, const DDPBenchOptions& opts) {
  DDPBenchReport out;
  std::mutex mu;
  comm::run_local(ranks, [&](comm::ProcessGroup& g) {
    DDPBenchReport r = bench_ddp(g, opts);
    if (g.rank() == 0) {
      std::lock_guard<std::mutex> lk(mu);
      out = r;
    }
  });
  return out;
}

std::string DDPBenchReport::to_string() const {
  std::string s;
  char b[512];
  auto add = [&](const char* fmt, auto... a) {
    std::snprintf(b, sizeof b, fmt, a...);
    s += b;
  };
  add("DDP on %d ranks (%s backend), %d compute thread(s) per rank; times are medians over %d steps\n\n", ranks,
      backend.c_str(), threads, steps);
  add("GPT (%lld parameters, %lld bucket(s) at 25 MiB)\n\n", (long long)gpt_params, (long long)gpt_buckets);
  add("| measurement | value |\n| --- | --- |\n");
  add("| compute-only step | %.2f ms |\n", compute_step_s * 1e3);
  add("| DDP step | %.2f ms |\n", ddp_step_s * 1e3);
  add("| all-reduce of the step's buckets alone | %.2f ms |\n", comm_only_s * 1e3);
  add("| exposed communication (last rank's finalize wait) | %.2f ms |\n", exposed_comm_s * 1e3);
  add("| all-reduce time hidden behind backward | %.1f %% |\n", hidden_fraction * 100);
  add("| DDP overhead over compute-only | %+.1f %% |\n\n", (ddp_step_s / compute_step_s - 1) * 100);
  add("| bucket_cap_mb | buckets | DDP step | all-reduce alone | exposed | hidden |\n| --- | --- | --- | --- | --- | --- |\n");
  for (const auto& c : caps)
    add("| %g | %lld | %.2f ms | %.2f ms | %.2f ms | %.1f %% |\n", c.cap_mb, (long long)c.buckets, c.step_s * 1e3,
        c.comm_only_s * 1e3, c.exposed_s * 1e3, c.hidden_fraction * 100);
  add("\nCNN (%lld parameters), samples/s\n\n| ranks | samples/s |\n| --- | --- |\n", (long long)cnn_params);
  add("| 1 | %.1f |\n| %d | %.1f |\n", cnn_samples_s_1, ranks, cnn_samples_s_n);
  add("| %d, no communication | %.1f |\n", ranks, cnn_samples_s_n_nocomm);
  add("\nscaling efficiency: %.1f %% (the same ranks without communication reach %.1f %%, the host's "
      "ceiling; DDP keeps %.1f %% of it)\n\n",
      scaling_efficiency * 100, cnn_samples_s_n_nocomm / (double(ranks) * cnn_samples_s_1) * 100,
      cnn_samples_s_n / cnn_samples_s_n_nocomm * 100);
  const double p = double(psi);
  add("Per-rank memory, GPT + AdamW, Ψ = %lld (bytes, and multiples of Ψ)\n\n", (long long)psi);
  add("| category | counted | Ψ | tracker | counted, bucket views | Ψ | tracker |\n| --- | --- | --- | --- | --- | --- | --- |\n");
  auto row = [&](const char* name, int64_t a, int64_t ta, int64_t v, int64_t tv) {
    add("| %s | %lld | %.2f | %lld | %lld | %.2f | %lld |\n", name, (long long)a, double(a) / p, (long long)ta,
        (long long)v, double(v) / p, (long long)tv);
  };
  row("params", tally.params, tracked.params, tally_view.params, tracked_view.params);
  row("grads", tally.grads, tracked.grads, tally_view.grads, tracked_view.grads);
  row("bucket buffers (comm)", tally.buckets, tracked.buckets, tally_view.buckets, tracked_view.buckets);
  row("optimizer state", tally.optimizer, tracked.optimizer, tally_view.optimizer, tracked_view.optimizer);
  row("total", tally.total(), tracked.total(), tally_view.total(), tracked_view.total());
  add("\nformula: 4Ψ + 4Ψ + 8Ψ + 4Ψ = 20Ψ (16Ψ with gradient_as_bucket_view)\n");
  return s;
}

}  // namespace strata::parallel
