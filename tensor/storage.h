// Storage: a device buffer owned through its allocator, shared by every view of it.
#pragma once
#include <cstddef>
#include <memory>

#include "core/dtype.h"
#include "core/memory.h"

namespace strata {

/// Allocates and frees device bytes and charges them to a MemoryTracker.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* p, size_t nbytes) = 0;
  virtual Device device() const = 0;
};

/// The allocator for a device; CPU is 64-byte aligned. CUDA registers its own.
Allocator* allocator_for(Device d);
void register_allocator(DeviceType t, Allocator* a);

/// Owns `nbytes` bytes from an allocator and remembers the category they were charged to.
class Storage {
 public:
  Storage(size_t nbytes, Device device);
  /// Wraps memory the caller keeps alive (no accounting, never freed here).
  Storage(void* external, size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  MemCategory category() const { return category_; }
  /// Moves the bytes to another accounting category (e.g. a buffer that becomes a grad).
  void recharge(MemCategory c);
  uint32_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  MemCategory category_;
  Allocator* alloc_ = nullptr;  // null for external memory
  uint32_t version_ = 0;
};

}  // namespace strata
