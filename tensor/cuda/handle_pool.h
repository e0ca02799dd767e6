// Per-thread library handles (cuBLAS, cuDNN) per device, recycled through a process
// pool: a thread's handles go back to the pool when it exits and are never destroyed
// (destroying them at process exit can race the CUDA runtime's own teardown). Handles
// are not thread-safe, so each thread holds its own; the caller sets the stream per call.
#pragma once
#include <array>
#include <mutex>
#include <vector>

#include <strata/tensor/storage.h>

namespace strata::cuda::detail {

template <class H>
class HandlePool {
 public:
  using CreateFn = H (*)(int device);

  explicit HandlePool(CreateFn create) : create_(create) {}

  /// This thread's handle for `device` (the device must be current).
  H get(int device) {
    thread_local Lease lease;
    Lease& l = lease;
    if (!l.pool) l.pool = this;
    if (!l.has[size_t(device)]) {
      l.handles[size_t(device)] = acquire(device);
      l.has[size_t(device)] = true;
    }
    return l.handles[size_t(device)];
  }

 private:
  struct Lease {
    HandlePool* pool = nullptr;
    std::array<H, kMaxDevicesPerType> handles{};
    std::array<bool, kMaxDevicesPerType> has{};
    ~Lease() {
      if (!pool) return;
      for (int d = 0; d < kMaxDevicesPerType; ++d)
        if (has[size_t(d)]) pool->release(d, handles[size_t(d)]);
    }
  };

  H acquire(int device) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& v = free_[size_t(device)];
      if (!v.empty()) {
        H h = v.back();
        v.pop_back();
        return h;
      }
    }
    return create_(device);
  }

  void release(int device, H h) {
    std::lock_guard<std::mutex> lock(mu_);
    free_[size_t(device)].push_back(h);
  }

  CreateFn create_;
  std::mutex mu_;
  std::array<std::vector<H>, kMaxDevicesPerType> free_;
};

}  // namespace strata::cuda::detail
