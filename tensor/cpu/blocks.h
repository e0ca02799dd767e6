// Thread blocks around single-threaded BLAS: the kernels that run many small GEMMs (conv
// per sample, attention per head) split the items over an OpenMP team and keep OpenBLAS
// on one thread meanwhile, since its own threading gains little on small GEMMs and
// serialises concurrent callers. Internal to tensor/cpu (pulls in cblas.h and omp.h).
#pragma once
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include <strata/tensor/cpu/isa_dispatch.h>

namespace strata::cpu {

/// Threads for n independent items: get_num_threads(), at most n, at least 1.
inline int block_threads(int64_t n) { return int(std::clamp<int64_t>(get_num_threads(), 1, std::max<int64_t>(n, 1))); }

/// Runs fn(tid, i0, i1) for thread tid's contiguous block [i0, i1) of the n items, on up
/// to nt threads, with OpenBLAS single-threaded meanwhile (restored afterwards). Returns
/// the team size OpenMP granted (1 inside another parallel region), so tid < nt. fn must
/// not throw: allocate every buffer before. fn's loops run compiled for the current SIMD
/// level (isa_dispatch.h).
template <class F>
int for_blocks(int64_t n, int nt, F&& fn) {
  if (nt <= 1) {
    simd_call(fn, 0, int64_t(0), n);
    return 1;
  }
  int used = 1;
  openblas_set_num_threads(1);
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num(), team = omp_get_num_threads();
    if (tid == 0) used = team;
    simd_call(fn, tid, n * tid / team, n * (tid + 1) / team);
  }
  openblas_set_num_threads(get_num_threads());
  return used;
}

}  // namespace strata::cpu
