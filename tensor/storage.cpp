#include "tensor/storage.h"

#include <cstdlib>
#include <new>

#include "core/error.h"

namespace strata {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t rounded = (nbytes + 63) & ~size_t(63);
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p, size_t) override { std::free(p); }
  Device device() const override { return kCPU; }
};

Allocator*& slot(DeviceType t) {
  static Allocator* table[kNumDeviceTypes] = {nullptr, nullptr};
  return table[int(t)];
}

MemoryTracker& tracker_for(Device d);

}  // namespace

Allocator* allocator_for(Device d) {
  if (d.type == DeviceType::CPU) {
    static CpuAllocator cpu;
    return &cpu;
  }
  Allocator* a = slot(d.type);
  STRATA_CHECK(a != nullptr, "[alloc] no allocator for device ", d.str(),
               ": this build has no CUDA support (rebuild with STRATA_CUDA=ON)");
  return a;
}

void register_allocator(DeviceType t, Allocator* a) { slot(t) = a; }

namespace {
MemoryTracker& tracker_for(Device) { return cpu_memory(); }
}  // namespace

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), category_(current_mem_category()), alloc_(allocator_for(device)) {
  data_ = alloc_->allocate(nbytes);
  tracker_for(device_).add(category_, int64_t(nbytes_));
}

Storage::Storage(void* external, size_t nbytes, Device device)
    : data_(external), nbytes_(nbytes), device_(device), category_(MemCategory::other) {}

Storage::~Storage() {
  if (alloc_) {
    alloc_->deallocate(data_, nbytes_);
    tracker_for(device_).add(category_, -int64_t(nbytes_));
  }
}

void Storage::recharge(MemCategory c) {
  if (!alloc_ || c == category_) return;
  tracker_for(device_).add(category_, -int64_t(nbytes_));
  category_ = c;
  tracker_for(device_).add(category_, int64_t(nbytes_));
}

}  // namespace strata
