// The DDP measurements (see ddp_bench.h). Every timed step starts with a barrier so ranks
// time the same thing; step times are the slowest rank's per step, then the median.
#include "bench/ddp_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/comm/local.h>
#include <strata/core/memory.h>
#include <strata/core/threads.h>
#include <strata/optim/adam.h>
#include <strata/optim/sgd.h>
#include "bench/bench_util.h"
#include <strata/parallel/data/ddp.h>

namespace strata::bench {

using namespace strata::parallel;
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

// One replica: a model, its optimizer and a fixed batch; loss() runs forward.
struct Setup {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::function<Tensor()> loss;
};

Setup gpt_setup(const DDPBenchOptions& o, int rank) {
  Gpt g = make_gpt(o, rank);
  auto m = g.model;
  return {m, std::move(g.opt), [m, x = g.idx, y = g.tgt] { return m->loss(x, y); }};
}

Setup cnn_setup(const DDPBenchOptions& o, int rank) {
  Generator gen(5);
  auto m = std::make_shared<nn::CNN>(o.cnn, gen);
  auto opt = std::make_unique<optim::SGD>(m->named_parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  Generator d(77 + uint64_t(rank));
  const Tensor x = ops::normal({o.cnn_batch, o.cnn.in_channels, o.cnn.image_size, o.cnn.image_size}, 0, 1, d);
  const Tensor y = ops::to_dtype(ops::uniform({o.cnn_batch}, 0, double(o.cnn.classes) - 0.5, d), DType::i64);
  return {m, std::move(opt), [m, x, y] { return cross_entropy(m->forward(x), y); }};
}

// Per-step samples of one DDP row.
struct Samples {
  std::vector<double> step, bcast, hook, copy, fin, wait, cpu, early, bytes, modelled, ar, ar_cpu;
};

// One DDP row: its own replica, and the step and all-reduce-alone it times.
struct DdpRunner {
  Setup s;
  std::unique_ptr<DistributedDataParallel> ddp;
  OverlapRow row;
  Samples x;

  void step(comm::ProcessGroup& g, bool keep) {
    const double cpu0 = g.comm_thread_cpu_s();
    const comm::CommStats c0 = g.stats();
    const auto t0 = Clock::now();
    ddp->pre_forward();
    const double bcast = since(t0);
    Tensor loss = s.loss();
    ddp->post_forward({loss});
    backward(loss);
    ddp->finalize();
    s.opt->step();
    ddp->zero_grad();
    const double t = since(t0);
    if (!keep) return;
    const ReducerStats& st = ddp->reducer().last_stats();
    const comm::CommStats c1 = g.stats();
    x.step.push_back(t);
    x.bcast.push_back(bcast);
    x.hook.push_back(st.hook_s);
    x.copy.push_back(st.copy_s);
    x.fin.push_back(st.finalize_s);
    x.wait.push_back(st.wait_s);
    x.cpu.push_back(g.comm_thread_cpu_s() - cpu0);
    x.early.push_back(double(st.launched_in_backward));
    x.bytes.push_back(double(c1.total_bytes_sent() - c0.total_bytes_sent()));
    x.modelled.push_back(double(c1.total_bytes_modelled() - c0.total_bytes_modelled()));
  }

  // The buckets of the current plan all-reduced alone, back to back.
  void allreduce_alone(comm::ProcessGroup& g, bool keep) {
    const Reducer& r = ddp->reducer();
    std::vector<Tensor> views;
    for (const auto& b : r.plan().buckets) views.push_back(ops::narrow(r.buffer(size_t(b.buffer)), 0, b.begin, b.numel()));
    const double cpu0 = g.comm_thread_cpu_s();
    const auto t0 = Clock::now();
    std::vector<comm::Work> ws;
    for (auto& v : views) ws.push_back(g.all_reduce(v, comm::ReduceOp::avg));
    for (auto& w : ws) w.wait();
    if (!keep) return;
    x.ar.push_back(since(t0));
    x.ar_cpu.push_back(g.comm_thread_cpu_s() - cpu0);
  }
};

// Median per rank, then the largest over ranks.
double slowest(comm::ProcessGroup& g, const std::vector<double>& v) { return max_over_ranks(g, median(v)); }

// A synchronous step lasts until its slowest rank is done: the largest over ranks of each
// step. (Compute-only ranks never wait for each other, so taking each rank's median
// first would flatter them against DDP, whose ranks do.)
std::vector<double> synchronous(comm::ProcessGroup& g, const std::vector<double>& v) {
  return comm::all_reduce_host(g, ops::from_vector(v, {int64_t(v.size())}), comm::ReduceOp::max).to_vector<double>();
}

std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

// compute-only, rank 0 solo, and every DDP row with its all-reduce alone, interleaved.
ModelOverlap measure_overlap(comm::ProcessGroup& g, const DDPBenchOptions& o, const std::string& name, int64_t batch,
                             const std::function<Setup(int)>& make, const std::vector<std::pair<double, bool>>& rows) {
  ModelOverlap m;
  m.model = name;
  m.batch = batch;
  Setup compute = make(g.rank());
  std::optional<Setup> solo;
  if (g.rank() == 0) solo = make(g.rank());
  m.params = compute.model->num_parameters();
  std::vector<DdpRunner> ddp;
  for (auto [cap, view] : rows) {
    DdpRunner r{make(g.rank()), nullptr, {}, {}};
    r.ddp = apply_ddp(r.s.model, g,
                      {.bucket_cap_mb = cap, .first_bucket_mb = std::min(1.0, cap), .gradient_as_bucket_view = view});
    r.row.cap_mb = cap;
    r.row.bucket_view = view;
    ddp.push_back(std::move(r));
  }
  auto plain_step = [](Setup& s) {
    const auto t0 = Clock::now();
    backward(s.loss());
    s.opt->step();
    s.opt->zero_grad();
    return since(t0);
  };
  std::vector<double> t_compute, t_solo;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    const bool keep = i >= o.warmup;
    g.barrier().wait();
    const double tc = plain_step(compute);
    if (keep) t_compute.push_back(tc);
    g.barrier().wait();
    if (solo) {
      const double ts = plain_step(*solo);
      if (keep) t_solo.push_back(ts);
    }
    for (size_t k = 0; k < ddp.size(); ++k) {  // rotated, so no row always runs first
      DdpRunner& r = ddp[(k + size_t(i)) % ddp.size()];
      g.barrier().wait();
      r.step(g, keep);
      g.barrier().wait();
      r.allreduce_alone(g, keep);
    }
  }
  m.compute_steps = synchronous(g, t_compute);
  m.compute_step_s = median(m.compute_steps);
  m.solo_step_s = max_over_ranks(g, solo ? median(t_solo) : 0.0);
  for (auto& r : ddp) {
    OverlapRow& w = r.row;
    const Samples& x = r.x;
    w.buckets = int64_t(r.ddp->reducer().plan().buckets.size());
    w.steps = synchronous(g, x.step);
    w.step_s = median(w.steps);
    w.allreduce_s = median(synchronous(g, x.ar));
    w.exposed_s = median(minus(w.steps, m.compute_steps));
    w.hidden = 1.0 - w.exposed_s / w.allreduce_s;
    w.broadcast_s = slowest(g, x.bcast);
    w.hook_s = slowest(g, x.hook);
    w.copy_s = slowest(g, x.copy);
    w.finalize_s = slowest(g, x.fin);
    w.wait_s = slowest(g, x.wait);
    w.comm_cpu_s = slowest(g, x.cpu);
    w.allreduce_cpu_s = slowest(g, x.ar_cpu);
    w.launched_in_backward = int64_t(median(x.early));
    // Rank 0's bytes, the same on every rank of the report.
    const Tensor b = ops::from_vector(std::vector<double>{median(x.bytes), median(x.modelled)}, {2});
    const std::vector<double> b0 = comm::all_reduce_host(g, g.rank() == 0 ? b : ops::zeros({2}, DType::f64),
                                                         comm::ReduceOp::sum).to_vector<double>();
    w.bytes_sent = int64_t(b0[0]);
    w.bytes_kind = comm::bytes_kind(int64_t(b0[0]), int64_t(b0[1]));
    m.rows.push_back(w);
  }
  return m;
}

}  // namespace

DDPBenchReport bench_ddp(comm::ProcessGroup& g, const DDPBenchOptions& o) {
  STRATA_CHECK(o.steps >= 1 && o.warmup >= 1, "[bench ddp] steps must be >= 1 and warmup >= 1 (the first step "
               "rebuilds the buckets), got ", o.steps, " and ", o.warmup);
  const int prev_threads = get_num_threads();
  set_num_threads(o.threads);
  DDPBenchReport r;
  r.ranks = g.size();
  r.backend = g.backend_kind();
  r.algorithm = comm::algorithm_name(g.algorithm());
  r.threads = get_num_threads();
  r.steps = o.steps;

  std::vector<std::pair<double, bool>> gpt_rows = {{25, true}, {25, false}};
  for (double cap : o.bucket_caps_mb)
    if (cap != 25) gpt_rows.emplace_back(cap, true);
  r.gpt = measure_overlap(g, o, "GPT", o.gpt_batch, [&](int rank) { return gpt_setup(o, rank); }, gpt_rows);
  r.cnn = measure_overlap(g, o, "CNN", o.cnn_batch, [&](int rank) { return cnn_setup(o, rank); },
                          {{25, true}, {25, false}});
  r.psi = r.gpt.params;
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

namespace {

std::string fmt(const char* f, auto... a) {
  char b[512];
  std::snprintf(b, sizeof b, f, a...);
  return b;
}

std::string row_name(const OverlapRow& w) {
  return fmt("%g MiB, %s", w.cap_mb, w.bucket_view ? "bucket views" : "copies");
}

std::string overlap_table(const ModelOverlap& m) {
  std::string s;
  const OverlapRow& h = m.rows.at(0);
  s += fmt("%s (%lld parameters, %lld per rank per step)\n\n", m.model.c_str(), (long long)m.params,
           (long long)m.batch);
  s += "| measurement | value |\n| --- | --- |\n";
  s += fmt("| compute-only step, all ranks at once (no DDP) | %.2f ms |\n", m.compute_step_s * 1e3);
  s += fmt("| DDP step (%s, %lld buckets) | %.2f ms |\n", row_name(h).c_str(), (long long)h.buckets, h.step_s * 1e3);
  s += fmt("| all-reduce of the same buckets alone | %.2f ms |\n", h.allreduce_s * 1e3);
  s += fmt("| **exposed = DDP step - compute-only step** (median of the per-step differences) | **%.2f ms** |\n",
           h.exposed_s * 1e3);
  s += fmt("| **hidden = 1 - exposed / all-reduce alone** | **%.1f %%** |\n", h.hidden * 100);
  s += fmt("| host ceiling: compute-only step, all ranks at once vs rank 0 alone | %.2f vs %.2f ms (%+.1f %%) |\n",
           m.compute_step_s * 1e3, m.solo_step_s * 1e3, (m.compute_step_s / m.solo_step_s - 1) * 100);
  s += fmt("| host ceiling: share of the all-reduce alone that is not comm-thread CPU time (the most that can "
           "hide while every core computes) | %.1f %% |\n\n",
           (1 - h.allreduce_cpu_s / h.allreduce_s) * 100);
  s += "Where DDP's added time goes, per step (medians; the comm thread's CPU time is taken from the same cores "
       "as compute when every core is busy):\n\n";
  s += "| row | step | exposed | hidden | all-reduce alone | buffer broadcast | hooks | of which copies | "
       "finalize | of which waiting | comm thread CPU (step) | comm thread CPU (all-reduce alone) | "
       "buckets launched during backward | bytes sent per step (rank 0) |\n";
  s += "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& w : m.rows)
    s += fmt("| %s | %.2f ms | %.2f ms | %.1f %% | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms | "
             "%.2f ms | %.2f ms | %lld of %lld | %lld (%s) |\n",
             row_name(w).c_str(), w.step_s * 1e3, w.exposed_s * 1e3, w.hidden * 100, w.allreduce_s * 1e3,
             w.broadcast_s * 1e3, w.hook_s * 1e3, w.copy_s * 1e3, w.finalize_s * 1e3, w.wait_s * 1e3,
             w.comm_cpu_s * 1e3, w.allreduce_cpu_s * 1e3, (long long)w.launched_in_backward, (long long)w.buckets,
             (long long)w.bytes_sent, w.bytes_kind.c_str());
  return s + "\n";
}

}  // namespace

std::string DDPBenchReport::to_string() const {
  std::string s;
  s += fmt("DDP on %d ranks (%s backend, algorithm %s), %d compute thread(s) per rank; medians over %d steps, "
           "slowest rank; every variant interleaved step by step\n\n",
           ranks, backend.c_str(), algorithm.c_str(), threads, steps);
  s += overlap_table(gpt);
  s += overlap_table(cnn);
  const OverlapRow& c = cnn.rows.at(0);
  const double one = double(cnn.batch) / cnn.solo_step_s, n_nocomm = double(cnn.batch) * ranks / cnn.compute_step_s,
               n_ddp = double(cnn.batch) * ranks / c.step_s;
  s += "CNN samples/s (weak scaling)\n\n| ranks | samples/s |\n| --- | --- |\n";
  s += fmt("| 1 (rank 0 alone) | %.1f |\n| %d, no communication | %.1f |\n| %d, DDP (%s) | %.1f |\n", one, ranks,
           n_nocomm, ranks, row_name(c).c_str(), n_ddp);
  s += fmt("\nscaling efficiency %.1f %%; the same ranks without communication reach %.1f %% (the host's "
           "ceiling), of which DDP keeps %.1f %%\n\n",
           n_ddp / (ranks * one) * 100, n_nocomm / (ranks * one) * 100, n_ddp / n_nocomm * 100);
  const double p = double(psi);
  s += fmt("Per-rank memory, GPT + AdamW, Ψ = %lld (bytes, and multiples of Ψ)\n\n", (long long)psi);
  s += "| category | counted | Ψ | tracker | counted, bucket views | Ψ | tracker |\n"
       "| --- | --- | --- | --- | --- | --- | --- |\n";
  auto row = [&](const char* name, int64_t a, int64_t ta, int64_t v, int64_t tv) {
    s += fmt("| %s | %lld | %.2f | %lld | %lld | %.2f | %lld |\n", name, (long long)a, double(a) / p, (long long)ta,
             (long long)v, double(v) / p, (long long)tv);
  };
  row("params", tally.params, tracked.params, tally_view.params, tracked_view.params);
  row("grads", tally.grads, tracked.grads, tally_view.grads, tracked_view.grads);
  row("bucket buffers (comm)", tally.buckets, tracked.buckets, tally_view.buckets, tracked_view.buckets);
  row("optimizer state", tally.optimizer, tracked.optimizer, tally_view.optimizer, tracked_view.optimizer);
  row("total", tally.total(), tracked.total(), tally_view.total(), tracked_view.total());
  s += "\nformula: 4Ψ + 4Ψ + 8Ψ + 4Ψ = 20Ψ (16Ψ with gradient_as_bucket_view)\n";
  return s;
}

}  // namespace strata::bench
