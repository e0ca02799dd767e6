// Vocabulary shared by every part of comm/: reduce ops, collective kinds, algorithm
// choice, the comm.* options and per-op byte counters.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <string>

namespace strata::comm {

using Clock = std::chrono::steady_clock;
/// Absolute time by which a communication step must finish.
using Deadline = Clock::time_point;

/// Element-wise reduction. avg is sum / group size (floating dtypes only). How f16/bf16
/// accumulate is CommOptions::reduce_dtype's choice.
enum class ReduceOp : uint8_t { sum, avg, min, max, prod };
const char* reduce_op_name(ReduceOp op);
/// Parses "sum", "avg", "min", "max", "prod"; throws ConfigError otherwise.
ReduceOp parse_reduce_op(const std::string& s);

/// Every operation a ProcessGroup runs; also the index of its byte counters.
enum class OpKind : uint8_t {
  broadcast,
  reduce,
  all_reduce,
  all_gather,
  reduce_scatter,
  gather,
  scatter,
  all_to_all,
  send,
  recv,
  send_recv,
  barrier,
  split,
  batch_isend_irecv,  ///< ProcessGroup::batch_isend_irecv: a list of sends and receives progressed together
  kCount
};
constexpr int kNumOpKinds = int(OpKind::kCount);
const char* op_kind_name(OpKind k);
/// True for the point-to-point kinds (send, recv, send_recv, batch_isend_irecv): they are
/// numbered apart from collectives ("p2p seq"), since ranks issue different ones.
constexpr bool is_p2p(OpKind k) {
  return k == OpKind::send || k == OpKind::recv || k == OpKind::send_recv || k == OpKind::batch_isend_irecv;
}
/// Parses the collective names used by the CLI ("all_reduce", "broadcast", ...).
OpKind parse_op_kind(const std::string& s);

/// How collectives are carried out (config `comm.algorithm`).
///  - native: the backend's own collective (MPI_Iallreduce, shared-memory kernels, NCCL);
///    ops a backend lacks fall back to `automatic`. Its bytes are modelled, not counted.
///  - ring:   ring all-reduce / all-gather / reduce-scatter on send/recv (broadcast and
///            reduce have no ring form and use the binomial tree).
///  - tree:   binomial trees on send/recv: broadcast, reduce, and all-reduce as a
///            binomial-tree reduce to rank 0 followed by a binomial-tree broadcast.
///  - recursive: all-reduce by recursive doubling for messages up to
///            comm.small_message_bytes and recursive halving/doubling (Rabenseifner)
///            above; other ops as `tree`.
///  - automatic ("auto"): native where the backend has it, else recursive doubling below
///            comm.small_message_bytes and ring above.
enum class Algorithm : uint8_t { native, ring, tree, recursive, automatic };
const char* algorithm_name(Algorithm a);
/// Parses "native", "ring", "tree", "recursive", "auto"; throws ConfigError naming comm.algorithm.
Algorithm parse_algorithm(const std::string& s);

/// What 16-bit (f16/bf16) reductions accumulate and send (config `comm.reduce_dtype`),
/// like FSDP's MixedPrecision(reduce_dtype=...):
///  - param: the tensor's own dtype. 16 bits on the wire; the host ring/tree/recursive
///    algorithms widen, add and round at every hop (as NCCL's bf16 all-reduce does), the
///    mpi backend reduces with a user MPI_Op on the 2-byte elements (each combining step
///    rounds), the local backend sums all ranks in f32 and rounds once.
///  - f32: widen the tensor into an f32 buffer, reduce that (f32 on the wire, f32
///    accumulation on every backend and algorithm), round once into the tensor. Twice the
///    bytes and a transient f32 copy of the reduced tensor.
/// Other dtypes ignore it.
enum class ReduceDtype : uint8_t { param, f32 };
const char* reduce_dtype_name(ReduceDtype d);
/// Parses "param", "f32"; throws ConfigError naming comm.reduce_dtype.
ReduceDtype parse_reduce_dtype(const std::string& s);

/// The comm.* section of a config. Plain data; validate() names the key path of errors.
struct CommOptions {
  Algorithm algorithm = Algorithm::automatic;  ///< comm.algorithm
  double timeout_s = 300.0;                    ///< comm.timeout_s: limit for every wait
  bool debug = false;  ///< comm.debug (or env STRATA_COMM_DEBUG=1): cross-rank call checks
  int64_t chunk_bytes = int64_t(1) << 20;        ///< comm.chunk_bytes: ring/tree pipelining unit
  int64_t small_message_bytes = int64_t(64) << 10;  ///< comm.small_message_bytes: auto threshold
  ReduceDtype reduce_dtype = ReduceDtype::param;    ///< comm.reduce_dtype: 16-bit reductions' accumulator

  /// Throws ConfigError naming the comm.* key of the first bad value.
  void validate() const;
  /// debug || STRATA_COMM_DEBUG=1 in the environment.
  bool debug_enabled() const;
};

/// What one rank did for one kind of op. `bytes_sent` is the payload this rank handed to
/// the transport. Algorithms on send/recv (ring, tree, recursive) count it exactly, message
/// by message; a backend-native collective is charged the bus-traffic model of nccl-tests
/// (e.g. all_reduce 2(N-1)/N x K), since its internal traffic cannot be observed. That
/// modelled part is also in `bytes_modelled`: print bytes with bytes_kind() beside them.
struct OpStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_modelled = 0;  ///< the part of bytes_sent that is modelled, not counted
  int64_t payload_bytes = 0;   ///< sum of the op's tensor size (input, or in-place buffer)
  double seconds = 0;          ///< time the comm thread spent running the op
};

/// "counted" (every byte seen on send/recv), "modelled" (every byte from the bus model),
/// "counted+modelled" (both kinds of op ran), or "none" when nothing was sent.
const char* bytes_kind(int64_t bytes_sent, int64_t bytes_modelled);

/// Snapshot of a group's counters, indexed by OpKind.
struct CommStats {
  std::array<OpStats, kNumOpKinds> ops{};
  const OpStats& operator[](OpKind k) const { return ops[size_t(k)]; }
  OpStats& operator[](OpKind k) { return ops[size_t(k)]; }
  int64_t total_bytes_sent() const;
  int64_t total_bytes_modelled() const;
  /// bytes_kind() of the totals.
  const char* total_bytes_kind() const { return bytes_kind(total_bytes_sent(), total_bytes_modelled()); }
};

/// "1.5 MiB", "300 B": for messages and tables.
std::string format_bytes(int64_t bytes);

}  // namespace strata::comm
