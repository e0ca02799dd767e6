// The GEMM benchmarks and the per-kernel step profile behind `strata bench gemm` and
// `strata bench train --ops` (apps/bench.cpp holds the command and the other benchmarks),
// and the timing helpers both use.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::apps {

class Trainer;

namespace bench_detail {

using Clock = std::chrono::steady_clock;

/// Wall-clock seconds of `repeat` calls of f, sorted.
template <class F>
std::vector<double> time_runs(int repeat, F&& f) {
  std::vector<double> out;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = Clock::now();
    f();
    out.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// This process's CPU time (all threads), seconds.
double process_cpu_seconds();
/// This process's minor page faults so far.
long minor_faults();

/// `strata bench gemm`: ops::matmul against cblas_sgemm at n^3.
int bench_gemm(int64_t n, int repeat, int threads);
/// `strata bench gemm --shapes model`: the GPT's and CNN's own GEMM shapes.
int bench_gemm_model(const std::vector<int>& thread_counts, int samples);
/// `strata bench gemm --backends a,b,...`: the same model shapes through each f32 GEMM
/// library of cpu::gemm_backends, warm and cold, against OpenBLAS; per shape, per model and
/// per shape class.
int bench_gemm_backends(const std::vector<int>& thread_counts, int samples, const std::vector<std::string>& backends);
/// `strata bench train --ops`: `steps` profiled steps of the trainer, per kernel.
void print_op_profile(Trainer& trainer, int64_t steps, double unprofiled_step, double model_flops);

}  // namespace bench_detail
}  // namespace strata::apps
