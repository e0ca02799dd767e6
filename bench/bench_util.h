// Timing helpers shared by the data-parallel benchmarks (ddp_bench, zero_bench):
// wall-clock seconds, medians, and the slowest rank's value.
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/core/memory.h>
#include <strata/tensor/ops.h>

namespace strata::bench::detail {

using BenchClock = std::chrono::steady_clock;

/// `warmup` calls of step(), then the allocator's peaks reset between two barriers of g
/// (the ranks are threads sharing it), so the timed steps that follow own the peaks.
template <class Step>
void warm_up_then_reset_peaks(comm::ProcessGroup& g, int warmup, Step& step) {
  for (int i = 0; i < warmup; ++i) step();
  g.barrier().wait();
  if (g.rank() == 0) cpu_memory().reset_peaks();
  g.barrier().wait();
}

inline double since(BenchClock::time_point t0) {
  return std::chrono::duration<double>(BenchClock::now() - t0).count();
}

/// Median (not mean: on a shared machine a few steps lose the CPU for milliseconds).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

/// The largest v over the ranks of g (collective).
inline double max_over_ranks(comm::ProcessGroup& g, double v) {
  return comm::all_reduce_host(g, ops::full({1}, v, DType::f64), comm::ReduceOp::max).item<double>();
}

}  // namespace strata::bench::detail
