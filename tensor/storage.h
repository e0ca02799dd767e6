// Storage: a device buffer owned through its allocator, shared by every view of it.
#pragma once
#include <cstddef>
#include <memory>

#include <strata/core/dtype.h>
#include <strata/core/memory.h>

namespace strata {

/// Allocates and frees device bytes and charges them to a MemoryTracker.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* p, size_t nbytes) = 0;
  virtual Device device() const = 0;
};

/// Highest device index + 1 an allocator can be registered for, per device type.
inline constexpr int kMaxDevicesPerType = 64;

/// The allocator for a device; CPU is 64-byte aligned. CUDA registers one per device
/// index (the first CUDA lookup loads the CUDA backend in builds that have it).
Allocator* allocator_for(Device d);
/// Registers `a` for every index of device type t (an allocator that handles all devices).
void register_allocator(DeviceType t, Allocator* a);
/// Registers `a` for one device; takes precedence over the per-type registration.
void register_allocator(Device d, Allocator* a);

/// The byte counters Storage charges for device d: cpu_memory() for the CPU, one
/// MemoryTracker per CUDA device index. Thread-safe.
MemoryTracker& device_memory(Device d);

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
  /// Frees the bytes but keeps the Storage (and every view of it) alive, as FSDP does
  /// with a resharded parameter: data() is null and using a view throws until
  /// reallocate(). External memory cannot be released.
  void release();
  /// Allocates nbytes() again (uninitialised) after release(), charged to `c`.
  void reallocate(MemCategory c);
  bool released() const { return released_; }
  /// True for memory the caller keeps alive (the external-memory constructor).
  bool external() const { return alloc_ == nullptr; }
  uint32_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  MemCategory category_;
  Allocator* alloc_ = nullptr;  // null for external memory
  uint32_t version_ = 0;
  bool released_ = false;
};

}  // namespace strata
