// The context-parallel measurements (see cp_bench.h): each layout on a fresh model and a
// fresh local world, so the allocator's counters show what one layout holds.
#include "bench/cp_bench.h"

#include <time.h>

#include <cstdio>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/comm/local.h>
#include <strata/core/memory.h>
#include <strata/core/threads.h>
#include <strata/optim/adam.h>
#include <strata/parallel/context/context_parallel.h>
#include <strata/parallel/parallelize.h>
#include "bench/bench_util.h"

namespace strata::bench {

using namespace strata::parallel;
namespace {

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// One layer's attention, forward + backward, on this rank's q|k|v: ring attention over
// the group, or (compute_only) the same blocks without communication; cp 1: the fused op.
double time_attention(comm::ProcessGroup& g, const Tensor& qkv, int64_t hd, bool compute_only, CpSplit split, int reps) {
  std::shared_ptr<comm::ProcessGroup> grp(&g, [](comm::ProcessGroup*) {});
  std::vector<double> t;
  for (int i = 0; i < reps + 1; ++i) {
    Tensor x = qkv.detach();
    x.set_requires_grad(true);
    g.barrier().wait();
    const auto t0 = detail::BenchClock::now();
    Tensor y = g.size() == 1 ? causal_attention(x, hd)
                             : compute_only ? parallel::detail::ring_attention_compute_only(x, hd, g.size(), g.rank(), split)
                                            : ring_attention(x, hd, grp, split);
    backward(sum(y));
    if (i > 0) t.push_back(detail::since(t0));  // the first is warm-up
  }
  return detail::max_over_ranks(g, detail::median(t));
}

CpBenchResult run_layout(comm::ProcessGroup& g, const CpBenchOptions& o, int64_t seq) {
  const int n = g.size();
  CpBenchResult r{.cp = n, .seq = seq};
  nn::GPTConfig cfg = o.gpt;
  cfg.block_size = seq;
  const int64_t hd = cfg.n_embd / cfg.n_head;
  g.barrier().wait();
  const int64_t act0 = cpu_memory().stats(MemCategory::activations).current;
  g.barrier().wait();
  {
    std::shared_ptr<comm::ProcessGroup> world(&g, [](comm::ProcessGroup*) {});
    Generator gen(17);
    auto model = std::make_shared<nn::GPT>(cfg, gen);
    const ParallelDims dims = ParallelDims{.cp = n}.resolve(n);
    auto pm = parallelize(model, comm::DeviceMesh(world, dims.mesh_shape()),
                          {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {}, .tp_plan = {},
                           .make_optimizer = [](optim::NamedTensors p) {
                             return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 1e-4});
                           }});
    Generator d(1000);  // the same global batch on every rank and at every cp
    const double v = double(cfg.vocab);
    const Tensor idx = ops::to_dtype(ops::uniform({o.batch, seq}, 0, v - 0.5, d), DType::i64);
    const Tensor tgt = ops::to_dtype(ops::uniform({o.batch, seq}, 0, v - 0.5, d), DType::i64);
    auto step = [&] {
      pm->zero_grad();
      backward(pm->forward_with([&] { return model->loss(idx, tgt); }));
      pm->finalize();
      pm->step();
    };
    detail::warm_up_then_reset_peaks(g, o.warmup, step);
    std::vector<double> t;
    for (int i = 0; i < o.steps; ++i) {
      const auto t0 = detail::BenchClock::now();
      step();
      t.push_back(detail::since(t0));
    }
    r.step_s = detail::max_over_ranks(g, detail::median(t));
    g.barrier().wait();
    r.peak_activations = (cpu_memory().stats(MemCategory::activations).peak - act0) / n;
    g.barrier().wait();
  }
  r.predicted_activations = cp_activation_bytes({.batch = o.batch, .seq = seq, .embd = cfg.n_embd, .heads = cfg.n_head,
                                                 .layers = cfg.n_layer, .vocab = cfg.vocab, .bytes_per_element = 4,
                                                 .cp = n});
  Generator qg(5 + uint64_t(g.rank()));
  const Tensor qkv = ops::normal({o.batch, seq / n, 3 * cfg.n_embd}, 0.0, 1.0, qg);
  const int reps = 3;
  g.reset_stats();
  r.attn_s = time_attention(g, qkv, hd, false, CpSplit::zigzag, reps);
  if (n > 1) r.kv_bytes = g.stats()[comm::OpKind::batch_isend_irecv].bytes_sent / (reps + 1);
  r.kv_bytes_formula = [&] {
    const CpLayerBytes b = cp_layer_bytes(o.batch, seq, cfg.n_embd, n, 4);
    return b.forward + b.backward;
  }();
  r.attn_compute_s = n > 1 ? time_attention(g, qkv, hd, true, CpSplit::zigzag, reps) : r.attn_s;
  return r;
}

}  // namespace

CpBenchReport bench_cp(const CpBenchOptions& opts) {
  CpBenchReport out;
  const int saved = get_num_threads();
  set_num_threads(1);
  for (int64_t seq : opts.seqs)
    for (int n : opts.cps)
      comm::run_local(n, [&](comm::ProcessGroup& g) {
        CpBenchResult r = run_layout(g, opts, seq);
        if (g.rank() == 0) out.rows.push_back(r);
      });
  // Balance: causal ring attention's compute per rank, zigzag against plain, at every
  // cp > 1 and the largest sequence length (thread CPU time, so the ranks' sharing of the
  // cores does not count).
  const int64_t seq = opts.seqs.back();
  for (int n : opts.cps) {
    if (n < 2) continue;
    for (CpSplit split : {CpSplit::zigzag, CpSplit::plain}) {
      CpBalanceResult b{.split = cp_split_name(split), .cp = n, .seq = seq, .busy_s = std::vector<double>(size_t(n))};
      comm::run_local(n, [&](comm::ProcessGroup& g) {
        Generator qg(5 + uint64_t(g.rank()));
        const int64_t hd = opts.gpt.n_embd / opts.gpt.n_head;
        const Tensor qkv = ops::normal({opts.batch, seq / n, 3 * opts.gpt.n_embd}, 0.0, 1.0, qg);
        double busy = 0;
        for (int i = 0; i < 3; ++i) {
          Tensor x = qkv.detach();
          x.set_requires_grad(true);
          const double t0 = thread_cpu_s();
          backward(sum(parallel::detail::ring_attention_compute_only(x, hd, n, g.rank(), split)));
          if (i > 0) busy += thread_cpu_s() - t0;
        }
        b.busy_s[size_t(g.rank())] = busy / 2;
      });
      out.balance.push_back(b);
    }
  }
  set_num_threads(saved);
  return out;
}

std::string CpBenchReport::to_string() const {
  std::string s =
      "| T | cp | step (ms) | attention fwd+bwd per layer (ms) | compute only (ms) | exposed comm (ms) | "
      "K/V sent per layer (KiB) | formula (KiB) | peak activations per rank (MiB) | predicted (MiB) |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  char line[400];
  for (const CpBenchResult& r : rows) {
    std::snprintf(line, sizeof line, "| %lld | %d | %.1f | %.2f | %.2f | %.2f | %.0f | %.0f | %.2f | %.2f |\n",
                  (long long)r.seq, r.cp, 1e3 * r.step_s, 1e3 * r.attn_s, 1e3 * r.attn_compute_s, 1e3 * r.exposed_s(),
                  double(r.kv_bytes) / 1024.0, double(r.kv_bytes_formula) / 1024.0,
                  double(r.peak_activations) / (1024.0 * 1024.0), double(r.predicted_activations) / (1024.0 * 1024.0));
    s += line;
  }
  s += "\n| split | cp | T | busy per rank (ms, ring attention fwd+bwd, compute only) | max / min |\n|---|---|---|---|---|\n";
  for (const CpBalanceResult& b : balance) {
    std::string per;
    double lo = 1e30, hi = 0;
    for (double x : b.busy_s) {
      char v[32];
      std::snprintf(v, sizeof v, "%.1f", 1e3 * x);
      per += (per.empty() ? "" : ", ") + std::string(v);
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    std::snprintf(line, sizeof line, "| %s | %d | %lld | %s | %.2f |\n", b.split.c_str(), b.cp, (long long)b.seq,
                  per.c_str(), lo > 0 ? hi / lo : 0.0);
    s += line;
  }
  return s;
}

}  // namespace strata::bench
