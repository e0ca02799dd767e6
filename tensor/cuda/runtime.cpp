// Device queries, error formatting, per-device streams, device guards and events.
// Process-wide objects (streams) are created on first use and never destroyed: at exit
// the CUDA runtime may already be torn down, and the driver reclaims them anyway.
#include <strata/tensor/cuda/runtime.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <sstream>

#include <strata/tensor/storage.h>

#ifndef STRATA_CUDA_ARCHS
#define STRATA_CUDA_ARCHS "unknown"
#endif

namespace strata::cuda {

namespace detail {
namespace {

bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

std::string hint(cudaError_t e) {
  if (is_sticky(e))
    return "; the CUDA context is unusable after this error, restart the process (CUDA_LAUNCH_BLOCKING=1 "
           "makes the failing kernel report itself)";
  switch (e) {
    case cudaErrorNoKernelImageForDevice:
      return std::string("; the kernels were compiled for sm ") + STRATA_CUDA_ARCHS +
             ": rebuild with -DCMAKE_CUDA_ARCHITECTURES including this GPU's";
    case cudaErrorInsufficientDriver:
      return "; install an NVIDIA driver that supports this CUDA runtime";
    case cudaErrorNoDevice:
      return "; no GPU is visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)";
    case cudaErrorMemoryAllocation:
      return "; free tensors, reduce the batch size or call strata::cuda::empty_cache()";
    default:
      return "";
  }
}

}  // namespace

void throw_cuda_error(cudaError_t err, const char* call, const char* op, const char* file, int line) {
  if (!is_sticky(err)) (void)cudaGetLastError();  // clear the error state the call left behind
  std::ostringstream os;
  os << "[" << op << "] " << call << " failed: " << cudaGetErrorName(err) << " (" << cudaGetErrorString(err) << ")"
     << hint(err) << " at " << file << ":" << line;
  throw CudaError(os.str());
}

void throw_library_error(const char* lib, int code, const char* name, const char* text, const char* call,
                         const char* op, const char* file, int line) {
  std::ostringstream os;
  os << "[" << op << "] " << call << " failed: " << lib << " status " << code << " " << name << " (" << text
     << ") at " << file << ":" << line;
  throw CudaError(os.str());
}

}  // namespace detail

// ---------------------------------------------------------------- devices
namespace {

struct DeviceCount {
  int count = 0;
  std::string reason;
};

const DeviceCount& device_count_info() {
  static const DeviceCount info = [] {
    DeviceCount d;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      d.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
      return d;
    }
    d.count = std::min(n, kMaxDevicesPerType);
    if (n == 0) d.reason = "cudaGetDeviceCount returned 0 devices";
    return d;
  }();
  return info;
}

}  // namespace

int device_count() { return device_count_info().count; }

std::string unavailable_reason() { return device_count_info().reason; }

void check_device(int index, const char* op) {
  const DeviceCount& d = device_count_info();
  if (d.count == 0) STRATA_THROW(cuda::CudaError, "[", op, "] cuda:", index, ": no CUDA device visible (", d.reason, ")");
  if (index < 0 || index >= d.count)
    STRATA_THROW(cuda::CudaError, "[", op, "] cuda:", index, " does not exist: ", d.count, " CUDA device",
                 d.count == 1 ? " is" : "s are", " visible (cuda:0..cuda:", d.count - 1, ")");
}

DeviceProperties device_properties(int index) {
  check_device(index, "device_properties");
  cudaDeviceProp p{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&p, index), "device_properties");
  DeviceProperties r;
  r.index = index;
  r.name = p.name;
  r.total_memory = p.totalGlobalMem;
  r.sm_major = p.major;
  r.sm_minor = p.minor;
  r.multiprocessors = p.multiProcessorCount;
  return r;
}

int runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) (void)cudaGetLastError();
  return v;
}

int driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) (void)cudaGetLastError();
  return v;
}

std::string version_string(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

const char* compiled_architectures() { return STRATA_CUDA_ARCHS; }

std::vector<std::string> describe_devices() {
  std::vector<std::string> lines;
  const int n = device_count();
  if (n == 0) {
    lines.push_back("no CUDA device visible (" + unavailable_reason() + ")");
    return lines;
  }
  for (int i = 0; i < n; ++i) {
    const DeviceProperties p = device_properties(i);
    char buf[512];
    std::snprintf(buf, sizeof(buf), "cuda:%d %s, %.1f GiB, sm_%d%d, %d SMs", i, p.name.c_str(),
                  double(p.total_memory) / double(1 << 30), p.sm_major, p.sm_minor, p.multiprocessors);
    lines.emplace_back(buf);
  }
  return lines;
}

DeviceGuard::DeviceGuard(int index) {
  check_device(index, "DeviceGuard");
  STRATA_CUDA_CHECK(cudaGetDevice(&prev_), "DeviceGuard");
  if (prev_ != index) {
    STRATA_CUDA_CHECK(cudaSetDevice(index), "DeviceGuard");
  } else {
    prev_ = -1;  // nothing to restore
  }
}

DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0 && cudaSetDevice(prev_) != cudaSuccess) (void)cudaGetLastError();
}

void synchronize(int device) {
  DeviceGuard g(device);
  STRATA_CUDA_CHECK(cudaDeviceSynchronize(), "synchronize");
}

// ---------------------------------------------------------------- streams

Stream::Stream(int device, int priority) : device_(device) {
  DeviceGuard g(device);
  STRATA_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority), "Stream");
}

Stream::~Stream() {
  if (stream_ && cudaStreamDestroy(stream_) != cudaSuccess) (void)cudaGetLastError();
}

Stream::Stream(Stream&& o) noexcept : stream_(o.stream_), device_(o.device_) { o.stream_ = nullptr; }

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (stream_ && cudaStreamDestroy(stream_) != cudaSuccess) (void)cudaGetLastError();
    stream_ = o.stream_;
    device_ = o.device_;
    o.stream_ = nullptr;
  }
  return *this;
}

void Stream::synchronize() const {
  DeviceGuard g(device_);
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_), "Stream::synchronize");
}

namespace {

// Lazily created, never destroyed streams: [0] compute, [1] comm, per device.
struct ProcessStreams {
  std::once_flag once[2][kMaxDevicesPerType];
  cudaStream_t streams[2][kMaxDevicesPerType] = {};
};

ProcessStreams& process_streams() {
  static ProcessStreams s;
  return s;
}

cudaStream_t process_stream(int kind, int device, const char* op) {
  check_device(device, op);
  ProcessStreams& s = process_streams();
  std::call_once(s.once[kind][device], [&] {
    DeviceGuard g(device);
    cudaStream_t st = nullptr;
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), op);
    s.streams[kind][device] = st;
  });
  return s.streams[kind][device];
}

thread_local std::array<cudaStream_t, kMaxDevicesPerType> t_current{};

}  // namespace

cudaStream_t compute_stream(int device) { return process_stream(0, device, "compute_stream"); }
cudaStream_t comm_stream(int device) { return process_stream(1, device, "comm_stream"); }

cudaStream_t current_stream(int device) {
  check_device(device, "current_stream");
  if (cudaStream_t s = t_current[size_t(device)]) return s;
  return compute_stream(device);
}

StreamGuard::StreamGuard(int device, cudaStream_t stream) : device_(device) {
  check_device(device, "StreamGuard");
  prev_ = t_current[size_t(device)];
  t_current[size_t(device)] = stream;
}

StreamGuard::~StreamGuard() { t_current[size_t(device_)] = prev_; }

// ---------------------------------------------------------------- events

Event::~Event() {
  if (event_ && cudaEventDestroy(event_) != cudaSuccess) (void)cudaGetLastError();
}

Event::Event(Event&& o) noexcept : event_(o.event_), device_(o.device_), timing_(o.timing_) { o.event_ = nullptr; }

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (event_ && cudaEventDestroy(event_) != cudaSuccess) (void)cudaGetLastError();
    event_ = o.event_;
    device_ = o.device_;
    timing_ = o.timing_;
    o.event_ = nullptr;
  }
  return *this;
}

void Event::record(int device, cudaStream_t stream) {
  DeviceGuard g(device);
  if (!event_) {
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing_ ? cudaEventDefault : cudaEventDisableTiming),
                      "Event::record");
    device_ = device;
  }
  STRATA_CHECK(device_ == device, "[Event::record] event was created on cuda:", device_, ", cannot record on cuda:",
               device);
  STRATA_CUDA_CHECK(cudaEventRecord(event_, stream), "Event::record");
}

void Event::wait(cudaStream_t stream) const {
  if (!event_) return;
  STRATA_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0), "Event::wait");
}

bool Event::query() const {
  if (!event_) return true;
  const cudaError_t e = cudaEventQuery(event_);
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: clear it so a later launch check does not see it
    return false;
  }
  STRATA_CUDA_CHECK(e, "Event::query");
  return false;
}

void Event::synchronize() const {
  if (!event_) return;
  STRATA_CUDA_CHECK(cudaEventSynchronize(event_), "Event::synchronize");
}

float Event::elapsed_ms(const Event& end) const {
  STRATA_CHECK(event_ && end.event_, "[Event::elapsed_ms] both events must have been recorded");
  float ms = 0;
  STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_), "Event::elapsed_ms");
  return ms;
}

// ---------------------------------------------------------------- memory, settings

MemoryTracker& cuda_memory(int device) { return device_memory(Device{DeviceType::CUDA, device}); }

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_allow_tf32(bool on) { g_allow_tf32.store(on, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

}  // namespace strata::cuda
