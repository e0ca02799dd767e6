// Bucket layout arithmetic for the DDP Reducer (see bucket_plan.h).
#include <strata/parallel/data/bucket_plan.h>

#include <algorithm>
#include <cmath>

#include <strata/core/error.h>

namespace strata::parallel {

int64_t BucketPlan::total_bytes() const {
  int64_t b = 0;
  for (size_t i = 0; i < buffer_numel.size(); ++i) b += buffer_numel[i] * int64_t(element_size(buffer_dtypes[i]));
  return b;
}

std::string BucketPlan::describe() const {
  std::string s = std::to_string(buckets.size()) + " buckets over " + std::to_string(buffer_numel.size()) +
                  (buffer_numel.size() == 1 ? " buffer:" : " buffers:");
  for (const auto& b : buckets)
    s += " [" + std::string(dtype_name(buffer_dtypes[size_t(b.buffer)])) + " " + std::to_string(b.begin) + ".." +
         std::to_string(b.end) + ")";
  return s;
}

int64_t mib_to_bytes(double mib) {
  STRATA_CHECK(std::isfinite(mib) && mib > 0, "[ddp] bucket size must be a positive number of MiB, got ", mib);
  return std::max<int64_t>(1, int64_t(mib * 1024.0 * 1024.0));
}

BucketPlan plan_buckets(const std::vector<BucketParam>& params, int64_t cap_bytes, int64_t first_cap_bytes,
                        int64_t last_cap_bytes) {
  std::vector<int> order(params.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = int(order.size() - 1 - k);
  return plan_buckets_in_order(params, order, cap_bytes, first_cap_bytes, last_cap_bytes);
}

BucketPlan plan_buckets_in_order(const std::vector<BucketParam>& params, const std::vector<int>& ready_order,
                                 int64_t cap_bytes, int64_t first_cap_bytes, int64_t last_cap_bytes) {
  STRATA_CHECK(cap_bytes > 0 && first_cap_bytes > 0 && last_cap_bytes > 0,
               "[ddp] bucket caps must be positive, got cap ", cap_bytes, " bytes, first ", first_cap_bytes,
               " bytes, last ", last_cap_bytes, " bytes");
  BucketPlan plan;
  const int np = int(params.size());
  plan.slots.resize(params.size());
  plan.param_buckets.resize(params.size());

  STRATA_CHECK(ready_order.size() == params.size(), "[ddp] bucket order lists ", ready_order.size(),
               " parameters but there are ", params.size());
  std::vector<int> pos(params.size(), -1);  // layout position of each parameter (0 = ready first)
  for (size_t k = 0; k < ready_order.size(); ++k) {
    const int i = ready_order[k];
    STRATA_CHECK(i >= 0 && i < np && pos[size_t(i)] < 0, "[ddp] bucket order is not a permutation of 0..", np - 1,
                 ": entry ", k, " is ", i);
    pos[size_t(i)] = int(k);
  }
  // Slots: walk the parameters in ready order, appending each to its dtype's buffer.
  std::vector<std::vector<int>> order;  // per buffer: parameters in layout order
  for (int i : ready_order) {
    const BucketParam& p = params[size_t(i)];
    STRATA_CHECK(p.numel >= 0, "[ddp] parameter ", i, " has a negative element count ", p.numel);
    auto it = std::find(plan.buffer_dtypes.begin(), plan.buffer_dtypes.end(), p.dtype);
    const int buf = int(it - plan.buffer_dtypes.begin());
    if (it == plan.buffer_dtypes.end()) {
      plan.buffer_dtypes.push_back(p.dtype);
      plan.buffer_numel.push_back(0);
      order.emplace_back();
    }
    plan.slots[size_t(i)] = {buf, plan.buffer_numel[size_t(buf)], p.numel};
    plan.buffer_numel[size_t(buf)] += p.numel;
    order[size_t(buf)].push_back(i);
  }

  // Cuts per buffer: [0, f) first, [n - l, n) last, the middle in equal pieces <= cap.
  struct Range {
    int buffer;
    int64_t begin, end;
    int first_pos;  // layout position (0 = ready first) of the parameter holding `begin`
  };
  std::vector<Range> ranges;
  for (size_t b = 0; b < plan.buffer_numel.size(); ++b) {
    const int64_t n = plan.buffer_numel[b];
    if (n == 0) continue;
    const int64_t es = int64_t(element_size(plan.buffer_dtypes[b]));
    const int64_t c = std::max<int64_t>(1, cap_bytes / es);
    const int64_t f = std::max<int64_t>(1, std::min(first_cap_bytes, cap_bytes) / es);
    const int64_t l = std::max<int64_t>(1, std::min(last_cap_bytes, cap_bytes) / es);
    std::vector<int64_t> cuts = {0};
    if (n > f) {
      cuts.push_back(f);
      const int64_t tail = std::max(f, n - l);  // start of the last bucket
      const int64_t m = tail - f;
      const int64_t k = (m + c - 1) / c;
      for (int64_t j = 1; j < k; ++j) cuts.push_back(f + m * j / k);
      if (tail > f) cuts.push_back(tail);
    }
    cuts.push_back(n);
    size_t q = 0;  // walks order[b] alongside the cuts
    const auto& ob = order[b];
    for (size_t j = 0; j + 1 < cuts.size(); ++j) {
      const int64_t lo = cuts[j];
      while (q + 1 < ob.size() &&
             plan.slots[size_t(ob[q])].offset + plan.slots[size_t(ob[q])].numel <= lo)
        ++q;
      ranges.push_back({int(b), lo, cuts[j + 1], pos[size_t(ob[q])]});
    }
  }
  // Launch order: by when the bucket's first parameter is laid out (≈ ready), then buffer.
  std::stable_sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.first_pos != b.first_pos ? a.first_pos < b.first_pos : a.buffer < b.buffer;
  });
  for (const Range& r : ranges) {
    const int id = int(plan.buckets.size());
    Bucket bk{r.buffer, r.begin, r.end, {}};
    for (int i : order[size_t(r.buffer)]) {
      const ParamSlot& sl = plan.slots[size_t(i)];
      if (sl.numel > 0 && sl.offset < r.end && sl.offset + sl.numel > r.begin) {
        bk.params.push_back(i);
        plan.param_buckets[size_t(i)].push_back(id);
      }
    }
    plan.buckets.push_back(std::move(bk));
  }
  return plan;
}

}  // namespace strata::parallel
