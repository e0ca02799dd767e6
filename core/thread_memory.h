// One thread's share of the allocator's counters: what a rank allocates and frees when the
// ranks are threads of one process (local ranks sharing cpu_memory()), as a process under
// mpirun has its own allocator.
#pragma once
#include <strata/core/memory.h>

namespace strata {

/// RAII: while alive, every byte count a MemoryTracker takes on this thread (allocations,
/// frees, recharges, on any device) is also added to `t`, by category. Attribution is by
/// thread: a free on this thread of bytes another thread allocated is subtracted here, and
/// what a comm thread allocates for this rank is not counted. `t` must outlive the scope.
/// Scopes nest (the inner one counts; the outer one again after it ends).
class ThreadMemoryScope {
 public:
  explicit ThreadMemoryScope(MemoryTracker& t);
  ~ThreadMemoryScope();
  ThreadMemoryScope(const ThreadMemoryScope&) = delete;
  ThreadMemoryScope& operator=(const ThreadMemoryScope&) = delete;

 private:
  MemoryTracker* prev_;
};

}  // namespace strata
