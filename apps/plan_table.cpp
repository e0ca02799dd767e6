// The table of the layout search (see plan_table.h).
#include "apps/plan_table.h"

#include <cstdio>

namespace strata::apps {

std::string bytes_str(int64_t b) {
  char buf[32];
  const double d = double(b);
  if (d >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", d / (1024.0 * 1024 * 1024));
  else if (d >= 1024.0 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f MiB", d / (1024.0 * 1024));
  else if (d >= 1024.0)
    std::snprintf(buf, sizeof buf, "%.2f KiB", d / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%lld B", (long long)b);
  return buf;
}

namespace {

std::string schedule_str(const LayoutPlan& p) {
  if (p.dims.pp == 1) return "-";
  std::string s = parallel::schedule_name(p.schedule);
  s += " m" + std::to_string(p.microbatches);
  if (p.virtual_stages > 1) s += " v" + std::to_string(p.virtual_stages);
  return s;
}

std::string seconds_str(double s) {
  char buf[32];
  if (s <= 0) return "-";
  if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else if (s < 1)
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

// `v` padded to `width` columns, on the right when `right`.
std::string pad(const std::string& v, size_t width, bool right = false) {
  if (v.size() >= width) return v;
  return right ? std::string(width - v.size(), ' ') + v : v + std::string(width - v.size(), ' ');
}

// The ZeRO stage, and under HSDP the shard group's size after a slash ("3/2").
std::string zero_str(const parallel::ParallelDims& d) {
  std::string s = std::to_string(d.zero_stage);
  if (d.hybrid()) s.append(1, '/').append(std::to_string(d.shard_size()));
  return s;
}

}  // namespace

std::string format_layouts(const std::vector<LayoutPlan>& plans, const PlanAssumptions& a, size_t limit) {
  std::string out;
  char line[512];
  // The ep columns only when some layout has expert parallelism (a mixture of experts).
  bool moe = false;
  for (const LayoutPlan& p : plans) moe = moe || p.dims.ep > 1;
  const auto ep_cell = [moe](const std::string& v, size_t width, bool right) {
    std::string c;
    if (moe) c.append(1, ' ').append(pad(v, width, right));
    return c;
  };
  std::snprintf(line, sizeof line, "%3s  %-4s %-4s %-4s%s %-4s %-16s %10s %10s %10s %10s %4s %10s | %10s %10s %10s%s | %6s %10s  %s\n",
                "#", "dp", "tp", "pp", ep_cell("ep", 4, false).c_str(), "zero", "schedule", "params", "grads", "optim+buf",
                "activ", "mb", "total", "dp sent", "tp sent", "pp sent", ep_cell("ep sent", 10, true).c_str(), "bubble",
                "step", "fits");
  out += line;
  size_t n = 0;
  bool starred = false, hybrid = false;
  for (const LayoutPlan& p : plans) {
    if (limit > 0 && n >= limit) break;
    ++n;
    const std::string fits = a.memory_per_rank <= 0 ? "-" : p.fits ? "yes" : "NO";
    std::snprintf(line, sizeof line,
                  "%3zu  %-4d %-4d %-4d%s %-4s %-16s %10s %10s %10s %10s %4d %10s | %10s %10s %10s%s | %6.3f %10s  %s%s\n",
                  n, p.dims.dp, p.dims.tp, p.dims.pp, ep_cell(std::to_string(p.dims.ep), 4, false).c_str(),
                  zero_str(p.dims).c_str(), schedule_str(p).c_str(), bytes_str(p.memory.params).c_str(),
                  bytes_str(p.memory.grads).c_str(), bytes_str(p.memory.optimizer + p.memory.comm).c_str(),
                  bytes_str(p.activations).c_str(), p.in_flight, bytes_str(p.total()).c_str(),
                  bytes_str(p.dp_bytes).c_str(), bytes_str(p.tp_bytes).c_str(), bytes_str(p.pp_bytes).c_str(),
                  ep_cell(bytes_str(p.ep_bytes), 10, true).c_str(), p.bubble, seconds_str(p.step_s).c_str(), fits.c_str(),
                  p.note.empty() ? "" : " *");
    out += line;
    if (!p.note.empty()) starred = true;
    if (p.dims.hybrid()) hybrid = true;
  }
  if (moe)
    out += "ep: experts sharded over ep consecutive dp ranks; ep sent: the MoE layers' all-to-alls (4 per layer and "
           "micro-batch, (ep-1)/ep of N·top_k·C each); dp sent adds the experts' all-reduce over dp/ep ranks\n";
  if (hybrid)
    out += "zero a/S: HSDP, ZeRO-a within shard groups of S consecutive dp ranks; dp sent adds the all-reduce of "
           "each rank's slice over the dp/S replicas\n";
  if (starred)
    out += "* pp with ZeRO-3: each stage's units stay gathered for the whole pipeline step, a peak this "
           "row does not model; listed, never chosen\n";
  if (limit > 0 && plans.size() > limit)
    out += "... " + std::to_string(plans.size() - limit) + " more (--top 0 lists all)\n";
  return out;
}

}  // namespace strata::apps
