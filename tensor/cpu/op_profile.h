// Op-level CPU profiler for `strata bench train --ops`: per (phase, kernel) call counts
// and self time (a kernel's time minus the kernels it calls, e.g. the attention kernel's
// own GEMMs), and per GEMM shape its FLOPs. Off by default: while off, each hook (every
// KernelTable call, every cpu::gemm) is one relaxed atomic load.
//
// Scopes are recorded on the thread that called start() only (the training loop's thread;
// at one compute thread every kernel runs there). Kernels that a parallel team runs on
// other threads are then inside their caller's scope, as one slice.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::cpu::op_profile {

namespace detail {
inline std::atomic<bool> g_on{false};
bool on_this_thread();
}  // namespace detail

/// True while recording (between start() and stop()).
inline bool enabled() noexcept { return detail::g_on.load(std::memory_order_relaxed); }

/// CPU time of the calling thread, in seconds (CLOCK_THREAD_CPUTIME_ID).
double thread_cpu_seconds();

/// Clears the table and records scopes on the calling thread until stop().
void start();
void stop();

/// One row of the table: a kernel (name, and for the enum-selected kernels such as
/// "binary" the enum's value in `sub`) within a phase ("forward", "backward",
/// "optimizer"; whatever Phase scopes set, "forward" outside them).
struct Stat {
  std::string phase, name;
  int sub = -1;
  int64_t calls = 0;
  double self_s = 0, total_s = 0;  // wall-clock seconds: exclusive of nested scopes / inclusive
  double self_cpu_s = 0;           // the thread's CPU time, exclusive (steadier on a shared host)
  double flops = 0;                // summed over the calls (GEMMs)
};
/// The rows recorded since start(), in no particular order.
std::vector<Stat> results();

/// A timed kernel call, from construction to destruction. `name` must outlive the
/// recording (a literal or a KernelTable's op name) unless `owned` is given.
class Scope {
 public:
  Scope() = default;
  explicit Scope(const char* name, int sub = -1, double flops = 0) {
    if (enabled()) begin(name, sub, flops);
  }
  ~Scope() {
    if (active_) end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  /// Starts it now (no-op unless recording on this thread). `owned` overrides `name`.
  void begin(const char* name, int sub = -1, double flops = 0, std::string owned = {});
  void end();

 private:
  bool active_ = false;
};

/// Sets the phase that scopes opened meanwhile on this thread are filed under.
class Phase {
 public:
  explicit Phase(const char* phase);
  ~Phase();
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;

 private:
  const char* prev_ = nullptr;
  bool active_ = false;
};

/// "gemm m x n x k, lda, ldb, NT, beta": the key `strata bench train --ops` parses back.
std::string gemm_key(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, bool ta, bool tb, bool accumulate);

}  // namespace strata::cpu::op_profile
