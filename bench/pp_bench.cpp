// The pipeline benchmark (see pp_bench.h).
#include "bench/pp_bench.h"

#include <chrono>
#include <cstdio>

#include <strata/comm/device_mesh.h>
#include <strata/core/memory.h>
#include <strata/core/rng.h>
#include <strata/optim/sgd.h>
#include <strata/parallel/parallelize.h>
#include <strata/tensor/ops.h>

namespace strata::bench {
namespace {

double host_reduce(comm::ProcessGroup& g, double v, comm::ReduceOp op) {
  return comm::all_reduce_host(g, ops::full({1}, v, DType::f64), op).item<double>();
}

}  // namespace

std::vector<PpBenchRow> bench_pp(std::shared_ptr<comm::ProcessGroup> world,
                                 const std::function<std::shared_ptr<nn::Module>()>& make_model,
                                 const std::function<parallel::PipelinePlan(const nn::Module&)>& make_plan,
                                 const PpBenchOptions& o) {
  using parallel::ScheduleKind;
  const int pp = world->size();
  std::vector<PpBenchRow> rows;
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved})
    for (int m : o.microbatches) {
      const int v = k == ScheduleKind::interleaved ? 2 : 1;
      const parallel::ScheduleShape shape{k, pp, m, v};
      if (!shape.invalid().empty()) continue;
      auto model = make_model();
      parallel::PipelinePlan plan = make_plan(*model);
      if (int64_t(model->child(plan.blocks)->named_children().size()) < int64_t(pp) * v) continue;
      const parallel::ParallelDims dims = parallel::ParallelDims{.dp = 1, .tp = 1, .pp = pp}.resolve(pp);
      auto pm = parallel::parallelize(
          model, comm::DeviceMesh(world, dims.mesh_shape()),
          {.dims = dims, .ddp = {}, .fsdp_prefetch = true, .fsdp_wrap = {}, .tp_plan = {},
           .pipeline = {.schedule = k, .microbatches = m, .virtual_stages = v}, .pp_plan = std::move(plan),
           .make_optimizer = [](optim::NamedTensors p) {
             return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 0.0, .momentum = 0.0});
           }});
      Generator gen(7);
      const Shape shp{o.per_mb * m, o.seq};
      const Tensor x = ops::to_dtype(ops::uniform({shp[0] * shp[1]}, 0.0, double(o.vocab) - 0.5, gen), DType::i64);
      const Tensor tokens = ops::reshape(x, shp);
      double step = 0, busy = 0, wait = 0;
      int64_t peak = 0;
      for (int s = 0; s <= o.steps; ++s) {
        world->barrier().wait();
        cpu_memory().reset_peaks();
        const int64_t before = cpu_memory().stats(MemCategory::activations).current;
        const auto t0 = std::chrono::steady_clock::now();
        pm->pipeline_step(tokens, tokens, shp);
        pm->finalize();
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        pm->zero_grad();
        if (s == 0) continue;  // warm-up
        step += dt;
        busy += pm->pipeline()->last_stats().compute_s;
        wait += pm->pipeline()->last_stats().comm_s;
        peak = std::max(peak, cpu_memory().stats(MemCategory::activations).peak - before);
      }
      step /= o.steps;
      busy /= o.steps;
      wait /= o.steps;
      PpBenchRow r{.schedule = parallel::schedule_name(k), .m = m, .v = v};
      r.step_s = host_reduce(*world, step, comm::ReduceOp::max);
      r.busy_s = host_reduce(*world, busy, comm::ReduceOp::sum) / pp;
      r.bubble = host_reduce(*world, 1.0 - busy / step, comm::ReduceOp::sum) / pp;
      r.bubble_busiest = 1.0 - host_reduce(*world, busy, comm::ReduceOp::max) / r.step_s;
      r.wait_s = host_reduce(*world, wait, comm::ReduceOp::sum) / pp;
      r.formula = parallel::bubble_formula(shape);
      r.peak_act = peak;  // this rank's; rank 0 prints its own (stage 0)
      rows.push_back(r);
    }
  return rows;
}

std::string format_pp_bench(const std::vector<PpBenchRow>& rows, int pp) {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "pipeline over %d rank(s): step = slowest rank, busy = mean forward+backward time, wait = mean time "
                "blocked on exchanges;\nbubble = 1 - busy/step of the busiest rank (mean over ranks beside it)\n",
                pp);
  out += buf;
  std::snprintf(buf, sizeof buf, "%-12s %4s %2s %9s %9s %9s %8s %8s %8s %8s %16s\n", "schedule", "m", "v", "step ms",
                "busy ms", "wait ms", "bubble", "mean", "formula", "ratio", "stage-0 act MiB");
  out += buf;
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "%-12s %4d %2d %9.2f %9.2f %9.2f %8.3f %8.3f %8.3f %8.2f %16.2f\n", r.schedule.c_str(),
                  r.m, r.v, r.step_s * 1e3, r.busy_s * 1e3, r.wait_s * 1e3, r.bubble_busiest, r.bubble, r.formula,
                  r.formula > 0 ? r.bubble_busiest / r.formula : 0.0, double(r.peak_act) / (1 << 20));
    out += buf;
  }
  return out;
}

}  // namespace strata::bench
