// Control for blocks_race_free.cpp: the same program with one real race (both team
// threads update out[0]), which every checker must report.
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
      out[0] += 1;  // the race
    }
    for (float v : out) sum += v;
  }
  std::printf("%g\n", sum);
}
