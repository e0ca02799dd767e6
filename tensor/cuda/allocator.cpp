// The CUDA caching allocator: one per device. A freed block goes back to a free list of
// its (stream, size class) and the next request of that class on that stream reuses it
// without cudaMalloc/cudaFree (both synchronise the device). Reuse on the same stream
// is safe without events because work on a stream runs in order; a block that
// record_stream() marked as used by other streams waits for events on those streams
// before it is reused. On cudaMalloc failure the cache is returned to the driver and
// the allocation retried once. Tensor bytes are charged to cuda_memory(device) by
// Storage; this allocator counts blocks (AllocatorStats).
#include <cstdio>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include <strata/tensor/cuda/block_cache.h>
#include <strata/tensor/cuda/runtime.h>
#include <strata/tensor/storage.h>

namespace strata::cuda {
namespace {

std::string mib(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f MiB", double(bytes) / (1024.0 * 1024.0));
  return buf;
}

class CachingAllocator final : public Allocator {
 public:
  void set_device(int d) { device_ = d; }
  Device device() const override { return Device{DeviceType::CUDA, device_}; }

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    check_device(device_, "alloc");
    DeviceGuard guard(device_);
    const cudaStream_t stream = current_stream(device_);
    const size_t cls = detail::size_class(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    process_pending();
    ++stats_.requests;
    void* p = cache_.take(id(stream), cls);
    if (p) {
      ++stats_.cache_hits;
    } else {
      p = device_malloc(nbytes, cls);
    }
    live_.emplace(p, Block{cls, stream, {}});
    stats_.allocated_bytes += int64_t(cls);
    return p;
  }

  // Called from Storage's destructor: never throws. A failure to order a block after
  // its other streams leaks the block rather than risk reusing memory still in use.
  void deallocate(void* p, size_t) noexcept override {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) {
      std::fprintf(stderr, "strata: cuda:%d allocator asked to free unknown pointer %p (ignored)\n", device_, p);
      return;
    }
    Block b = std::move(it->second);
    live_.erase(it);
    stats_.allocated_bytes -= int64_t(b.cls);
    if (b.other_streams.empty()) {
      cache_.put(id(b.stream), b.cls, p);
      return;
    }
    try {
      DeviceGuard guard(device_);
      Pending pend{p, b.cls, b.stream, {}};
      for (cudaStream_t s : b.other_streams) {
        pend.events.emplace_back();
        pend.events.back().record(device_, s);
      }
      pending_.push_back(std::move(pend));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata: cuda:%d leaking a %zu-byte block: %s\n", device_, b.cls, e.what());
    }
  }

  void record_stream(void* p, cudaStream_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // external memory or not from this allocator: nothing to protect
    Block& b = it->second;
    if (s == b.stream) return;
    for (cudaStream_t o : b.other_streams)
      if (o == s) return;
    b.other_streams.push_back(s);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    if (stats_.device_mallocs == 0) return;  // never used: do not touch the device
    DeviceGuard guard(device_);
    process_pending();
    release_cached();
  }

  AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    AllocatorStats s = stats_;
    s.cached_bytes = int64_t(cache_.cached_bytes());
    return s;
  }

 private:
  struct Block {
    size_t cls;
    cudaStream_t stream;                      // allocated on (and reused by) this stream
    std::vector<cudaStream_t> other_streams;  // record_stream()
  };
  struct Pending {
    void* p;
    size_t cls;
    cudaStream_t stream;
    std::vector<Event> events;
  };

  static detail::BlockCache::StreamId id(cudaStream_t s) { return reinterpret_cast<uintptr_t>(s); }

  // Moves pending blocks whose other-stream work has finished into the cache.
  void process_pending() {
    for (size_t i = 0; i < pending_.size();) {
      bool done = true;
      for (const Event& e : pending_[i].events) done = done && e.query();
      if (done) {
        cache_.put(id(pending_[i].stream), pending_[i].cls, pending_[i].p);
        std::swap(pending_[i], pending_.back());
        pending_.pop_back();
      } else {
        ++i;
      }
    }
  }

  void release_cached() {
    cache_.drain([&](void* p, size_t cls) {
      if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
      stats_.reserved_bytes -= int64_t(cls);
      ++stats_.device_frees;
    });
  }

  void* device_malloc(size_t nbytes, size_t cls) {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, cls);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_cached();
      e = cudaMalloc(&p, cls);
    }
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
      STRATA_THROW(cuda::CudaError, "[alloc] CUDA out of memory on cuda:", device_, " allocating ", mib(int64_t(nbytes)),
                   " (block ", mib(int64_t(cls)), "): tensors hold ", mib(stats_.allocated_bytes),
                   ", the cache holds ", mib(int64_t(cache_.cached_bytes())), ", the device has ",
                   mib(int64_t(free_b)), " free of ", mib(int64_t(total_b)),
                   ". Free tensors, reduce the batch size or use activation checkpointing");
    }
    STRATA_CUDA_CHECK(e, "alloc");
    ++stats_.device_mallocs;
    stats_.reserved_bytes += int64_t(cls);
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    return p;
  }

  int device_ = 0;
  std::mutex mu_;
  detail::BlockCache cache_;
  std::unordered_map<void*, Block> live_;
  std::vector<Pending> pending_;
  AllocatorStats stats_;
};

// Never destroyed: tensors in static storage may be freed after main() returns.
struct Allocators {
  Allocators() {
    for (int i = 0; i < kMaxDevicesPerType; ++i) a[i].set_device(i);
  }
  CachingAllocator a[kMaxDevicesPerType];
};

Allocators& allocators() {
  alignas(Allocators) static unsigned char storage[sizeof(Allocators)];
  static Allocators* const all = ::new (static_cast<void*>(storage)) Allocators();
  return *all;
}

CachingAllocator& allocator(int device) {
  STRATA_CHECK(device >= 0 && device < kMaxDevicesPerType, "[alloc] device index ", device, " out of range");
  return allocators().a[device];
}

}  // namespace

namespace detail {
/// Registers one caching allocator per device index (register.cpp's init()).
void register_allocators() {
  for (int i = 0; i < kMaxDevicesPerType; ++i) register_allocator(Device{DeviceType::CUDA, i}, &allocator(i));
}
}  // namespace detail

AllocatorStats allocator_stats(int device) { return allocator(device).stats(); }

void empty_cache() {
  for (int i = 0; i < device_count(); ++i) allocator(i).empty_cache();
}

void record_stream(const Tensor& t, cudaStream_t stream) {
  STRATA_CHECK(t.defined() && t.device().type == DeviceType::CUDA, "[record_stream] expects a CUDA tensor, got ",
               t.str());
  if (!t.storage() || !t.storage()->data()) return;
  allocator(t.device().index).record_stream(t.storage()->data(), stream);
}

}  // namespace strata::cuda
