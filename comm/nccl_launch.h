// One launched NCCL group of the nccl backend (design in comm/nccl.h) and what it leaves
// behind until it completes: the event after it on the comm stream, device staging for
// CPU buffers and their copies back. Include only in STRATA_WITH_NCCL builds.
#pragma once
#include <memory>
#include <vector>

#include <strata/comm/nccl_comm.h>

namespace strata::comm::detail {

/// Made on the comm thread before an op's NCCL calls, waited on by its Request. Not
/// copyable; shared by the requests of one group of sends/receives.
class Launch {
 public:
  Launch(std::shared_ptr<CommState> st, const char* op) : st_(std::move(st)), op_(op) {}
  ~Launch();
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  /// Device address of t's bytes: t itself when it lives on this group's GPU, else (a CPU
  /// tensor: only ProcessGroup's debug check passes one, user tensors are checked against
  /// device() on the caller's thread) a device copy, filled now when `read`, copied back
  /// to t on completion when `write`. Call before launching.
  void* device_ptr(const Tensor& t, bool read, bool write);
  /// As device_ptr for a raw buffer (send/recv): device memory is used as is, host memory
  /// is staged; a null or empty buffer becomes a valid device address.
  void* device_ptr(void* p, int64_t bytes, bool read, bool write);

  /// True once the group completed on the device (CPU outputs copied back); false when
  /// the deadline passed first. CommError on an NCCL error or after an abort; a CUDA
  /// error is a cuda::CudaError.
  bool wait_until(Deadline deadline);

 private:
  struct Staged {
    void* host;
    void* dev;
    size_t bytes;
    bool read, write;
  };
  void* stage(void* host, int64_t nbytes, bool read, bool write);
  void copy_in(const Staged& s);
  void copy_back();

  std::shared_ptr<CommState> st_;  // first: outlives the buffers freed on its stream
  const char* op_;
  cuda::Event done_;  // recorded on the comm stream once NCCL has enqueued the group
  bool complete_ = false;
  std::vector<DeviceBuffer> scratch_;
  std::vector<Staged> staged_;
};

}  // namespace strata::comm::detail
