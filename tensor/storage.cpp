#include <strata/tensor/storage.h>

#include <atomic>

#include <strata/core/error.h>
#include <strata/tensor/cpu_allocator.h>

namespace strata {
namespace {

struct Slots {
  std::atomic<Allocator*> per_type[kNumDeviceTypes]{};
  std::atomic<Allocator*> per_device[kNumDeviceTypes][kMaxDevicesPerType]{};
};
Slots& slots() {
  static Slots s;
  return s;
}

void check_index(Device d, const char* op) {
  STRATA_CHECK(d.index >= 0 && d.index < kMaxDevicesPerType, "[", op, "] device index ", d.index, " of ", d.str(),
               " is out of range [0, ", kMaxDevicesPerType, ")");
}

Allocator* registered(Device d) {
  if (Allocator* a = slots().per_device[int(d.type)][d.index].load(std::memory_order_acquire)) return a;
  return slots().per_type[int(d.type)].load(std::memory_order_acquire);
}

}  // namespace

#ifdef STRATA_WITH_CUDA
namespace cuda {
void init();  // tensor/cuda/register.cpp: registers the CUDA allocators and kernels once
}  // namespace cuda
#endif

Allocator* allocator_for(Device d) {
  if (d.type == DeviceType::CPU) {
    static Allocator* const cpu = detail::cpu_caching_allocator();
    return cpu;
  }
  check_index(d, "alloc");
  Allocator* a = registered(d);
#ifdef STRATA_WITH_CUDA
  if (!a && d.type == DeviceType::CUDA) {
    cuda::init();
    a = registered(d);
  }
#endif
  STRATA_CHECK(a != nullptr, "[alloc] no allocator for device ", d.str(),
               ": this build has no CUDA support (rebuild with STRATA_CUDA=ON)");
  return a;
}

void register_allocator(DeviceType t, Allocator* a) { slots().per_type[int(t)].store(a, std::memory_order_release); }

void register_allocator(Device d, Allocator* a) {
  check_index(d, "register_allocator");
  slots().per_device[int(d.type)][d.index].store(a, std::memory_order_release);
}

MemoryTracker& device_memory(Device d) {
  if (d.type == DeviceType::CPU) return cpu_memory();
  check_index(d, "device_memory");
  static MemoryTracker trackers[kNumDeviceTypes][kMaxDevicesPerType];
  return trackers[int(d.type)][d.index];
}

namespace {
MemoryTracker& tracker_for(Device d) { return device_memory(d); }
}  // namespace

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), category_(current_mem_category()), alloc_(allocator_for(device)) {
  data_ = alloc_->allocate(nbytes);
  tracker_for(device_).add(category_, int64_t(nbytes_));
}

Storage::Storage(void* external, size_t nbytes, Device device)
    : data_(external), nbytes_(nbytes), device_(device), category_(MemCategory::other) {}

Storage::~Storage() {
  if (alloc_ && !released_) {
    alloc_->deallocate(data_, nbytes_);
    tracker_for(device_).add(category_, -int64_t(nbytes_));
  }
}

void Storage::release() {
  STRATA_CHECK(alloc_ != nullptr, "[storage] cannot release external memory");
  if (released_) return;
  alloc_->deallocate(data_, nbytes_);
  tracker_for(device_).add(category_, -int64_t(nbytes_));
  data_ = nullptr;
  released_ = true;
}

void Storage::reallocate(MemCategory c) {
  STRATA_CHECK(alloc_ != nullptr, "[storage] cannot reallocate external memory");
  if (!released_) return;
  category_ = c;
  data_ = alloc_->allocate(nbytes_);
  tracker_for(device_).add(category_, int64_t(nbytes_));
  released_ = false;
}

void Storage::recharge(MemCategory c) {
  if (!alloc_ || released_ || c == category_) return;
  tracker_for(device_).add(category_, -int64_t(nbytes_));
  category_ = c;
  tracker_for(device_).add(category_, int64_t(nbytes_));
}

}  // namespace strata
