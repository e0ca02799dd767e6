#include <strata/core/memory.h>
#include <strata/core/thread_memory.h>

namespace strata {
namespace {
// Read on every allocation and free: initial-exec, so an access is one %fs-relative load
// rather than a __tls_get_addr call (libstrata_core is loaded with the program; a dlopen
// of it takes these 16 bytes from glibc's static TLS surplus).
[[gnu::tls_model("initial-exec")]] thread_local MemCategory t_category = MemCategory::activations;
[[gnu::tls_model("initial-exec")]] thread_local MemoryTracker* t_thread_tracker = nullptr;  // ThreadMemoryScope

void bump_peak(std::atomic<int64_t>& peak, int64_t v) {
  int64_t p = peak.load(std::memory_order_relaxed);
  while (v > p && !peak.compare_exchange_weak(p, v, std::memory_order_relaxed)) {
  }
}
}  // namespace

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::other: return "other";
    case MemCategory::params: return "params";
    case MemCategory::grads: return "grads";
    case MemCategory::optimizer: return "optimizer";
    case MemCategory::activations: return "activations";
    case MemCategory::comm: return "comm";
    case MemCategory::kCount: break;
  }
  return "?";
}

// One atomic read-modify-write per call (allocations and frees pass here): the total is
// the sum of the categories. Sequentially consistent, so of two concurrent adds the later
// one's sum sees the earlier and the total's peak misses neither.
void MemoryTracker::add(MemCategory c, int64_t bytes) {
  const int i = int(c);
  const int64_t now = current_[i].fetch_add(bytes) + bytes;
  if (bytes > 0) {
    bump_peak(peak_[i], now);
    bump_peak(total_peak_, total_current());
  }
  if (MemoryTracker* t = t_thread_tracker; t && t != this) t->add(c, bytes);
}

MemStats MemoryTracker::stats(MemCategory c) const {
  return {current_[int(c)].load(), peak_[int(c)].load()};
}
int64_t MemoryTracker::total_current() const {
  int64_t sum = 0;
  for (const auto& v : current_) sum += v.load();
  return sum;
}
int64_t MemoryTracker::total_peak() const { return total_peak_.load(); }
void MemoryTracker::reset_peaks() {
  for (int i = 0; i < kN; ++i) peak_[i] = current_[i].load();
  total_peak_ = total_current();
}

MemoryTracker& cpu_memory() {
  static MemoryTracker t;
  return t;
}

MemCategory current_mem_category() { return t_category; }
MemoryScope::MemoryScope(MemCategory c) : prev_(t_category) { t_category = c; }
MemoryScope::~MemoryScope() { t_category = prev_; }

ThreadMemoryScope::ThreadMemoryScope(MemoryTracker& t) : prev_(t_thread_tracker) { t_thread_tracker = &t; }
ThreadMemoryScope::~ThreadMemoryScope() { t_thread_tracker = prev_; }

}  // namespace strata
