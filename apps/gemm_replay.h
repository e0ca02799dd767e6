// The GEMM-only ceiling of a training step: the f32 GEMMs one step runs (recorded at
// cpu::gemm, in call order), replayed back to back on their own. A step made of nothing
// but these GEMMs would take the replay's time, so model FLOPs over that time is the MFU
// no amount of work outside the GEMMs can beat (`strata bench train` prints it).
#pragma once
#include <cstdint>
#include <vector>

#include "apps/trainer.h"

namespace strata::apps {

/// One f32 GEMM as a kernel called it: C(m,n) = op(A) op(B) (+ C when accumulate), with
/// the operands' leading dimensions (the attention reads q, k, v at a row stride of 3C).
struct GemmCall {
  int64_t m, n, k, lda, ldb;
  bool ta, tb, accumulate;
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
  bool operator==(const GemmCall&) const = default;
};

/// The f32 GEMMs of one `trainer.step()` (the step runs; call it after a warm-up step), in
/// the order they were called (per thread order is kept; calls from a thread team
/// interleave as they ran). Not thread-safe against other users of cpu::set_gemm_observer.
std::vector<GemmCall> record_step_gemms(Trainer& trainer);

struct GemmReplayTiming {
  double flops = 0;        // per step: sum of the calls' 2mnk
  double wall_s = 0;       // median wall-clock seconds per replayed step
  double cpu_s = 0;        // median process CPU seconds per replayed step (all threads)
};

/// Replays `calls` in order through cpu::gemm (the path the kernels take: cblas_sgemm at
/// the current thread count), `repeats` times after one untimed pass, on operands
/// allocated once per distinct shape (so repeated shapes reuse warm buffers, as the
/// layers' own activations are not). At one thread this is exactly the step's GEMM work;
/// at more, each call uses the BLAS's threads, where the attention and conv kernels call
/// single-threaded GEMMs from their own team.
GemmReplayTiming replay_gemms(const std::vector<GemmCall>& calls, int repeats);

}  // namespace strata::apps
