// The CUDA runtime pieces every CUDA-aware layer shares (tensor kernels, the nccl comm
// backend, the grad scaler): checked calls that throw strata errors, device queries,
// per-device compute and comm streams, RAII device guards / streams / events, and the
// caching allocator's public controls. Host-only header; exists only in CUDA builds
// (STRATA_WITH_CUDA), so include it under that macro.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include <strata/core/error.h>
#include <strata/core/memory.h>
#include <strata/tensor/tensor.h>

namespace strata::cuda {

/// A failed CUDA runtime / cuBLAS / cuDNN call. what() names the op, the call, the
/// library's error name and string, and file:line.
class CudaError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* op, const char* file, int line);
/// For library status codes (cuBLAS, cuDNN): `name` and `text` describe the status.
[[noreturn]] void throw_library_error(const char* lib, int code, const char* name, const char* text, const char* call,
                                      const char* op, const char* file, int line);
}  // namespace detail

}  // namespace strata::cuda

/// STRATA_CUDA_CHECK(cudaMemcpyAsync(...), "to_device") throws strata::cuda::CudaError
/// "[to_device] cudaMemcpyAsync(...) failed: cudaErrorInvalidValue (invalid argument) at file:line"
/// unless the call returns cudaSuccess. `op` is a const char* naming the strata op.
#define STRATA_CUDA_CHECK(call, op)                                                          \
  do {                                                                                       \
    const cudaError_t strata_cuda_err_ = (call);                                             \
    if (strata_cuda_err_ != cudaSuccess)                                                     \
      ::strata::cuda::detail::throw_cuda_error(strata_cuda_err_, #call, op, __FILE__, __LINE__); \
  } while (0)

/// After a kernel launch: throws naming `op` when the launch failed (bad configuration,
/// no kernel image for this GPU's architecture, a sticky error from earlier work).
#define STRATA_CUDA_CHECK_LAUNCH(op) STRATA_CUDA_CHECK(cudaGetLastError(), op)

namespace strata::cuda {

// ---------------------------------------------------------------- devices

/// Number of CUDA devices this process can use; 0 when there is none or no usable
/// driver. Never throws; the first call queries the driver, later calls are cached.
int device_count();
/// Why device_count() is 0, e.g. "cudaGetDeviceCount: CUDA driver version is
/// insufficient for CUDA runtime version (cudaErrorInsufficientDriver)"; "" when a device is visible.
std::string unavailable_reason();
inline bool is_available() { return device_count() > 0; }
/// Throws CudaError naming `op` and the reason unless device `index` is visible.
void check_device(int index, const char* op);

struct DeviceProperties {
  int index = 0;
  std::string name;
  size_t total_memory = 0;  // bytes
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
};
/// Properties of a visible device (throws via check_device otherwise).
DeviceProperties device_properties(int index);
/// cudaRuntimeGetVersion / cudaDriverGetVersion as 1000*major + 10*minor; driver 0 when absent.
int runtime_version();
int driver_version();
/// "13.0" for 13000.
std::string version_string(int v);
/// The SM architectures the kernels were compiled for, e.g. "80,90".
const char* compiled_architectures();
/// One line per visible device ("cuda:0 NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90, 132 SMs"),
/// or "no CUDA device visible (<reason>)". For `strata info`.
std::vector<std::string> describe_devices();

/// RAII: makes `index` the calling thread's current CUDA device; restores the previous
/// one on destruction. Not copyable or movable.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  /// For destructors and cleanup paths: switches to `index` if it can and ignores every
  /// error (then it restores nothing). Never throws.
  DeviceGuard(int index, std::nothrow_t) noexcept {
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || (cur != index && cudaSetDevice(index) != cudaSuccess))
      (void)cudaGetLastError();  // clear a non-sticky error so the next checked call is not blamed
    else if (cur != index)
      prev_ = cur;
  }
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

/// Blocks until all work on `device` has finished (cudaDeviceSynchronize).
void synchronize(int device);

// ---------------------------------------------------------------- streams

/// An owned CUDA stream on one device, non-blocking with respect to the legacy default
/// stream. Movable, not copyable; destroys the stream (without waiting) when dropped.
class Stream {
 public:
  /// priority: 0 = default; lower numbers are higher priority (cudaDeviceGetStreamPriorityRange).
  explicit Stream(int device, int priority = 0);
  ~Stream();
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  /// Blocks the host until the work queued so far has finished.
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

/// The stream strata's kernels and copies for `device` run on (one per device, created
/// on first use, alive for the process). Work on it runs in issue order.
cudaStream_t compute_stream(int device);
/// The stream collectives for `device` run on, so communication overlaps compute. Use
/// events to order it against compute_stream. One per device, alive for the process.
cudaStream_t comm_stream(int device);
/// The stream this thread launches work for `device` on: compute_stream(device) unless
/// a StreamGuard for that device is active on this thread.
cudaStream_t current_stream(int device);

/// RAII: while alive, strata ops this thread runs on `device` launch on `stream`
/// (e.g. comm_stream(d) for work a collective depends on). Restores the previous one.
class StreamGuard {
 public:
  StreamGuard(int device, cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  cudaStream_t prev_;
};

// ---------------------------------------------------------------- events

/// An owned CUDA event, created on the device of its first record(). Movable, not
/// copyable. Use it to order two streams (record on one, wait on the other) or to poll
/// for completion without blocking (query).
class Event {
 public:
  /// timing: enable elapsed_ms (slightly slower record).
  explicit Event(bool timing = false) : timing_(timing) {}
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// Records the event at the current end of `stream` (a stream of `device`).
  void record(int device, cudaStream_t stream);
  /// Records on current_stream(device).
  void record(int device) { record(device, current_stream(device)); }
  /// Makes `stream` wait (on the device, not the host) until the recorded work is done.
  /// No-op when never recorded.
  void wait(cudaStream_t stream) const;
  /// True when the recorded work has finished (or the event was never recorded).
  bool query() const;
  /// Blocks the host until the recorded work has finished.
  void synchronize() const;
  /// Milliseconds between this event and `end` (both recorded, timing enabled).
  float elapsed_ms(const Event& end) const;
  cudaEvent_t get() const { return event_; }
  bool recorded() const { return event_ != nullptr; }
  int device() const { return device_; }

 private:
  cudaEvent_t event_ = nullptr;
  int device_ = -1;
  bool timing_ = false;
};

// ---------------------------------------------------------------- memory

/// Per-category byte counters of tensors on CUDA device `device` (the same categories
/// as cpu_memory(): params, grads, optimizer, activations, comm, other).
MemoryTracker& cuda_memory(int device);

/// Caching allocator counters for one device.
struct AllocatorStats {
  int64_t allocated_bytes = 0;      // in live blocks (rounded to the block size class)
  int64_t reserved_bytes = 0;       // obtained from cudaMalloc and not yet returned
  int64_t peak_reserved_bytes = 0;
  int64_t cached_bytes = 0;         // reserved but free, waiting for reuse
  int64_t requests = 0;             // allocate() calls with nbytes > 0
  int64_t cache_hits = 0;           // requests served from the cache
  int64_t device_mallocs = 0;       // cudaMalloc calls
  int64_t device_frees = 0;         // cudaFree calls
};
AllocatorStats allocator_stats(int device);
/// Returns every cached (free) block of every device to the driver. Blocks still in use
/// by a stream recorded with record_stream are kept until that work has finished.
void empty_cache();
/// Marks the memory of CUDA tensor `t` as used by work on `stream` (a stream other than
/// the one it was allocated on): when the tensor is freed, its block is reused only
/// after the work queued on `stream` so far has finished (torch's record_stream).
void record_stream(const Tensor& t, cudaStream_t stream);

// ---------------------------------------------------------------- math settings

/// Lets f32 GEMMs and convolutions use TF32 tensor cores (10-bit mantissa inputs, f32
/// accumulate), as PyTorch's allow_tf32. Default false: f32 results match the CPU to f32
/// rounding. Process-wide, thread-safe.
void set_allow_tf32(bool on);
bool allow_tf32();

// ---------------------------------------------------------------- backend

/// Registers the CUDA allocators and kernels with the tensor layer. Idempotent and
/// thread-safe; needs no GPU (allocation then fails naming why). Called automatically by
/// the first CUDA allocation or kernel lookup.
void init();

}  // namespace strata::cuda
