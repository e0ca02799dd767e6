// Internals shared by process_group.cpp (the comm thread, running ops) and
// process_group_ops.cpp (the public ops: checks and staging on the caller's thread).
#pragma once
#include <algorithm>

#include <strata/comm/process_group.h>
#include <strata/core/memory.h>
#include <strata/tensor/ops.h>

namespace strata::comm {

struct ProcessGroup::OpInfo {
  OpKind kind = OpKind::barrier;
  DType dtype = DType::u8;
  int64_t count = 0;  // elements per rank (see debug_check)
  int64_t bytes = 0;  // payload bytes of this rank's call
  int root = -1;
  int peer = -1;
  int tag = 0;
  ReduceOp op = ReduceOp::sum;
  bool reduction = false;
  Algorithm algo = Algorithm::automatic;
  ReduceDtype reduce_dtype = ReduceDtype::param;  // set by enqueue from the group's setting
  int64_t seq = -1;  // collectives and p2p ops are numbered apart (is_p2p)
  Deadline deadline{};
  std::string label{};  // batch_isend_irecv: the caller's label ("pp stage 1 mb 3")
  std::string ops{};    // batch_isend_irecv: "send f32 x 100 to rank 2 tag 0; ..."
};

namespace detail {

inline bool is_half(DType d) { return d == DType::f16 || d == DType::bf16; }

/// How long a rank whose collective timed out waits for the others' status after it
/// (ProcessGroup::hang_report): they time out within about the skew of their entry into
/// the op. Bounded so that a job still ends soon after comm.timeout_s (0.5 s at most
/// after the launcher's SIGTERM, whose SIGKILL follows 1 s later: launcher_signal.h).
inline double hang_grace_s(double timeout_s) { return std::clamp(0.5 * timeout_s, 0.2, 3.0); }

inline Tensor comm_buffer(int64_t numel, DType dt, Device device = kCPU) {
  MemoryScope scope(MemCategory::comm);
  return Tensor::empty({numel}, dt, device);
}

// Contiguous stand-in for t: t itself, or a copy holding t's values (copy = true) or not.
inline Tensor staged(const Tensor& t, bool copy) {
  if (!t.defined() || t.is_contiguous()) return t;
  MemoryScope scope(MemCategory::comm);
  return copy ? ops::clone(t) : Tensor::empty(t.shape(), t.dtype(), t.device());
}

// Writes a staging buffer back into the user's (non-contiguous) tensor.
inline void copy_back(const Tensor& user, const Tensor& buf) {
  if (!user.defined() || buf.impl() == user.impl()) return;
  Tensor dst = user;
  ops::copy_(dst, buf);
}

inline bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || !a.shares_storage(b) || a.nbytes() == 0 || b.nbytes() == 0) return false;
  const char* pa = static_cast<const char*>(a.raw_data());
  const char* pb = static_cast<const char*>(b.raw_data());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

}  // namespace detail
}  // namespace strata::comm
