// ZeRO's stage policy and unit planning (see zero_plan.h): pure arithmetic over
// parameter names, sizes and dtypes.
#include <strata/parallel/data/zero_plan.h>

#include <algorithm>

#include <strata/core/error.h>
#include <strata/parallel/data/zero_schedule.h>

namespace strata::parallel {

ZeroPolicy ZeroPolicy::for_stage(int stage) {
  STRATA_CHECK(stage >= 1 && stage <= 3, "[zero] stage must be 1, 2 or 3, got ", stage);
  return ZeroPolicy{.stage = stage, .shards_optimizer = true, .shards_grads = stage >= 2, .shards_params = stage >= 3};
}

std::vector<std::vector<int>> group_params_by_cap(const std::vector<int64_t>& numels, int64_t cap, int64_t first_cap,
                                                  int64_t last_cap) {
  STRATA_CHECK(cap > 0 && first_cap > 0 && last_cap > 0, "[group_params_by_cap] caps must be positive, got ", cap,
               ", first ", first_cap, ", last ", last_cap);
  const int n = int(numels.size());
  // Backward order: position k holds parameter n-1-k.
  auto numel_at = [&](int k) { return numels[size_t(n - 1 - k)]; };
  // The first group from the front, the last one from the back, the middle greedily.
  int first_end = 0;
  for (int64_t sum = 0; first_end < n && (first_end == 0 || sum + numel_at(first_end) <= first_cap); ++first_end)
    sum += numel_at(first_end);
  int last_begin = n;
  for (int64_t sum = 0; last_begin > first_end && (last_begin == n || sum + numel_at(last_begin - 1) <= last_cap);
       --last_begin)
    sum += numel_at(last_begin - 1);
  std::vector<std::vector<int>> groups;
  auto add_range = [&](int b, int e, int64_t group_cap) {
    int64_t in_group = 0;
    for (int k = b; k < e; ++k) {
      const int64_t m = numel_at(k);
      if (k == b || (in_group > 0 && in_group + m > group_cap)) {
        groups.emplace_back();
        in_group = 0;
      }
      groups.back().push_back(n - 1 - k);
      in_group += m;
    }
  };
  add_range(0, first_end, first_cap);  // one group: it stopped before passing the cap
  add_range(first_end, last_begin, cap);
  add_range(last_begin, n, last_cap);
  return groups;
}

std::vector<std::vector<int>> group_params_by_cap(const std::vector<int64_t>& numels, int64_t cap_elems) {
  return group_params_by_cap(numels, cap_elems, cap_elems, cap_elems);
}

namespace {

// Module units: root (everything not under a wrapped path) first, then `wrap` in order.
std::vector<std::pair<std::string, std::vector<int>>> module_groups(const std::vector<ZeroPlanParam>& params,
                                                                    const std::vector<std::string>& wrap) {
  std::vector<std::pair<std::string, std::vector<int>>> groups{{"root", {}}};
  std::vector<int> owner(params.size(), -1);
  for (size_t w = 0; w < wrap.size(); ++w) {
    groups.push_back({wrap[w], {}});
    const std::string pre = wrap[w] + ".";
    for (size_t i = 0; i < params.size(); ++i)
      if (owner[i] < 0 && params[i].name.compare(0, pre.size(), pre) == 0) owner[i] = int(w);
  }
  for (size_t i = 0; i < params.size(); ++i) groups[size_t(owner[i] + 1)].second.push_back(int(i));
  return groups;
}

// Size units in backward order, split where the dtype changes.
std::vector<std::pair<std::string, std::vector<int>>> size_groups(const std::vector<ZeroPlanParam>& params,
                                                                  const ZeroUnitSizing& s) {
  const int64_t es = params.empty() ? 4 : int64_t(element_size(params[0].dtype));
  auto elems = [&](int64_t bytes) { return std::max<int64_t>(1, bytes / es); };
  std::vector<int64_t> numels;
  for (const auto& p : params) numels.push_back(p.numel);
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  auto emit = [&](std::vector<int>& cur) {
    if (cur.empty()) return;
    groups.push_back({"bucket" + std::to_string(groups.size()), cur});
    cur.clear();
  };
  const int64_t cap = elems(s.cap_bytes);  // the first and last caps never exceed it (as DDP's)
  for (auto& g : group_params_by_cap(numels, cap, std::min(cap, elems(s.first_cap_bytes)),
                                     std::min(cap, elems(s.last_cap_bytes)))) {
    std::vector<int> cur;
    for (int i : g) {
      if (!cur.empty() && params[size_t(i)].dtype != params[size_t(cur[0])].dtype) emit(cur);
      cur.push_back(i);
    }
    emit(cur);
  }
  return groups;
}

}  // namespace

ZeroUnitPlan plan_zero_units(const std::vector<ZeroPlanParam>& params, const ZeroPolicy& policy,
                             const ZeroUnitSizing& sizing) {
  STRATA_CHECK(sizing.cap_bytes > 0 && sizing.first_cap_bytes > 0 && sizing.last_cap_bytes > 0,
               "[zero] unit caps must be positive (bucket_cap_mb, first_unit_mb, last_unit_mb)");
  const bool by_module = policy.units_by_module();
  const auto groups = by_module ? module_groups(params, sizing.wrap) : size_groups(params, sizing);
  ZeroUnitPlan plan;
  plan.unit_of.assign(params.size(), -1);
  plan.entry_of.assign(params.size(), -1);
  for (size_t k = 0; k < groups.size(); ++k) {
    const auto& [uname, idx] = groups[k];
    std::vector<int64_t> ns;
    for (int i : idx) ns.push_back(params[size_t(i)].numel);
    plan.units.push_back(make_flat_unit(uname, idx, ns, sizing.world));
    plan.modules.push_back(by_module && k > 0 ? uname : std::string());
    const DType dt = idx.empty() ? DType::f32 : params[size_t(idx[0])].dtype;
    plan.dtypes.push_back(dt);
    for (size_t e = 0; e < idx.size(); ++e) {
      const ZeroPlanParam& p = params[size_t(idx[e])];
      STRATA_CHECK(p.dtype == dt, "[zero] unit '", uname, "' mixes dtypes: ", p.name, " is ", dtype_name(p.dtype),
                   ", ", params[size_t(idx[0])].name, " is ", dtype_name(dt), " (wrap them separately)");
      plan.unit_of[size_t(idx[e])] = int(k);
      plan.entry_of[size_t(idx[e])] = int(e);
    }
  }
  plan.launch_order = zero_launch_order(plan.units.size(), by_module);
  return plan;
}

std::vector<int> zero_launch_order(size_t units, bool by_module) {
  // Backward completes module units in reverse forward order with the root (holding
  // the tied embedding) last; size units are already in backward order.
  std::vector<int> order;
  for (size_t k = 0; k < units; ++k) order.push_back(int(k));
  if (by_module && units > 0) {
    std::reverse(order.begin() + 1, order.end());
    std::rotate(order.begin(), order.begin() + 1, order.end());
  }
  return order;
}

}  // namespace strata::parallel
