// The pipeline benchmark (see pp_bench.h).
#include "bench/pp_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <strata/comm/device_mesh.h>
#include <strata/core/error.h>
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
  std::vector<int> modes;  // 1: inline exchanges, 0: comm threads, -1: the executor's default
  if (o.exchanges == "auto") modes.push_back(-1);
  if (o.exchanges == "inline" || o.exchanges == "both") modes.push_back(1);
  if (o.exchanges == "thread" || o.exchanges == "both") modes.push_back(0);
  STRATA_CHECK(!modes.empty(), "bench pp: --exchanges is auto, inline, thread or both, got '", o.exchanges, "'");
  std::vector<ScheduleKind> kinds;
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved, ScheduleKind::zb_h1})
    if (o.schedules.empty() ||
        std::find(o.schedules.begin(), o.schedules.end(), parallel::schedule_name(k)) != o.schedules.end())
      kinds.push_back(k);
  std::vector<PpBenchRow> rows;
  for (ScheduleKind k : kinds)
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
      struct Acc {
        double step = 0, busy = 0, cpu = 0, wait = 0;
        int64_t peak = 0;
        std::vector<double> steps, busies;  // per timed step, this rank's
      };
      std::vector<Acc> acc(modes.size());
      // One warm-up step per mode, then the modes' steps alternate (same minutes, same
      // load), which one goes first swapping every round.
      for (int s = 0; s <= o.steps; ++s)
        for (size_t i = 0; i < modes.size(); ++i) {
          const size_t mi = s % 2 ? modes.size() - 1 - i : i;
          if (modes[mi] >= 0) pm->pipeline()->set_inline_exchanges(modes[mi] == 1);
          world->barrier().wait();
          cpu_memory().reset_peaks();
          const int64_t before = cpu_memory().stats(MemCategory::activations).current;
          const auto t0 = std::chrono::steady_clock::now();
          pm->forward_backward({tokens, tokens});
          pm->finalize();
          const auto t1 = std::chrono::steady_clock::now();
          const double dt = std::chrono::duration<double>(t1 - t0).count();
          if (const char* tl = std::getenv("STRATA_PP_TIMELINE"); tl != nullptr && *tl != 0) {
            // The whole step (forward_backward + finalize), after the executor's block for it.
            const std::string path = std::string(tl) + "." + std::to_string(world->rank());
            if (FILE* f = std::fopen(path.c_str(), "a")) {
              const auto ns = [](auto t) {
                return (long long)std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
              };
              std::fprintf(f, "S %lld %lld\n", ns(t0), ns(t1));
              std::fclose(f);
            }
          }
          pm->zero_grad();
          if (s == 0) continue;  // warm-up
          Acc& a = acc[mi];
          a.step += dt;
          a.busy += pm->pipeline()->last_stats().compute_s;
          a.steps.push_back(dt);
          a.busies.push_back(pm->pipeline()->last_stats().compute_s);
          a.cpu += pm->pipeline()->last_stats().compute_cpu_s;
          a.wait += pm->pipeline()->last_stats().comm_s;
          a.peak = std::max(a.peak, cpu_memory().stats(MemCategory::activations).peak - before);
        }
      const size_t first = rows.size();
      for (size_t mi = 0; mi < modes.size(); ++mi) {
        const double step = acc[mi].step / o.steps, busy = acc[mi].busy / o.steps, wait = acc[mi].wait / o.steps;
        PpBenchRow r;
        r.schedule = parallel::schedule_name(k);
        r.m = m;
        r.v = v;
        r.exchanges = (modes[mi] < 0 ? pm->pipeline()->inline_exchanges() : modes[mi] == 1) ? "inline" : "thread";
        r.step_s = host_reduce(*world, step, comm::ReduceOp::max);
        const Tensor all_busy = comm::all_gather_host(*world, ops::full({1}, busy, DType::f64));
        std::vector<double> rank_busy(all_busy.data<double>(), all_busy.data<double>() + pp);
        double sum_busy = 0, max_busy = 0;
        for (double b : rank_busy) {
          sum_busy += b;
          max_busy = std::max(max_busy, b);
        }
        r.busy_s = sum_busy / pp;
        r.busy_cpu_s = host_reduce(*world, acc[mi].cpu / o.steps, comm::ReduceOp::sum) / pp;
        r.bubble = host_reduce(*world, 1.0 - busy / step, comm::ReduceOp::sum) / pp;
        r.bubble_busiest = 1.0 - max_busy / r.step_s;
        r.wait_s = host_reduce(*world, wait, comm::ReduceOp::sum) / pp;
        r.formula = parallel::bubble_formula(shape);
        r.formula_imbalance = parallel::imbalance_bubble(shape, rank_busy);
        r.peak_act = acc[mi].peak;  // this rank's; rank 0 prints its own (stage 0)
        {
          // Per step: the busiest rank's 1 - busy / (slowest rank's step); the median over
          // steps is not moved by the few steps another process (or RT throttling) stalled.
          const int n = int(acc[mi].steps.size());
          std::vector<double> mine(acc[mi].steps);
          mine.insert(mine.end(), acc[mi].busies.begin(), acc[mi].busies.end());
          const Tensor all = comm::all_gather_host(*world, ops::from_vector(mine, {int64_t(mine.size())}));
          const double* d = all.data<double>();
          std::vector<double> per_step;
          for (int k = 0; k < n; ++k) {
            double st = 0, bu = 0;
            for (int q = 0; q < pp; ++q) {
              st = std::max(st, d[size_t(q) * 2 * n + size_t(k)]);
              bu = std::max(bu, d[size_t(q) * 2 * n + size_t(n + k)]);
            }
            per_step.push_back(1.0 - bu / st);
          }
          std::sort(per_step.begin(), per_step.end());
          r.bubble_median = per_step.empty() ? 0.0 : per_step[per_step.size() / 2];
        }
        rows.push_back(r);
      }
      if (modes.size() == 2) rows[first].thread_ratio = rows[first].step_s / rows[first + 1].step_s;
    }
  return rows;
}

std::string format_pp_bench(const std::vector<PpBenchRow>& rows, int pp) {
  std::string out;
  char buf[320];
  out += "pipeline over " + std::to_string(pp) +
         " rank(s): step = slowest rank, busy = mean forward+backward time (cpu: CPU time in it), wait = mean time blocked on exchanges;\n"
         "bubble = 1 - busy/step of the busiest rank (mean over ranks beside it); formula = (p-1)/(v m+p-1); "
         "ratio = bubble/formula;\nimbal. = the busiest rank's simulated bubble with each rank's forwards and backwards "
         "as long as its measured busy time says (the ideal for these stages), and bubble/imbal.;\n"
         "med. = the median over steps of the busiest rank's 1 - busy/step (robust to steps stalled by other processes), "
         "and med./formula;\n"
         "exch = exchanges on comm threads or inline\n";
  const bool both = std::any_of(rows.begin(), rows.end(), [](const PpBenchRow& r) { return r.thread_ratio > 0; });
  std::snprintf(buf, sizeof buf, "%-12s %4s %2s %-6s %9s %9s %8s %9s %8s %8s %8s %8s %8s %8s %8s %8s%s %16s\n", "schedule", "m",
                "v", "exch", "step ms", "busy ms", "cpu ms", "wait ms", "bubble", "mean", "formula", "ratio", "med.", "ratio",
                "imbal.", "ratio", both ? " inl/thr" : "", "stage-0 act MiB");
  out += buf;
  for (const auto& r : rows) {
    char ab[16] = "";
    if (both && r.thread_ratio > 0)
      std::snprintf(ab, sizeof ab, " %7.2f", r.thread_ratio);
    else if (both)
      std::snprintf(ab, sizeof ab, " %7s", "");
    std::snprintf(buf, sizeof buf, "%-12s %4d %2d %-6s %9.2f %9.2f %8.2f %9.2f %8.3f %8.3f %8.3f %8.2f %8.3f %8.2f %8.3f %8.2f%s %16.2f\n",
                  r.schedule.c_str(), r.m, r.v, r.exchanges.c_str(), r.step_s * 1e3, r.busy_s * 1e3, r.busy_cpu_s * 1e3, r.wait_s * 1e3,
                  r.bubble_busiest, r.bubble, r.formula, r.formula > 0 ? r.bubble_busiest / r.formula : 0.0,
                  r.bubble_median, r.formula > 0 ? r.bubble_median / r.formula : 0.0, r.formula_imbalance, r.formula_imbalance > 0 ? r.bubble_busiest / r.formula_imbalance : 0.0, ab,
                  double(r.peak_act) / (1 << 20));
    out += buf;
  }
  return out;
}

}  // namespace strata::bench
