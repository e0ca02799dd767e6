// The table `strata plan` prints: one row per layout of the search (plan_search.h) with
// its bytes per rank, bytes sent, bubble and predicted step time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "apps/plan_search.h"

namespace strata::apps {

/// "1.50 GiB", "600.00 KiB", "12 B" (powers of 1024).
std::string bytes_str(int64_t bytes);

/// The table `strata plan` prints for plan_layouts(); `limit` rows at most (0 = all).
std::string format_layouts(const std::vector<LayoutPlan>& plans, const PlanAssumptions& a, size_t limit);

}  // namespace strata::apps
