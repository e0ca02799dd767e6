// Memory accounting by category. Allocators charge every allocation to the
// category active on the allocating thread (MemoryScope), so a run can report
// params / grads / optimizer state / activations / comm buffers separately.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace strata {

enum class MemCategory : uint8_t { other, params, grads, optimizer, activations, comm, kCount };
const char* mem_category_name(MemCategory c);

struct MemStats {
  int64_t current = 0;
  int64_t peak = 0;
};

/// Per-device, per-category byte counters. Thread-safe (atomics).
class MemoryTracker {
 public:
  void add(MemCategory c, int64_t bytes);
  MemStats stats(MemCategory c) const;
  int64_t total_current() const;
  int64_t total_peak() const;
  void reset_peaks();

 private:
  static constexpr int kN = int(MemCategory::kCount);
  std::array<std::atomic<int64_t>, kN> current_{};
  std::array<std::atomic<int64_t>, kN> peak_{};
  std::atomic<int64_t> total_peak_{0};
};

MemoryTracker& cpu_memory();

/// The category new allocations on this thread are charged to.
MemCategory current_mem_category();

/// RAII: charge allocations made on this thread to `c` while alive.
class MemoryScope {
 public:
  explicit MemoryScope(MemCategory c);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  MemCategory prev_;
};

}  // namespace strata
