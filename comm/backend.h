// The transport interface a ProcessGroup drives: point-to-point messages, optional
// native collectives and group splitting. mpi and local implement it; an NCCL backend
// implements the same ten methods (its Requests poll CUDA events) and callers do not change.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <strata/comm/types.h>
#include <strata/tensor/tensor.h>

namespace strata::comm {

/// An operation in flight on a backend.
class Request {
 public:
  virtual ~Request() = default;
  /// Blocks until the operation completed (true) or `deadline` passed (false). Throws
  /// CommError when the transport reports a failure or a peer is known to be dead.
  virtual bool wait_until(Deadline deadline) = 0;
  /// The peer rank this request waits on, or -1 for a collective (used in error messages).
  virtual int peer() const { return -1; }
  /// How wait_until polls a transport that progresses only inside its own calls (mpi).
  /// true: the waiting thread has nothing else to run (an inline exchange, waited on by
  /// the compute thread that needs its data, ProcessGroup::set_inline_p2p): poll without
  /// sleeping, yielding the core between polls, so a message completes within
  /// microseconds of its arrival. false: the waiter is a comm thread sharing the cores
  /// with compute threads: point-to-point waits sleep ~50 us between polls past a short
  /// spin (on a VM such a sleep lasts 120-250 us: that much latency per message).
  /// Backends that block on a condition (local) ignore it.
  bool busy_poll = false;
};

/// One collective on contiguous buffers, already validated by ProcessGroup.
/// Buffers are flat; "block j" is elements [j*c, (j+1)*c) with c = per-rank count.
///  - broadcast / reduce / all_reduce: in place on `output` (input is the same tensor).
///  - all_gather:     input c        -> output N*c (input may be exactly output's own block).
///  - reduce_scatter: input N*c      -> output c.
///  - gather:         input c        -> output N*c on root (undefined elsewhere).
///  - scatter:        input N*c on root (undefined elsewhere) -> output c.
///  - all_to_all:     input N*c      -> output N*c; block j goes to rank j.
///  - barrier:        no buffers.
struct Collective {
  OpKind kind = OpKind::barrier;
  Tensor input;
  Tensor output;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
};

/// The transport of one group, seen from one rank. A ProcessGroup owns its Backend and
/// calls it from a single comm thread at a time, so implementations need no locking of
/// their own per group (a process-wide transport lock, like MPI's, is theirs to hold).
class Backend {
 public:
  virtual ~Backend() = default;
  /// "mpi", "local", "nccl".
  virtual const char* kind() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The device of the tensors this backend moves (nccl: this rank's GPU). ProcessGroup
  /// refuses tensors on any other device before queueing an op (device_mismatch).
  virtual Device device() const { return kCPU; }

  /// Starts sending `bytes` bytes at `data` to group rank `dst`. Messages between two
  /// ranks with the same tag are matched in the order they were started.
  virtual std::unique_ptr<Request> isend(const void* data, int64_t bytes, int dst, int tag) = 0;
  /// Starts receiving exactly `bytes` bytes from group rank `src` into `data`; a size
  /// mismatch with the matching send is a CommError.
  virtual std::unique_ptr<Request> irecv(void* data, int64_t bytes, int src, int tag) = 0;

  /// True when the backend runs `c` natively (dtype and op included).
  virtual bool supports(const Collective& c) const = 0;
  /// Starts a native collective (only called when supports(c)).
  virtual std::unique_ptr<Request> start(const Collective& c) = 0;

  /// Collective over this group: ranks with the same color >= 0 form a new group ordered
  /// by (key, rank); color < 0 returns nullptr. Must finish by `deadline`.
  virtual std::unique_ptr<Backend> split(int color, int key, Deadline deadline) = 0;

  /// True when isend/irecv and their Requests' wait_until may be called from any thread,
  /// concurrently with this backend's other calls (ProcessGroup::set_inline_p2p): mpi
  /// (every call under the process-wide MPI lock) and local (per-channel locks).
  virtual bool p2p_any_thread() const { return false; }
  /// Ranks of the whole job (the world this group was split from) running on this
  /// rank's host, this one included (mpi: by host identity; local: the world's threads).
  virtual int host_ranks() const { return size(); }
  /// Throws CommError naming a peer that is known to be dead (cheap; polled while waiting).
  virtual void check_peers() {}
  /// "rank 3 (pid 1234 on host-a)": how error messages name a group rank.
  virtual std::string describe_peer(int rank) const { return "rank " + std::to_string(rank); }
  /// Marks the group failed after a timeout or error, so peers fail fast instead of
  /// waiting out their own timeouts (local), or so the job is torn down at exit (mpi).
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace strata::comm
