// parallel: auto (auto_layout.h).
#include "apps/auto_layout.h"

#include <algorithm>
#include <cstdio>

#include "apps/plan_table.h"
#include <strata/core/error.h>

namespace strata::apps {
namespace {

// The bandwidth `strata plan` assumes by default (100 Gbit/s per rank).
constexpr double kBytesPerS = 12.5e9;

std::string describe(const LayoutPlan& p) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "dp %d x tp %d x pp %d, zero_stage %d", p.dims.dp, p.dims.tp, p.dims.pp,
                p.dims.zero_stage);
  std::string s = buf;
  if (p.dims.hybrid()) s += ", dp_shard " + std::to_string(p.dims.shard_size());
  if (p.dims.ep > 1) s += ", ep " + std::to_string(p.dims.ep);
  if (p.dims.pp > 1)
    s += std::string(", pp_schedule ") + parallel::schedule_name(p.schedule) + ", microbatches " +
         std::to_string(p.microbatches) + (p.virtual_stages > 1 ? ", pp_virtual " + std::to_string(p.virtual_stages) : "");
  return s;
}

std::string predicted(const LayoutPlan& p) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.3g s per step, %s per rank", p.step_s, bytes_str(p.total()).c_str());
  return buf;
}

}  // namespace

AutoLayout choose_layout(const TrainConfig& cfg, int world, double flops_per_s) {
  TrainConfig c = cfg;
  c.parallel.dims = {};  // dp auto, tp = pp = cp = 1, zero 0: let the search enumerate
  PlanAssumptions a{.flops_per_s = flops_per_s, .bytes_per_s = kBytesPerS, .memory_per_rank = cfg.run.memory_per_rank};
  const std::vector<LayoutPlan> plans = plan_layouts(c, world, a);
  AutoLayout out;
  out.candidates = int(plans.size());
  const LayoutPlan* choice = nullptr;
  const LayoutPlan* next = nullptr;
  for (const LayoutPlan& p : plans) {
    if (!p.fits || !p.note.empty()) continue;
    ++out.fitting;
    if (choice == nullptr) choice = &p;
    else if (next == nullptr) next = &p;
  }
  if (choice == nullptr) {
    // The closest: the layouts needing the fewest bytes per rank (that this build runs).
    std::vector<const LayoutPlan*> near;
    for (const LayoutPlan& p : plans)
      if (p.note.empty()) near.push_back(&p);
    std::stable_sort(near.begin(), near.end(), [](auto* x, auto* y) { return x->total() < y->total(); });
    std::string list;
    for (size_t i = 0; i < near.size() && i < 3; ++i)
      list += (i ? "; " : "") + describe(*near[i]) + " needs " + bytes_str(near[i]->total());
    STRATA_THROW(ConfigError, "parallel: auto: none of the ", plans.size(), " layouts of ", world,
                 " rank(s) fits run.memory_per_rank (", bytes_str(cfg.run.memory_per_rank), ")",
                 list.empty() ? std::string("") : "; the closest: " + list,
                 "; raise run.memory_per_rank, add ranks, or shrink the model or train.batch_size");
  }
  out.plan = *choice;
  char head[160];
  std::snprintf(head, sizeof head, "parallel: auto chose %s of %d layouts of %d rank(s) (%d fit", describe(*choice).c_str(),
                out.candidates, world, out.fitting);
  char rates[96];
  std::snprintf(rates, sizeof rates, " at %d GFLOP/s per rank (measured GEMM) and %.1f GB/s", int(flops_per_s / 1e9),
                kBytesPerS / 1e9);
  out.why = std::string(head) +
            (cfg.run.memory_per_rank > 0 ? " run.memory_per_rank " + bytes_str(cfg.run.memory_per_rank) : "") +
            "): predicted " + predicted(*choice) + rates;
  if (next != nullptr) out.why += "; next: " + describe(*next) + ", " + predicted(*next);
  return out;
}

void apply_layout(TrainConfig& cfg, const LayoutPlan& plan) {
  cfg.parallel.dims = plan.dims;
  cfg.parallel.pipeline.schedule = plan.schedule;
  cfg.parallel.pipeline.microbatches = plan.microbatches;
  cfg.parallel.pipeline.virtual_stages = plan.virtual_stages;
}

}  // namespace strata::apps
