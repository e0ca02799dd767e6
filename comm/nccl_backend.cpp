// The nccl backend (see comm/nccl.h): RAII owners for the comm stream, events, scratch
// and the NCCL communicator; collectives and grouped send/recv launched on the group's
// stream after an event on the compute stream; requests that poll an event and the
// communicator's async state against the op's deadline. A build without CUDA/NCCL
// compiles only the entry points that say so.
#include "comm/nccl.h"

#include "core/error.h"

#if defined(STRATA_WITH_NCCL)
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "comm/algorithms.h"
#include "comm/mpi.h"
#include "tensor/cuda/runtime.h"
#include "tensor/ops.h"
#endif

namespace strata::comm {

#if !defined(STRATA_WITH_NCCL)

bool nccl_available() { return false; }

int nccl_device_count() { return 0; }

std::shared_ptr<ProcessGroup> init_nccl_world(const CommOptions&, int, int*, char***) {
  STRATA_THROW(Error,
               "[nccl] strata was built without CUDA/NCCL, so the nccl backend is not available: reconfigure with "
               "-DSTRATA_CUDA=ON on a machine with the CUDA toolkit and NCCL >= 2.18 (nccl.h, libnccl), or use the "
               "mpi backend (init_mpi_world) with CPU tensors");
}

#else

namespace {

using strata::detail::str_cat;
using namespace std::chrono_literals;

// ------------------------------------------------------------------ error checking

std::string cuda_error(cudaError_t e) { return str_cat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"); }

void cuda_check(cudaError_t e, const char* call, const char* op) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clears a non-sticky error so the next call is not blamed for it
  STRATA_THROW(CommError, "[nccl] ", op, ": ", call, " failed: ", cuda_error(e));
}

std::string nccl_error(ncclResult_t r, const char* call, const char* op, ncclComm_t comm) {
  std::string s = str_cat("[nccl] ", op, ": ", call, " failed: ", ncclGetErrorString(r));
  const char* last = ncclGetLastError(comm);
  if (last && *last) s += str_cat(" (", last, ")");
  if (r == ncclRemoteError)
    s += "; a peer rank failed or its connection broke";
  else if (r == ncclSystemError || r == ncclUnhandledCudaError || r == ncclInternalError)
    s += "; NCCL_DEBUG=WARN prints NCCL's own account";
  return s;
}

void nccl_check(ncclResult_t r, const char* call, const char* op, ncclComm_t comm) {
  if (r != ncclSuccess && r != ncclInProgress) throw CommError(nccl_error(r, call, op, comm));
}

// Every CUDA and NCCL call is checked; the error names the call and the comm op.
#define STRATA_NCCL_CUDA_CHECK(op, call) cuda_check((call), #call, (op))
#define STRATA_NCCL_CHECK(op, comm, call) nccl_check((call), #call, (op), (comm))

ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  STRATA_THROW(Error, "[nccl] no NCCL type for dtype ", dtype_name(d));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::prod: return ncclProd;
  }
  STRATA_THROW(Error, "[nccl] no NCCL op for ", reduce_op_name(op));
}

// Poll pacing: spin briefly (a small collective finishes in microseconds), then sleep
// a little, then, once an op has taken a second, poll every millisecond.
void backoff(Clock::duration waited, int64_t polls) {
  if (polls < 32)
    std::this_thread::yield();
  else if (waited < 1s)
    std::this_thread::sleep_for(20us);
  else
    std::this_thread::sleep_for(1ms);
}

// ------------------------------------------------------------------ CUDA RAII

// Makes `device` current for a scope and restores the caller's device afterwards (a
// size-1 group runs its ops inline on the user's thread).
class DeviceGuard {
 public:
  DeviceGuard(int device, const char* op) : device_(device) {
    STRATA_NCCL_CUDA_CHECK(op, cudaGetDevice(&prev_));
    if (prev_ != device_) STRATA_NCCL_CUDA_CHECK(op, cudaSetDevice(device_));
  }
  /// For destructors: errors are ignored.
  explicit DeviceGuard(int device) noexcept : device_(device), prev_(device) {
    int cur = device;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != device && cudaSetDevice(device) == cudaSuccess) prev_ = cur;
  }
  ~DeviceGuard() {
    if (prev_ != device_) (void)cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int prev_ = 0;
};

class CudaEvent {
 public:
  CudaEvent(int device, const char* op) : device_(device) {
    DeviceGuard g(device, op);
    STRATA_NCCL_CUDA_CHECK(op, cudaEventCreateWithFlags(&e_, cudaEventDisableTiming));
  }
  ~CudaEvent() {
    DeviceGuard g(device_);
    (void)cudaEventDestroy(e_);  // fine while pending: released once it completes
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  int device_;
  cudaEvent_t e_ = nullptr;
};

// One communicator's comm stream: non-blocking (no implicit sync with the legacy default
// stream) and at the device's highest priority, so a collective overtakes queued compute
// kernels as soon as its inputs are ready.
class CudaStream {
 public:
  CudaStream(int device, const char* op) : device_(device) {
    DeviceGuard g(device, op);
    int least = 0, greatest = 0;
    STRATA_NCCL_CUDA_CHECK(op, cudaDeviceGetStreamPriorityRange(&least, &greatest));
    STRATA_NCCL_CUDA_CHECK(op, cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, greatest));
  }
  ~CudaStream() {
    DeviceGuard g(device_);
    (void)cudaStreamDestroy(s_);  // returns at once; queued work still completes
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  int device_;
  cudaStream_t s_ = nullptr;
};

// Device scratch ordered on a stream (cudaMallocAsync / cudaFreeAsync): freeing never
// blocks the host, even while a collective on that stream is stuck.
class DeviceBuffer {
 public:
  DeviceBuffer(size_t bytes, cudaStream_t s, const char* op) : s_(s) {
    STRATA_NCCL_CUDA_CHECK(op, cudaMallocAsync(&p_, std::max<size_t>(bytes, 1), s));
  }
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

// ------------------------------------------------------------------ the communicator

// Aborts a communicator under construction unless released (init and split failures).
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

// Polls a non-blocking communicator until it leaves ncclInProgress (init, split,
// launches, finalize). False if `deadline` passes first; CommError on an error state.
bool poll_ready(ncclComm_t comm, Deadline deadline, const char* op) {
  const auto t0 = Clock::now();
  for (int64_t i = 0;; ++i) {
    ncclResult_t st = ncclSuccess;
    STRATA_NCCL_CHECK(op, comm, ncclCommGetAsyncError(comm, &st));
    if (st == ncclSuccess) return true;
    if (st != ncclInProgress) throw CommError(nccl_error(st, "the communicator (ncclCommGetAsyncError)", op, comm));
    const auto now = Clock::now();
    if (now >= deadline) return false;
    backoff(now - t0, i);
  }
}

Deadline deadline_in(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// One NCCL communicator with its device and comm stream, shared by the backend and every
// launch in flight. The handle is only used under mu_, so abort() (from any thread) never
// races a call on it; after abort() every use throws CommError.
class CommState {
 public:
  CommState(PendingComm& comm, int device, int rank, int size, double timeout_s,
            std::shared_ptr<ProcessGroup> bootstrap)
      : bootstrap_(std::move(bootstrap)),
        device_(device),
        rank_(rank),
        size_(size),
        timeout_s_(timeout_s),
        stream_(device, "init"),
        ready_(device, "init") {
    DeviceGuard g(device, "init");
    one_ = std::make_unique<DeviceBuffer>(sizeof(float), stream_.get(), "init");
    STRATA_NCCL_CUDA_CHECK("init", cudaMemsetAsync(one_->get(), 0, sizeof(float), stream_.get()));
    comm_ = comm.release();
  }

  /// Flushes and frees the communicator (bounded by comm.timeout_s, then aborted), or
  /// nothing after abort().
  ~CommState() {
    DeviceGuard g(device_);
    one_.reset();
    std::lock_guard<std::mutex> lk(mu_);
    if (!comm_) return;
    bool clean = false;
    try {
      const ncclResult_t r = ncclCommFinalize(comm_);
      clean = (r == ncclSuccess || r == ncclInProgress) && poll_ready(comm_, deadline_in(timeout_s_), "destroy");
    } catch (const std::exception&) {
      clean = false;
    }
    if (clean)
      (void)ncclCommDestroy(comm_);
    else
      (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  CommState(const CommState&) = delete;
  CommState& operator=(const CommState&) = delete;

  int device() const { return device_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  double timeout_s() const { return timeout_s_; }
  cudaStream_t stream() const { return stream_.get(); }
  cudaEvent_t ready() const { return ready_.get(); }
  /// One device float (zero): the barrier's payload and a non-null stand-in for empty buffers.
  void* one() const { return one_->get(); }
  const std::shared_ptr<ProcessGroup>& bootstrap() const { return bootstrap_; }

  /// Runs fn(comm) with the handle locked; throws CommError once aborted.
  template <class F>
  void with_comm(const char* op, F&& fn) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!comm_) throw_aborted(op);
    fn(comm_);
  }

  /// ncclSuccess or ncclInProgress; CommError for an error state (local or remote) or abort.
  ncclResult_t async_state(const char* op) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!comm_) throw_aborted(op);
    ncclResult_t st = ncclSuccess;
    STRATA_NCCL_CHECK(op, comm_, ncclCommGetAsyncError(comm_, &st));
    if (st != ncclSuccess && st != ncclInProgress)
      throw CommError(nccl_error(st, "the communicator (ncclCommGetAsyncError)", op, comm_));
    return st;
  }

  /// Polls until the communicator leaves ncclInProgress; false at the deadline.
  bool wait_ready(const char* op, Deadline deadline) {
    const auto t0 = Clock::now();
    for (int64_t i = 0;; ++i) {
      if (async_state(op) == ncclSuccess) return true;
      const auto now = Clock::now();
      if (now >= deadline) return false;
      backoff(now - t0, i);
    }
  }

  bool aborted() const { return aborted_.load(); }

  [[noreturn]] void throw_aborted(const char* op) const {
    std::string why;
    {
      std::lock_guard<std::mutex> lk(reason_mu_);
      why = reason_;
    }
    STRATA_THROW(CommError, "[nccl] ", op, ": group aborted: ", why);
  }

  /// ncclCommAbort: kernels of this communicator exit, later calls fail at once. The MPI
  /// world is marked failed too, so the job is torn down at exit rather than finalised.
  void abort(const std::string& reason) {
    {
      std::lock_guard<std::mutex> lk(reason_mu_);
      if (reason_.empty()) reason_ = reason;
    }
    aborted_.store(true);
    {
      DeviceGuard g(device_);
      std::lock_guard<std::mutex> lk(mu_);
      if (comm_) (void)ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    if (bootstrap_) bootstrap_->abort("nccl group failed: " + reason);
  }

 private:
  std::shared_ptr<ProcessGroup> bootstrap_;  // the MPI world: MPI stays initialised while we live
  const int device_, rank_, size_;
  const double timeout_s_;
  CudaStream stream_;
  CudaEvent ready_;  // recorded on the compute stream before each launch
  std::unique_ptr<DeviceBuffer> one_;
  std::mutex mu_;
  ncclComm_t comm_ = nullptr;
  std::atomic<bool> aborted_{false};
  mutable std::mutex reason_mu_;
  std::string reason_;
};

// Closes an NCCL group on every path (a failed call inside still needs ncclGroupEnd).
class GroupScope {
 public:
  GroupScope(const char* op, ncclComm_t comm) : op_(op), comm_(comm) {
    STRATA_NCCL_CHECK(op, comm, ncclGroupStart());
  }
  void end() {
    open_ = false;
    STRATA_NCCL_CHECK(op_, comm_, ncclGroupEnd());
  }
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

// ------------------------------------------------------------------ one launch

// What a launched NCCL group leaves behind until it completed: the event recorded after
// it on the comm stream, device staging for CPU buffers, and their copies back.
class Launch {
 public:
  Launch(std::shared_ptr<CommState> st, const char* op) : st_(std::move(st)), op_(op), done_(st_->device(), op) {}
  ~Launch() {
    DeviceGuard g(st_->device());
    scratch_.clear();
  }
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  /// Device address of t's bytes: t itself when it lives on this group's GPU, else (a CPU
  /// tensor: only ProcessGroup's debug check passes one, user tensors are checked against
  /// device() on the caller's thread) a device copy, filled now when `read`, copied back
  /// to t on completion when `write`. Call before launching.
  void* device_ptr(const Tensor& t, bool read, bool write) {
    if (!t.defined()) return nullptr;
    if (t.device().type == DeviceType::CUDA) {
      STRATA_CHECK(t.device().index == st_->device(), "[nccl] ", op_, ": tensor ", t.str(), " is on ",
                   t.device().str(), " but this group's communicator uses cuda:", st_->device());
      return t.raw_data();
    }
    return stage(t.raw_data(), t.nbytes(), read, write);
  }

  /// As device_ptr for a raw buffer (send/recv): device memory is used as is, host memory
  /// is staged; a null or empty buffer becomes a valid device address.
  void* device_ptr(void* p, int64_t bytes, bool read, bool write) {
    if (!p || bytes == 0) return st_->one();
    cudaPointerAttributes a{};
    STRATA_NCCL_CUDA_CHECK(op_, cudaPointerGetAttributes(&a, p));
    if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) {
      STRATA_CHECK(a.type == cudaMemoryTypeManaged || a.device == st_->device(), "[nccl] ", op_,
                   ": buffer is on cuda:", a.device, " but this group's communicator uses cuda:", st_->device());
      return p;
    }
    return stage(p, bytes, read, write);
  }

  /// True once the group completed on the device (CPU outputs copied back); false when
  /// the deadline passed first. CommError on a CUDA/NCCL error or after an abort.
  bool wait_until(Deadline deadline) {
    if (complete_) return true;
    DeviceGuard g(st_->device(), op_);
    const auto t0 = Clock::now();
    auto next_check = t0 + 10ms;
    for (int64_t i = 0;; ++i) {
      // A non-blocking communicator may still be enqueueing the group (ncclInProgress);
      // its kernels are on the stream once the state is ncclSuccess.
      if (!recorded_ && st_->async_state(op_) == ncclSuccess) {
        STRATA_NCCL_CUDA_CHECK(op_, cudaEventRecord(done_.get(), st_->stream()));
        recorded_ = true;
      }
      if (recorded_) {
        const cudaError_t q = cudaEventQuery(done_.get());
        if (q == cudaSuccess) {
          copy_back();
          complete_ = true;
          return true;
        }
        if (q != cudaErrorNotReady) cuda_check(q, "cudaEventQuery(done)", op_);
      }
      const auto now = Clock::now();
      if (st_->aborted()) st_->throw_aborted(op_);
      if (now >= next_check) {  // a peer's failure shows up here, not in the event
        (void)st_->async_state(op_);
        next_check = now + 10ms;
      }
      if (now >= deadline) return false;
      backoff(now - t0, i);
    }
  }

 private:
  struct Staged {
    void* host;
    void* dev;
    size_t bytes;
    bool read, write;
  };

  void* stage(void* host, int64_t nbytes, bool read, bool write) {
    const size_t bytes = size_t(nbytes);
    for (auto& s : staged_) {  // the same CPU buffer twice (in-place ops): one staging copy
      if (s.host != host || s.bytes != bytes) continue;
      if (read && !s.read) copy_in(s);
      s.read |= read;
      s.write |= write;
      return s.dev;
    }
    scratch_.emplace_back(bytes, st_->stream(), op_);
    Staged s{host, scratch_.back().get(), bytes, read, write};
    if (read) copy_in(s);
    staged_.push_back(s);
    return s.dev;
  }

  void copy_in(const Staged& s) {
    if (s.bytes > 0)
      STRATA_NCCL_CUDA_CHECK(op_, cudaMemcpyAsync(s.dev, s.host, s.bytes, cudaMemcpyHostToDevice, st_->stream()));
  }

  void copy_back() {
    bool any = false;
    for (const auto& s : staged_) {
      if (!s.write || s.bytes == 0) continue;
      STRATA_NCCL_CUDA_CHECK(op_, cudaMemcpyAsync(s.host, s.dev, s.bytes, cudaMemcpyDeviceToHost, st_->stream()));
      any = true;
    }
    // The stream holds nothing else now (the group's ops run one at a time), so this
    // waits for the copies alone.
    if (any) STRATA_NCCL_CUDA_CHECK(op_, cudaStreamSynchronize(st_->stream()));
  }

  std::shared_ptr<CommState> st_;  // first: outlives the buffers freed on its stream
  const char* op_;
  CudaEvent done_;
  bool recorded_ = false;
  bool complete_ = false;
  std::vector<DeviceBuffer> scratch_;
  std::vector<Staged> staged_;
};

// ------------------------------------------------------------------ backend and requests

// Sends and receives posted since the last launch. NCCL needs a send and the receive it
// depends on in one group (two ranks exchanging would deadlock otherwise), so they are
// launched together when the first of them is waited on, or before the next collective.
struct P2POp {
  bool send;
  void* ptr;
  int64_t bytes;
  int peer;
};
struct P2PBatch {
  std::vector<P2POp> ops;
  std::shared_ptr<Launch> launch;  // set once launched
};

class NcclBackend;

class NcclRequest final : public Request {
 public:
  NcclRequest(std::shared_ptr<Launch> l, int peer) : launch_(std::move(l)), peer_(peer) {}
  NcclRequest(NcclBackend* b, std::shared_ptr<P2PBatch> batch, int peer)
      : backend_(b), batch_(std::move(batch)), peer_(peer) {}
  bool wait_until(Deadline deadline) override;
  int peer() const override { return peer_; }

 private:
  NcclBackend* backend_ = nullptr;
  std::shared_ptr<P2PBatch> batch_;
  std::shared_ptr<Launch> launch_;
  int peer_;
};

class NcclBackend final : public Backend {
 public:
  explicit NcclBackend(std::shared_ptr<CommState> st) : st_(std::move(st)) {}

  const char* kind() const override { return "nccl"; }
  int rank() const override { return st_->rank(); }
  int size() const override { return st_->size(); }
  Device device() const override { return Device{DeviceType::CUDA, st_->device()}; }

  // NCCL has no tags: messages between two ranks match in the order they were posted.
  std::unique_ptr<Request> isend(const void* data, int64_t bytes, int dst, int /*tag*/) override {
    return post(true, const_cast<void*>(data), bytes, dst);
  }
  std::unique_ptr<Request> irecv(void* data, int64_t bytes, int src, int /*tag*/) override {
    return post(false, data, bytes, src);
  }

  // Every collective, dtype and op is native (gather/scatter/all_to_all as grouped p2p).
  bool supports(const Collective&) const override { return true; }
  std::unique_ptr<Request> start(const Collective& c) override;
  std::unique_ptr<Backend> split(int color, int key, Deadline deadline) override;

  void check_peers() override { (void)st_->async_state("check_peers"); }
  void abort(const std::string& reason) override { st_->abort(reason); }

  /// Launches the pending sends/receives as one NCCL group (no-op when none).
  void flush_p2p();
  /// flush_p2p(), then waits until the communicator accepts the next call (a
  /// non-blocking communicator must leave ncclInProgress first). ProcessGroup waits
  /// every send/recv before its next op, so this is a safeguard.
  void settle(const char* op) {
    if (!pending_) return;
    flush_p2p();
    if (!st_->wait_ready(op, deadline_in(st_->timeout_s()))) throw detail::TimedOut(-1);
  }

 private:
  std::unique_ptr<Request> post(bool send, void* p, int64_t bytes, int peer) {
    STRATA_CHECK(peer >= 0 && peer < size() && peer != rank(), "[nccl] ", send ? "send" : "recv", ": peer rank ",
                 peer, " is not another rank of this group (rank ", rank(), " of ", size(), ")");
    if (!pending_) pending_ = std::make_shared<P2PBatch>();
    pending_->ops.push_back({send, p, bytes, peer});
    return std::make_unique<NcclRequest>(this, pending_, peer);
  }

  // The comm stream waits for everything queued so far on the device's compute stream
  // (where strata's kernels run, whichever thread launched them): the kernels that
  // produced this op's inputs, and possibly a few later ones, as this runs on the comm
  // thread when the op's turn comes. Work launched under a cuda::StreamGuard on another
  // stream must be ordered before the collective by the caller.
  void order_after_compute(const char* op) {
    STRATA_NCCL_CUDA_CHECK(op, cudaEventRecord(st_->ready(), cuda::compute_stream(st_->device())));
    STRATA_NCCL_CUDA_CHECK(op, cudaStreamWaitEvent(st_->stream(), st_->ready(), 0));
  }

  std::shared_ptr<CommState> st_;
  std::shared_ptr<P2PBatch> pending_;
};

bool NcclRequest::wait_until(Deadline deadline) {
  if (!launch_ && batch_) {
    if (!batch_->launch) backend_->flush_p2p();
    if (!batch_->launch) STRATA_THROW(CommError, "[nccl] send/recv: the group of sends/receives failed to launch");
    launch_ = batch_->launch;
  }
  return launch_->wait_until(deadline);
}

void NcclBackend::flush_p2p() {
  if (!pending_) return;
  std::shared_ptr<P2PBatch> batch = std::move(pending_);
  pending_.reset();
  const char* op = "send/recv";
  DeviceGuard g(st_->device(), op);
  auto l = std::make_shared<Launch>(st_, op);
  order_after_compute(op);
  std::vector<void*> ptrs;
  for (const auto& o : batch->ops) ptrs.push_back(l->device_ptr(o.ptr, o.bytes, o.send, !o.send));
  const cudaStream_t s = st_->stream();
  st_->with_comm(op, [&](ncclComm_t comm) {
    GroupScope group(op, comm);
    for (size_t i = 0; i < batch->ops.size(); ++i) {
      const P2POp& o = batch->ops[i];
      if (o.send)
        STRATA_NCCL_CHECK(op, comm, ncclSend(ptrs[i], size_t(o.bytes), ncclUint8, o.peer, comm, s));
      else
        STRATA_NCCL_CHECK(op, comm, ncclRecv(ptrs[i], size_t(o.bytes), ncclUint8, o.peer, comm, s));
    }
    group.end();
  });
  batch->launch = std::move(l);
}

std::unique_ptr<Request> NcclBackend::start(const Collective& c) {
  const char* op = op_kind_name(c.kind);
  settle(op);
  DeviceGuard g(st_->device(), op);
  auto l = std::make_shared<Launch>(st_, op);
  order_after_compute(op);

  const int n = size(), r = rank();
  const bool root = r == c.root;
  const Tensor& data = c.output.defined() ? c.output : c.input;
  const DType dt = data.defined() ? data.dtype() : DType::f32;
  const ncclDataType_t type = nccl_dtype(dt);
  const int64_t es = int64_t(element_size(dt));
  void* in = nullptr;
  void* out = nullptr;
  int64_t count = 0;  // elements per rank (per block for the block-wise ops)
  switch (c.kind) {
    case OpKind::broadcast:
    case OpKind::all_reduce:
      out = in = l->device_ptr(c.output, true, true);
      count = c.output.numel();
      break;
    case OpKind::reduce:
      out = in = l->device_ptr(c.output, true, root);
      count = c.output.numel();
      break;
    case OpKind::all_gather:  // input first: it may be exactly output's own block
    case OpKind::gather:
      in = l->device_ptr(c.input, true, false);
      if (c.kind == OpKind::all_gather || root) out = l->device_ptr(c.output, false, true);
      count = c.input.numel();
      break;
    case OpKind::reduce_scatter:
    case OpKind::scatter:
      if (c.kind == OpKind::reduce_scatter || root) in = l->device_ptr(c.input, true, false);
      out = l->device_ptr(c.output, false, true);
      count = c.output.numel();
      break;
    case OpKind::all_to_all:
      in = l->device_ptr(c.input, true, false);
      out = l->device_ptr(c.output, false, true);
      count = c.input.numel() / n;
      break;
    case OpKind::barrier:
      out = in = st_->one();
      count = 1;
      break;
    default: STRATA_THROW(Error, "[nccl] no native ", op, " in the nccl backend");
  }
  if (!in) in = st_->one();  // empty tensors: NCCL wants valid addresses even for 0 elements
  if (!out) out = st_->one();
  const size_t block = size_t(count * es);
  auto at = [block](void* base, int j) { return static_cast<char*>(base) + size_t(j) * block; };
  const cudaStream_t s = st_->stream();

  // This rank's own block of the p2p-based collectives is a device copy, queued first.
  auto local_copy = [&](void* dst, const void* src) {
    if (block > 0 && dst != src)
      STRATA_NCCL_CUDA_CHECK(op, cudaMemcpyAsync(dst, src, block, cudaMemcpyDeviceToDevice, s));
  };
  if (c.kind == OpKind::gather && root) local_copy(at(out, r), in);
  if (c.kind == OpKind::scatter && root) local_copy(out, at(in, r));
  if (c.kind == OpKind::all_to_all) local_copy(at(out, r), at(in, r));

  const size_t cnt = size_t(count);
  st_->with_comm(op, [&](ncclComm_t comm) {
    GroupScope group(op, comm);
    switch (c.kind) {
      case OpKind::all_reduce:
        STRATA_NCCL_CHECK(op, comm, ncclAllReduce(in, out, cnt, type, nccl_op(c.op), comm, s));
        break;
      case OpKind::broadcast: STRATA_NCCL_CHECK(op, comm, ncclBroadcast(in, out, cnt, type, c.root, comm, s)); break;
      case OpKind::reduce:
        STRATA_NCCL_CHECK(op, comm, ncclReduce(in, out, cnt, type, nccl_op(c.op), c.root, comm, s));
        break;
      case OpKind::all_gather: STRATA_NCCL_CHECK(op, comm, ncclAllGather(in, out, cnt, type, comm, s)); break;
      case OpKind::reduce_scatter:
        STRATA_NCCL_CHECK(op, comm, ncclReduceScatter(in, out, cnt, type, nccl_op(c.op), comm, s));
        break;
      case OpKind::gather:
        if (root) {
          for (int j = 0; j < n; ++j)
            if (j != r) STRATA_NCCL_CHECK(op, comm, ncclRecv(at(out, j), cnt, type, j, comm, s));
        } else {
          STRATA_NCCL_CHECK(op, comm, ncclSend(in, cnt, type, c.root, comm, s));
        }
        break;
      case OpKind::scatter:
        if (root) {
          for (int j = 0; j < n; ++j)
            if (j != r) STRATA_NCCL_CHECK(op, comm, ncclSend(at(in, j), cnt, type, j, comm, s));
        } else {
          STRATA_NCCL_CHECK(op, comm, ncclRecv(out, cnt, type, c.root, comm, s));
        }
        break;
      case OpKind::all_to_all:
        for (int j = 0; j < n; ++j) {
          if (j == r) continue;
          STRATA_NCCL_CHECK(op, comm, ncclSend(at(in, j), cnt, type, j, comm, s));
          STRATA_NCCL_CHECK(op, comm, ncclRecv(at(out, j), cnt, type, j, comm, s));
        }
        break;
      case OpKind::barrier:
        STRATA_NCCL_CHECK(op, comm, ncclAllReduce(in, out, 1, ncclFloat32, ncclSum, comm, s));
        break;
      default: break;
    }
    group.end();
  });
  return std::make_unique<NcclRequest>(std::move(l), -1);
}

std::unique_ptr<Backend> NcclBackend::split(int color, int key, Deadline deadline) {
  const char* op = "split";
  settle(op);
  DeviceGuard g(st_->device(), op);
  PendingComm child;
  st_->with_comm(op, [&](ncclComm_t comm) {
    STRATA_NCCL_CHECK(op, comm, ncclCommSplit(comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child.comm, nullptr));
  });
  // Non-blocking: the parent runs the split and the child initialises in the background.
  if (!st_->wait_ready(op, deadline)) throw detail::TimedOut(-1);
  if (child.comm && !poll_ready(child.comm, deadline, op)) throw detail::TimedOut(-1);
  if (!child.comm) return nullptr;  // NCCL_SPLIT_NOCOLOR
  int n = 0, r = 0;
  STRATA_NCCL_CHECK(op, child.comm, ncclCommCount(child.comm, &n));
  STRATA_NCCL_CHECK(op, child.comm, ncclCommUserRank(child.comm, &r));
  auto st = std::make_shared<CommState>(child, st_->device(), r, n, st_->timeout_s(), st_->bootstrap());
  return std::make_unique<NcclBackend>(std::move(st));
}

// ------------------------------------------------------------------ world creation

// Picks this rank's device (*device, or its local rank when -1). Empty when usable,
// else why not.
std::string choose_device(int* device) {
  const int count = cuda::device_count();
  if (count == 0) return str_cat("no CUDA device is visible (", cuda::unavailable_reason(), ")");
  if (*device < 0) {
    const int lr = local_rank();
    if (lr >= count)
      return str_cat("it is local rank ", lr, " on its node but only ", count,
                     " CUDA device(s) are visible; the nccl backend needs one GPU per rank (start at most ", count,
                     " ranks per node)");
    *device = lr;
  } else if (*device >= count) {
    return str_cat("CUDA device ", *device, " was requested but only ", count, " are visible");
  }
  return "";
}

}  // namespace

bool nccl_available() { return true; }

int nccl_device_count() { return cuda::device_count(); }

std::shared_ptr<ProcessGroup> init_nccl_world(const CommOptions& options, int device, int* argc, char*** argv) {
  options.validate();
  CommOptions opts = options;
  opts.algorithm = Algorithm::native;  // algorithms on send/recv would reduce on the host
  std::string problem = choose_device(&device);
  if (!problem.empty() && !launched_by_mpi())
    STRATA_THROW(Error, "[nccl] ", problem, "; the nccl backend runs collectives on GPUs (use the mpi backend for CPU tensors)");

  std::shared_ptr<ProcessGroup> mpi = init_mpi_world(opts, argc, argv);
  const int rank = mpi->rank(), n = mpi->size();
  // Every rank learns whether all of them have a GPU, so none waits in NCCL for one that has none.
  Tensor bad = ops::full({1}, problem.empty() ? -1.0 : double(rank), DType::i32);
  mpi->all_reduce(bad, ReduceOp::max).wait();
  if (!problem.empty())
    STRATA_THROW(Error, "[nccl] rank ", rank, ": ", problem, "; the nccl backend runs collectives on GPUs");
  if (const int bad_rank = int(bad.item<double>()); bad_rank >= 0)
    STRATA_THROW(Error, "[nccl] rank ", rank, ": rank ", bad_rank,
                 " has no usable CUDA device (its own error says why); the nccl world was not created");

  // Rank 0 makes the unique id; byte 0 tells the others whether it could.
  Tensor idbuf = ops::zeros({int64_t(sizeof(ncclUniqueId)) + 1}, DType::u8);
  std::string id_error;
  if (rank == 0) {
    ncclUniqueId id;
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r == ncclSuccess) {
      idbuf.data<uint8_t>()[0] = 1;
      std::memcpy(idbuf.data<uint8_t>() + 1, &id, sizeof id);
    } else {
      id_error = nccl_error(r, "ncclGetUniqueId", "init", nullptr);
    }
  }
  mpi->broadcast(idbuf, 0).wait();
  if (!id_error.empty()) throw CommError(id_error);
  if (idbuf.data<uint8_t>()[0] != 1)
    STRATA_THROW(CommError, "[nccl] init: rank ", rank, ": rank 0 could not create the NCCL unique id (see its error)");
  ncclUniqueId id;
  std::memcpy(&id, idbuf.data<uint8_t>() + 1, sizeof id);

  DeviceGuard g(device, "init");
  PendingComm comm;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // every wait below and in later ops is a poll with a deadline
  try {
    STRATA_NCCL_CHECK("init", nullptr, ncclCommInitRankConfig(&comm.comm, n, id, rank, &cfg));
    if (!poll_ready(comm.comm, deadline_in(opts.timeout_s), "init"))
      STRATA_THROW(CommError, "[nccl] init: could not create the NCCL communicator within ", opts.timeout_s,
                   " s (comm.timeout_s): a rank did not call init_nccl_world, or the ranks cannot reach each other "
                   "(NCCL_DEBUG=INFO shows how far it got)");
  } catch (const CommError& e) {
    mpi->abort(e.what());  // peers may be waiting for us: tear the job down at exit
    STRATA_THROW(CommError, e.what(), " [rank ", rank, " of ", n, ", cuda:", device, "]");
  }
  auto st = std::make_shared<CommState>(comm, device, rank, n, opts.timeout_s, mpi);
  return std::make_shared<ProcessGroup>(std::make_unique<NcclBackend>(std::move(st)), opts, "world");
}

#endif  // STRATA_WITH_NCCL

}  // namespace strata::comm
