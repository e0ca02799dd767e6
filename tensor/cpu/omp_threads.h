// The OpenMP thread count of one library call. oneDNN's OpenMP runtime (the same libgomp as
// strata's) sizes its parallel regions by omp_get_max_threads() of the calling thread, both
// when a primitive is created (its work split) and when it runs, and that is strata's count
// only on the thread that called set_num_threads. For the scope of one call this sets the
// calling thread's count to `threads` (1 inside an OpenMP team: the attention's and the
// convolution's kernels call GEMMs from their own team) and restores it after.
#pragma once
#include <omp.h>

#include <algorithm>

namespace strata::cpu {

/// Threads a library call may use: the caller's count, or 1 inside an OpenMP team.
inline int call_threads(int threads) { return omp_in_parallel() ? 1 : std::max(threads, 1); }

class OmpThreads {
 public:
  explicit OmpThreads(int threads) : saved_(omp_get_max_threads()) {
    const int nt = call_threads(threads);
    if (!omp_in_parallel() && saved_ != nt) omp_set_num_threads(nt);
    else saved_ = 0;
  }
  ~OmpThreads() {
    if (saved_ > 0) omp_set_num_threads(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;  // the count to restore, 0: none
};

}  // namespace strata::cpu
