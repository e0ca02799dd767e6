// The nccl backend's communicator (comm/nccl_comm.h): NCCL error text, the polls that
// bound every wait on a non-blocking communicator, and CommState's set-up, teardown and
// abort. Compiled only with STRATA_WITH_NCCL.
#if defined(STRATA_WITH_NCCL)
#include <strata/comm/nccl_comm.h>

#include <algorithm>
#include <thread>

namespace strata::comm::detail {

using strata::detail::str_cat;
using namespace std::chrono_literals;

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

void nccl_backoff(Clock::duration waited, int64_t polls) {
  if (polls < 32)
    std::this_thread::yield();
  else if (waited < 1s)
    std::this_thread::sleep_for(20us);
  else
    std::this_thread::sleep_for(1ms);
}

Deadline deadline_in(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

bool poll_ready(ncclComm_t comm, Deadline deadline, const char* op) {
  const auto t0 = Clock::now();
  for (int64_t i = 0;; ++i) {
    ncclResult_t st = ncclSuccess;
    STRATA_NCCL_CHECK(op, comm, ncclCommGetAsyncError(comm, &st));
    if (st == ncclSuccess) return true;
    if (st != ncclInProgress) throw CommError(nccl_error(st, "the communicator (ncclCommGetAsyncError)", op, comm));
    const auto now = Clock::now();
    if (now >= deadline) return false;
    nccl_backoff(now - t0, i);
  }
}

DeviceBuffer::DeviceBuffer(size_t bytes, cudaStream_t s, const char* op) : s_(s) {
  STRATA_CUDA_CHECK(cudaMallocAsync(&p_, std::max<size_t>(bytes, 1), s), op);
}

namespace {
// The highest stream priority of `device` (the numerically lowest).
int highest_priority(int device) {
  cuda::DeviceGuard g(device);
  int least = 0, greatest = 0;
  STRATA_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest), "init");
  return greatest;
}
}  // namespace

CommState::CommState(PendingComm& comm, int device, int rank, int size, double timeout_s,
                     std::shared_ptr<ProcessGroup> bootstrap)
    : bootstrap_(std::move(bootstrap)),
      device_(device),
      rank_(rank),
      size_(size),
      timeout_s_(timeout_s),
      stream_(device, highest_priority(device)) {
  cuda::DeviceGuard g(device);
  one_ = std::make_unique<DeviceBuffer>(sizeof(float), stream_.get(), "init");
  STRATA_CUDA_CHECK(cudaMemsetAsync(one_->get(), 0, sizeof(float), stream_.get()), "init");
  comm_ = comm.release();
}

CommState::~CommState() {
  cuda::DeviceGuard g(device_, std::nothrow);
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

void CommState::order_after_compute() {
  ready_.record(device_, cuda::compute_stream(device_));
  ready_.wait(stream_.get());
}

ncclResult_t CommState::async_state(const char* op) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!comm_) throw_aborted(op);
  ncclResult_t st = ncclSuccess;
  STRATA_NCCL_CHECK(op, comm_, ncclCommGetAsyncError(comm_, &st));
  if (st != ncclSuccess && st != ncclInProgress)
    throw CommError(nccl_error(st, "the communicator (ncclCommGetAsyncError)", op, comm_));
  return st;
}

bool CommState::wait_ready(const char* op, Deadline deadline) {
  const auto t0 = Clock::now();
  for (int64_t i = 0;; ++i) {
    if (async_state(op) == ncclSuccess) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    nccl_backoff(now - t0, i);
  }
}

void CommState::throw_aborted(const char* op) const {
  std::string why;
  {
    std::lock_guard<std::mutex> lk(reason_mu_);
    why = reason_;
  }
  STRATA_THROW(CommError, "[nccl] ", op, ": group aborted: ", why);
}

void CommState::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lk(reason_mu_);
    if (reason_.empty()) reason_ = reason;
  }
  aborted_.store(true);
  {
    cuda::DeviceGuard g(device_, std::nothrow);
    std::lock_guard<std::mutex> lk(mu_);
    if (comm_) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  if (bootstrap_) bootstrap_->abort("nccl group failed: " + reason);
}

GroupScope::GroupScope(const char* op, ncclComm_t comm) : op_(op), comm_(comm) {
  STRATA_NCCL_CHECK(op, comm, ncclGroupStart());
}

void GroupScope::end() {
  open_ = false;
  STRATA_NCCL_CHECK(op_, comm_, ncclGroupEnd());
}

}  // namespace strata::comm::detail
#endif  // STRATA_WITH_NCCL
