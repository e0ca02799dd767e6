// parallel_for over the OpenMP pool: the one place the CPU kernels split a loop across
// threads. Internal to the CPU kernels (not installed), so programs that include strata's
// public headers need no OpenMP flags.
#pragma once
#include <cstdint>

#include <strata/core/threads.h>

namespace strata {

/// Runs fn(begin, end) over [0, n) in chunks of at least `grain` on the OpenMP pool;
/// serial when n < 2*grain or one thread is configured.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  const int nt = get_num_threads();
  if (nt <= 1 || n < 2 * grain) {
    if (n > 0) fn(int64_t(0), n);
    return;
  }
  int64_t chunks = n / grain;
  if (chunks > nt) chunks = nt;
#pragma omp parallel for num_threads(chunks) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
    fn(b, e);
  }
}

}  // namespace strata
