// Launch (comm/nccl_launch.h): staging of CPU buffers for one NCCL group, and the wait
// that polls its completion event and the communicator's state against the deadline.
// Compiled only with STRATA_WITH_NCCL.
#if defined(STRATA_WITH_NCCL)
#include <strata/comm/nccl_launch.h>

namespace strata::comm::detail {

using namespace std::chrono_literals;

Launch::~Launch() {
  cuda::DeviceGuard g(st_->device(), std::nothrow);
  scratch_.clear();
}

void* Launch::device_ptr(const Tensor& t, bool read, bool write) {
  if (!t.defined()) return nullptr;
  if (t.device().type == DeviceType::CUDA) {
    STRATA_CHECK(t.device().index == st_->device(), "[nccl] ", op_, ": tensor ", t.str(), " is on ",
                 t.device().str(), " but this group's communicator uses cuda:", st_->device());
    return t.raw_data();
  }
  return stage(t.raw_data(), t.nbytes(), read, write);
}

void* Launch::device_ptr(void* p, int64_t bytes, bool read, bool write) {
  if (!p || bytes == 0) return st_->one();
  cudaPointerAttributes a{};
  STRATA_CUDA_CHECK(cudaPointerGetAttributes(&a, p), op_);
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) {
    STRATA_CHECK(a.type == cudaMemoryTypeManaged || a.device == st_->device(), "[nccl] ", op_,
                 ": buffer is on cuda:", a.device, " but this group's communicator uses cuda:", st_->device());
    return p;
  }
  return stage(p, bytes, read, write);
}

bool Launch::wait_until(Deadline deadline) {
  if (complete_) return true;
  cuda::DeviceGuard g(st_->device());
  const auto t0 = Clock::now();
  auto next_check = t0 + 10ms;
  for (int64_t i = 0;; ++i) {
    // A non-blocking communicator may still be enqueueing the group (ncclInProgress);
    // its kernels are on the stream once the state is ncclSuccess.
    if (!done_.recorded() && st_->async_state(op_) == ncclSuccess) done_.record(st_->device(), st_->stream());
    if (done_.recorded() && done_.query()) {
      copy_back();
      complete_ = true;
      return true;
    }
    const auto now = Clock::now();
    if (st_->aborted()) st_->throw_aborted(op_);
    if (now >= next_check) {  // a peer's failure shows up here, not in the event
      (void)st_->async_state(op_);
      next_check = now + 10ms;
    }
    if (now >= deadline) return false;
    nccl_backoff(now - t0, i);
  }
}

void* Launch::stage(void* host, int64_t nbytes, bool read, bool write) {
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

void Launch::copy_in(const Staged& s) {
  if (s.bytes > 0)
    STRATA_CUDA_CHECK(cudaMemcpyAsync(s.dev, s.host, s.bytes, cudaMemcpyHostToDevice, st_->stream()), op_);
}

void Launch::copy_back() {
  bool any = false;
  for (const auto& s : staged_) {
    if (!s.write || s.bytes == 0) continue;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(s.host, s.dev, s.bytes, cudaMemcpyDeviceToHost, st_->stream()), op_);
    any = true;
  }
  // The stream holds nothing else now (the group's ops run one at a time), so this
  // waits for the copies alone.
  if (any) STRATA_CUDA_CHECK(cudaStreamSynchronize(st_->stream()), op_);
}

}  // namespace strata::comm::detail
#endif  // STRATA_WITH_NCCL
