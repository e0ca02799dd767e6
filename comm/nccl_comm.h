// Internals of the nccl backend (design in comm/nccl.h) shared by its files: NCCL error
// checking, the deadline-bounded poll, stream-ordered device scratch and CommState, one
// communicator with its comm stream. Include only in STRATA_WITH_NCCL builds.
#pragma once
#include <nccl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <strata/comm/process_group.h>
#include <strata/tensor/cuda/runtime.h>

namespace strata::comm::detail {

/// "[nccl] op: call failed: <ncclGetErrorString> (<ncclGetLastError>)" and a hint.
std::string nccl_error(ncclResult_t r, const char* call, const char* op, ncclComm_t comm);

inline void nccl_check(ncclResult_t r, const char* call, const char* op, ncclComm_t comm) {
  if (r != ncclSuccess && r != ncclInProgress) throw CommError(nccl_error(r, call, op, comm));
}

/// Runs fn(); a CUDA failure inside (cuda::CudaError from STRATA_CUDA_CHECK or the
/// runtime's streams and events) is rethrown as a CommError, so every failure of the
/// backend is one (ProcessGroup then names the op, group and rank and fails the group).
template <class F>
decltype(auto) nccl_comm_errors(F&& fn) {
  try {
    return fn();
  } catch (const cuda::CudaError& e) {
    STRATA_THROW(CommError, "[nccl] ", e.what());
  }
}

/// Poll pacing: spins briefly (a small collective finishes in microseconds), then
/// sleeps a little, then, once an op has taken a second, polls every millisecond.
void nccl_backoff(Clock::duration waited, int64_t polls);

/// Now plus `seconds`.
Deadline deadline_in(double seconds);

/// Polls a non-blocking communicator until it leaves ncclInProgress (init, split,
/// launches, finalize). False if `deadline` passes first; CommError on an error state.
bool poll_ready(ncclComm_t comm, Deadline deadline, const char* op);

/// Device scratch ordered on a stream (cudaMallocAsync / cudaFreeAsync): freeing never
/// blocks the host, even while a collective on that stream is stuck. Movable.
class DeviceBuffer {
 public:
  DeviceBuffer(size_t bytes, cudaStream_t s, const char* op);
  ~DeviceBuffer() {
    if (p_) (void)cudaFreeAsync(p_, s_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), s_(o.s_) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
  cudaStream_t s_;
};

/// Aborts a communicator under construction unless released (init and split failures).
struct PendingComm {
  ncclComm_t comm = nullptr;
  PendingComm() = default;
  PendingComm(const PendingComm&) = delete;
  PendingComm& operator=(const PendingComm&) = delete;
  ~PendingComm() {
    if (comm) (void)ncclCommAbort(comm);
  }
  ncclComm_t release() { return std::exchange(comm, nullptr); }
};

/// One NCCL communicator with its device and comm stream, shared by the backend and
/// every launch in flight. The handle is only used under a mutex, so abort() (from any
/// thread) never races a call on it; after abort() every use throws CommError.
class CommState {
 public:
  /// Takes over `comm` (a ready communicator). bootstrap: the MPI world, kept alive (and
  /// MPI initialised) while this lives, and aborted with it.
  CommState(PendingComm& comm, int device, int rank, int size, double timeout_s,
            std::shared_ptr<ProcessGroup> bootstrap);
  /// Flushes and frees the communicator (bounded by comm.timeout_s, then aborted), or
  /// nothing after abort().
  ~CommState();
  CommState(const CommState&) = delete;
  CommState& operator=(const CommState&) = delete;

  int device() const { return device_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  double timeout_s() const { return timeout_s_; }
  /// The communicator's own stream: non-blocking, at the device's highest priority, so
  /// a collective overtakes queued compute kernels as soon as its inputs are ready.
  cudaStream_t stream() const { return stream_.get(); }
  /// One device float (zero): the barrier's payload and a non-null stand-in for empty buffers.
  void* one() const { return one_->get(); }
  const std::shared_ptr<ProcessGroup>& bootstrap() const { return bootstrap_; }

  /// Makes the comm stream wait for everything queued so far on the device's compute
  /// stream (cuda::compute_stream, where strata's kernels run whichever thread launched
  /// them): the kernels that produced an op's inputs, and possibly a few later ones. Work
  /// launched under a cuda::StreamGuard on another stream must be ordered by the caller.
  /// Called on the comm thread only.
  void order_after_compute();

  /// Runs fn(comm) with the handle locked; throws CommError once aborted.
  template <class F>
  void with_comm(const char* op, F&& fn) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!comm_) throw_aborted(op);
    fn(comm_);
  }

  /// ncclSuccess or ncclInProgress; CommError for an error state (local or remote) or abort.
  ncclResult_t async_state(const char* op);
  /// Polls until the communicator leaves ncclInProgress; false at the deadline.
  bool wait_ready(const char* op, Deadline deadline);

  bool aborted() const { return aborted_.load(); }
  [[noreturn]] void throw_aborted(const char* op) const;
  /// ncclCommAbort: kernels of this communicator exit, later calls fail at once. The MPI
  /// world is marked failed too, so the job is torn down at exit rather than finalised.
  void abort(const std::string& reason);

 private:
  std::shared_ptr<ProcessGroup> bootstrap_;
  const int device_, rank_, size_;
  const double timeout_s_;
  cuda::Stream stream_;
  cuda::Event ready_;  // recorded on the compute stream before each launch
  std::unique_ptr<DeviceBuffer> one_;
  std::mutex mu_;
  ncclComm_t comm_ = nullptr;
  std::atomic<bool> aborted_{false};
  mutable std::mutex reason_mu_;
  std::string reason_;
};

/// Closes an NCCL group on every path (a failed call inside still needs ncclGroupEnd).
class GroupScope {
 public:
  GroupScope(const char* op, ncclComm_t comm);
  /// ncclGroupEnd, checked.
  void end();
  ~GroupScope() {
    if (open_) (void)ncclGroupEnd();
  }
  GroupScope(const GroupScope&) = delete;
  GroupScope& operator=(const GroupScope&) = delete;

 private:
  const char* op_;
  ncclComm_t comm_;
  bool open_ = true;
};

}  // namespace strata::comm::detail

/// STRATA_NCCL_CHECK("all_reduce", comm, ncclAllReduce(...)) throws CommError naming the
/// op, the call and NCCL's error unless it returns ncclSuccess or ncclInProgress.
#define STRATA_NCCL_CHECK(op, handle, call) ::strata::comm::detail::nccl_check((call), #call, (op), (handle))
