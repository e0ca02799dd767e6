// Collective algorithms written once on a backend's isend/irecv: ring, binomial tree,
// recursive doubling and halving/doubling, plus the linear forms of gather, scatter,
// all-to-all and a dissemination barrier. They work for any backend and any group size;
// buffers are raw contiguous CPU memory and reductions use comm/reduce_kernels.h.
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include <strata/comm/backend.h>

namespace strata::comm::detail {

/// Thrown by P2P::wait when the op's deadline passes; ProcessGroup turns it into a
/// CommError naming op, group, rank, sequence number and size.
struct TimedOut : std::exception {
  explicit TimedOut(int p, std::string d = {}) : peer(p), detail(std::move(d)) {}
  int peer;            ///< group rank waited on, or -1
  std::string detail;  ///< what was still pending, naming the peers (replaces `peer` in the message)
  const char* what() const noexcept override { return "comm timeout"; }
};

/// What an algorithm uses to talk: the backend, the op's deadline and tag, and the
/// counter of bytes this rank sent.
class P2P {
 public:
  P2P(Backend& backend, Deadline deadline, int tag, int64_t* bytes_sent)
      : b_(backend), deadline_(deadline), tag_(tag), bytes_sent_(bytes_sent) {}
  int rank() const { return b_.rank(); }
  int size() const { return b_.size(); }
  Backend& backend() const { return b_; }
  Deadline deadline() const { return deadline_; }

  std::unique_ptr<Request> isend(const void* data, int64_t bytes, int dst);
  std::unique_ptr<Request> irecv(void* data, int64_t bytes, int src);
  /// Waits for r (null is a no-op) and resets it; throws TimedOut at the deadline.
  void wait(std::unique_ptr<Request>& r);
  void send(const void* data, int64_t bytes, int dst);
  void recv(void* data, int64_t bytes, int src);
  /// Sends and receives at once (no deadlock when every rank does it in a cycle).
  void sendrecv(const void* sdata, int64_t sbytes, int dst, void* rdata, int64_t rbytes, int src);

 private:
  Backend& b_;
  Deadline deadline_;
  int tag_;
  int64_t* bytes_sent_;
};

/// In-place all-reduce of `count` elements: pipelined ring reduce-scatter then ring
/// all-gather. Each rank sends 2(N-1)/N x K bytes. Segments are balanced (count need not
/// divide by N); each segment moves in chunks of ~chunk_bytes so the receive of chunk
/// c+1 overlaps the reduction of chunk c. All ranks end with bitwise-equal results.
void ring_all_reduce(P2P& p, void* buf, int64_t count, DType dt, ReduceOp op, int64_t chunk_bytes);
/// input (N*c elements) -> output (c elements): rank r gets block r reduced over ranks.
/// Each rank sends (N-1) x c elements.
void ring_reduce_scatter(P2P& p, const void* input, void* output, int64_t count_per_rank, DType dt,
                         ReduceOp op, int64_t chunk_bytes);
/// input (bytes_per_rank) -> output (N x bytes_per_rank), block r = rank r's input.
/// input may be exactly output's block r.
void ring_all_gather(P2P& p, const void* input, void* output, int64_t bytes_per_rank);

/// Binomial-tree broadcast from root, pipelined in chunks of chunk_bytes.
void tree_broadcast(P2P& p, void* buf, int64_t bytes, int root, int64_t chunk_bytes);
/// Binomial-tree reduce to root (result in root's buf; other ranks' buf unchanged).
void tree_reduce(P2P& p, void* buf, int64_t count, DType dt, ReduceOp op, int root, int64_t chunk_bytes);
/// In-place all-reduce: binomial-tree reduce to rank 0, then binomial-tree broadcast from
/// it (both pipelined in chunks of chunk_bytes). Every rank but 0 sends K bytes up the
/// tree and every rank sends K bytes to each of its children, 2(N-1) x K in all; rank r
/// sends (r > 0) x K + children(r) x K. All ranks end with rank 0's bits.
void tree_all_reduce(P2P& p, void* buf, int64_t count, DType dt, ReduceOp op, int64_t chunk_bytes);

/// Recursive-doubling all-reduce (log2 N full-size exchanges; latency-optimal for small
/// messages). Non-power-of-two N folds the extra ranks in first and out at the end.
void recursive_doubling_all_reduce(P2P& p, void* buf, int64_t count, DType dt, ReduceOp op);
/// Rabenseifner: recursive-halving reduce-scatter + recursive-doubling all-gather
/// (bandwidth-optimal on power-of-two groups); same folding for other N.
void halving_doubling_all_reduce(P2P& p, void* buf, int64_t count, DType dt, ReduceOp op);

/// Root receives every rank's input (bytes_per_rank) into output block j.
void linear_gather(P2P& p, const void* input, void* output, int64_t bytes_per_rank, int root);
/// Rank j receives root's input block j into output.
void linear_scatter(P2P& p, const void* input, void* output, int64_t bytes_per_rank, int root);
/// Block j of input goes to rank j's output block r, by N-1 pairwise exchanges.
void pairwise_all_to_all(P2P& p, const void* input, void* output, int64_t bytes_per_rank);
/// ceil(log2 N) rounds of zero-byte messages.
void dissemination_barrier(P2P& p);

}  // namespace strata::comm::detail
