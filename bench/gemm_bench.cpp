// GEMM throughput: strata's matmul (front end + dispatch + BLAS) beside OpenBLAS's
// cblas_sgemm called directly on the same buffers. Reports GFLOP/s.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include "core/threads.h"
#include "tensor/ops.h"

using namespace strata;

namespace {
void set_flops(benchmark::State& st, int64_t n) {
  st.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(n) * double(n) * double(n), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::OneK::kIs1000);
}

void BM_StrataMatmul(benchmark::State& st) {
  const int64_t n = st.range(0);
  Generator g(0);
  Tensor a = ops::normal({n, n}, 0, 1, g), b = ops::normal({n, n}, 0, 1, g);
  for (auto _ : st) benchmark::DoNotOptimize(ops::matmul(a, b).raw_data());
  set_flops(st, n);
}

void BM_StrataMatmulTransposedB(benchmark::State& st) {
  const int64_t n = st.range(0);
  Generator g(0);
  Tensor a = ops::normal({n, n}, 0, 1, g), b = ops::normal({n, n}, 0, 1, g);
  Tensor bt = ops::transpose(b, 0, 1);  // a view: must not be copied
  for (auto _ : st) benchmark::DoNotOptimize(ops::matmul(a, bt).raw_data());
  set_flops(st, n);
}

void BM_OpenBlasSgemm(benchmark::State& st) {
  const int64_t n = st.range(0);
  Generator g(0);
  Tensor a = ops::normal({n, n}, 0, 1, g), b = ops::normal({n, n}, 0, 1, g), c = ops::empty({n, n});
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.0f, a.data<float>(), int(n),
                b.data<float>(), int(n), 0.0f, c.data<float>(), int(n));
    benchmark::DoNotOptimize(c.raw_data());
  }
  set_flops(st, n);
}
}  // namespace

// The kernel family OpenBLAS runs (see tune_environment_and_reexec).
extern "C" char* openblas_get_corename();

BENCHMARK(BM_StrataMatmul)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StrataMatmulTransposedB)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_OpenBlasSgemm)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

int main(int argc, char** argv) {
  tune_environment_and_reexec(argv);
  set_num_threads(0);
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
