// The pattern of strata's for_blocks/parallel_for: each team thread writes its own
// disjoint block; the master reads everything after the region's implicit barrier; the
// pool is reused by the next region. Race-free by the OpenMP memory model.
#include <omp.h>
#include <cstdio>
#include <vector>
int main() {
  std::vector<float> out(1 << 12);
  double sum = 0;
  for (int round = 0; round < 4; ++round) {
#pragma omp parallel num_threads(2)
    {
      const int tid = omp_get_thread_num(), team = omp_get_num_threads();
      const size_t n = out.size(), b = n * tid / team, e = n * (tid + 1) / team;
      for (size_t i = b; i < e; ++i) out[i] = float(i + round);
    }
    for (float v : out) sum += v;  // after the barrier
  }
  std::printf("%g\n", sum);
}
