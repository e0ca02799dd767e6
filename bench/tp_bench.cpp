// The tensor-parallel measurements (see tp_bench.h): each layout on a fresh model and a
// fresh local world, so the allocator's counters show what one layout holds.
#include "bench/tp_bench.h"

#include <cstdio>

#include <strata/autograd/engine.h>
#include <strata/comm/local.h>
#include <strata/core/memory.h>
#include <strata/core/threads.h>
#include <strata/nn/gpt_plans.h>
#include <strata/optim/adam.h>
#include <strata/parallel/memory_plan.h>
#include <strata/parallel/parallelize.h>
#include "bench/bench_util.h"

namespace strata::bench {

using namespace strata::parallel;
namespace {

double comm_seconds(const comm::CommStats& s) {
  double t = 0;
  for (const comm::OpStats& op : s.ops) t += op.seconds;
  return t;
}

TpBenchResult run_layout(comm::ProcessGroup& g, const TpBenchOptions& o, bool sp, int64_t sharded) {
  const int n = g.size();
  TpBenchResult r{.tp = n, .sp = sp};
  g.barrier().wait();
  const int64_t params0 = cpu_memory().stats(MemCategory::params).current;
  const int64_t act0 = cpu_memory().stats(MemCategory::activations).current;
  g.barrier().wait();
  {
    std::shared_ptr<comm::ProcessGroup> world(&g, [](comm::ProcessGroup*) {});
    Generator gen(17);
    auto model = std::make_shared<nn::GPT>(o.gpt, gen);
    const int64_t psi = model->num_parameters();
    const ParallelDims dims = ParallelDims{.tp = n}.resolve(n);
    auto pm = parallelize(model, comm::DeviceMesh(world, dims.mesh_shape()),
                          {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {},
                           .tp_plan = n > 1 ? nn::gpt_tp_plan(o.gpt, sp) : TpPlan{},
                           .make_optimizer = [](optim::NamedTensors p) {
                             return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 1e-4});
                           }});
    Generator d(1000);  // the same global batch on every rank and at every tp
    const double v = double(o.gpt.vocab);
    const Tensor idx = ops::to_dtype(ops::uniform({o.batch, o.gpt.block_size}, 0, v - 0.5, d), DType::i64);
    const Tensor tgt = ops::to_dtype(ops::uniform({o.batch, o.gpt.block_size}, 0, v - 0.5, d), DType::i64);
    auto step = [&] {
      pm->zero_grad();
      backward(pm->forward_with([&] { return model->loss(idx, tgt); }));
      pm->finalize();
      pm->step();
    };
    detail::warm_up_then_reset_peaks(g, o.warmup, step);
    comm::ProcessGroup& tp = *pm->mesh()["tp"];
    tp.reset_stats();
    std::vector<double> t;
    for (int i = 0; i < o.steps; ++i) {
      const auto t0 = detail::BenchClock::now();
      step();
      t.push_back(detail::since(t0));
    }
    const comm::CommStats st = tp.stats();
    r.bytes_sent = st.total_bytes_sent() / o.steps;
    r.comm_s = detail::max_over_ranks(g, comm_seconds(st) / o.steps);
    r.step_s = detail::max_over_ranks(g, detail::median(t));
    g.barrier().wait();
    r.params = (cpu_memory().stats(MemCategory::params).current - params0) / n;
    r.peak_activations = (cpu_memory().stats(MemCategory::activations).peak - act0) / n;
    MemoryPlanInput in{};
    in.param_elements = psi;
    in.tp = n;
    in.tp_sharded_elements = sharded;
    r.params_predicted = plan_memory(in).params;
    g.barrier().wait();
  }
  return r;
}

}  // namespace

TpBenchReport bench_tp(const TpBenchOptions& opts) {
  TpBenchReport out;
  Generator gen(17);
  const nn::GPT whole(opts.gpt, gen);
  out.psi = whole.num_parameters();
  const int saved = get_num_threads();
  set_num_threads(1);
  for (int n : opts.tps)
    for (bool sp : {false, true}) {
      if (sp && n == 1) continue;
      const int64_t sharded = n > 1 ? tp_sharded_elements(whole, nn::gpt_tp_plan(opts.gpt, sp)) : 0;
      comm::run_local(n, [&](comm::ProcessGroup& g) {
        TpBenchResult r = run_layout(g, opts, sp, sharded);
        if (g.rank() == 0) out.rows.push_back(r);
      });
    }
  set_num_threads(saved);
  return out;
}

std::string TpBenchReport::to_string() const {
  std::string s = "| tp | SP | step (ms) | tp comm (ms) | comm / step | sent per step (KiB) | params per rank (KiB) | "
                  "predicted | peak activations per rank (MiB) |\n|---|---|---|---|---|---|---|---|---|\n";
  char line[320];
  for (const TpBenchResult& r : rows) {
    std::snprintf(line, sizeof line, "| %d | %s | %.1f | %.1f | %.0f%% | %.0f | %.1f | %.1f | %.2f |\n", r.tp,
                  r.sp ? "yes" : "no", 1e3 * r.step_s, 1e3 * r.comm_s, 100 * r.comm_fraction(),
                  double(r.bytes_sent) / 1024.0, double(r.params) / 1024.0, double(r.params_predicted) / 1024.0,
                  double(r.peak_activations) / (1024.0 * 1024.0));
    s += line;
  }
  return s;
}

}  // namespace strata::bench
