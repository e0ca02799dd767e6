// ProcessGroup: one rank's view of a group of ranks, with every collective on Tensors.
// Calls are checked on the caller's thread, then run in issue order on the group's own
// comm thread, so compute overlaps communication; each returns a Work handle.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <strata/comm/backend.h>
#include <strata/comm/types.h>
#include <strata/comm/work.h>
#include <strata/tensor/tensor.h>

namespace strata::comm {

/// One send or receive of a batch_isend_irecv list. `tensor` lives on the group's
/// device; a recv tensor is written (any dtype and shape: only its byte size must equal
/// the matching send's). `peer` is a rank of the group other than this one; `tag` is in
/// [0, ProcessGroup::kMaxUserTag). Ops between two ranks with the same tag match in the
/// order they were posted.
struct P2POp {
  enum class Kind { send, recv } kind;
  Tensor tensor;
  int peer;
  int tag = 0;
};

/// One rank's handle on a group. Build the world with init_mpi_world() (comm/mpi.h) or
/// make_local_world()/run_local() (comm/local.h); derive sub-groups with split() /
/// new_group() or a DeviceMesh. There is no global group: pass groups explicitly.
///
/// Semantics follow torch.distributed: every rank of the group calls the same
/// collectives in the same order. Tensors are of any dtype (reductions: f32, f64, f16,
/// bf16, i32, i64, u8; avg only on floating dtypes; f16/bf16 accumulate as
/// CommOptions::reduce_dtype says) and must live on the group's device(): CPU memory for the mpi
/// and local backends, this rank's GPU for nccl. Any other tensor is refused on the
/// calling thread before anything is queued (see device_mismatch): like torch's gloo and
/// non-CUDA-aware mpi backends, the cpu backends do not stage CUDA tensors through host
/// memory, so copy them with .to(kCPU) or use the nccl backend. Non-contiguous tensors
/// are handled through a contiguous staging copy (copied back on completion). Tensors
/// must stay alive and unmodified until the returned Work completes (the Work keeps
/// their storage alive).
///
/// Thread-safety: calls may come from any thread; ops run in the order they were
/// issued. Every wait inside an op is bounded by comm.timeout_s; on expiry (or when a
/// peer is found dead) the op fails with a CommError naming op, group, rank, sequence
/// number and size, the group is aborted and every later op on it fails at once.
/// Collectives and point-to-point ops are numbered apart ("all_reduce seq 57", "send
/// p2p seq 3"). After a collective times out on a cpu backend, the ranks that timed out
/// exchange where they are stuck for up to min(max(timeout/2, 0.2 s), 5 s) and the error
/// names the ranks that never answered ("rank 2 never joined all_reduce seq 57 ...").
class ProcessGroup {
 public:
  ProcessGroup(std::unique_ptr<Backend> backend, CommOptions options, std::string name);
  /// Runs the ops still queued, then joins the comm thread.
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  const CommOptions& options() const { return opts_; }
  /// "mpi", "local", ...
  const char* backend_kind() const { return backend_->kind(); }
  /// Where this group's tensors live: kCPU (mpi, local) or this rank's GPU (nccl).
  /// Build buffers for collectives with it, e.g. ops::zeros({n}, dt, group.device()).
  Device device() const { return device_; }
  /// The algorithm ops issued from now on use (all ranks must agree).
  Algorithm algorithm() const { return algorithm_.load(); }
  void set_algorithm(Algorithm a) { algorithm_.store(a); }
  /// What 16-bit reductions issued from now on accumulate in (comm.reduce_dtype; all
  /// ranks must agree). Groups split from this one inherit it.
  ReduceDtype reduce_dtype() const { return reduce_dtype_.load(); }
  void set_reduce_dtype(ReduceDtype d) { reduce_dtype_.store(d); }

  /// t (any shape) on every rank becomes root's t.
  Work broadcast(const Tensor& t, int root);
  /// t on root becomes op over every rank's t; other ranks' t is left unchanged.
  Work reduce(const Tensor& t, int root, ReduceOp op = ReduceOp::sum);
  /// t becomes op over every rank's t, in place.
  Work all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum);
  /// input (c elements) -> output (N*c elements): block j of output = rank j's input.
  /// input may be exactly output's block `rank()` (the in-place form ZeRO uses).
  Work all_gather(const Tensor& input, const Tensor& output);
  /// input (N*c) -> output (c): output = op over ranks of input block `rank()`.
  Work reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::sum);
  /// input (c) on every rank -> output (N*c) on root; output is ignored elsewhere (may be undefined).
  Work gather(const Tensor& input, const Tensor& output, int root);
  /// input (N*c) on root (ignored elsewhere) -> output (c): block `rank()` of root's input.
  Work scatter(const Tensor& input, const Tensor& output, int root);
  /// input (N*c) -> output (N*c): output block j = rank j's input block `rank()`.
  Work all_to_all(const Tensor& input, const Tensor& output);
  /// Point-to-point. A send completes once matched by the receiver (rendezvous), so two
  /// ranks that send to each other first deadlock: order them or use send_recv.
  /// tag in [0, kMaxUserTag).
  Work send(const Tensor& t, int dst, int tag = 0);
  Work recv(const Tensor& t, int src, int tag = 0);
  /// Sends `send_t` to dst and receives `recv_t` from src at once (pipeline exchanges).
  Work send_recv(const Tensor& send_t, int dst, const Tensor& recv_t, int src, int tag = 0);
  /// Posts every op at once and progresses them together (like torch's batch_isend_irecv):
  /// a stage can send activations while receiving gradients without deadlock. The Work
  /// completes when all ops have; `label` (e.g. "pp stage 1 mb 3") appears in errors.
  /// Checked on the calling thread (peers, tags, devices); an empty list returns a
  /// completed Work. Bounded by comm.timeout_s: when ops are still pending then, the
  /// CommError names the label, each pending op with its tag and the peer(s) it waited
  /// for. Bytes sent are counted under OpKind::batch_isend_irecv (payload_bytes: every
  /// op's tensor, sent or received). Only the ranks named as peers take part.
  Work batch_isend_irecv(std::vector<P2POp> ops, std::string label = "");
  Work barrier();

  /// Inline point-to-point (off by default): batch_isend_irecv calls issued from now on
  /// skip the comm thread. The calling thread posts the ops on the transport before the
  /// call returns, and whichever thread waits on (or polls is_completed()) the Work
  /// progresses them there, so a small exchange costs no hand-off to another thread and
  /// no comm thread competes for the cores meanwhile (the pipeline's 2-rank channels use
  /// it; torch's batch_isend_irecv is likewise posted by the caller). Errors, timeouts
  /// (comm.timeout_s from the post), stats and group failure are as on the comm thread.
  /// Issue order still holds: while ops are queued or running on the comm thread, a call
  /// is queued behind them as usual. Only for backends whose point-to-point calls are
  /// thread-safe (mpi, local); elsewhere (nccl) it has no effect. An op's buffers are kept
  /// by the group until it completes; the destructor completes inline ops still in flight.
  void set_inline_p2p(bool on);
  bool inline_p2p() const;
  /// Ranks of the whole job (the world this group was split from) on this rank's host,
  /// this one included: with get_num_threads() compute threads each, they fill
  /// host_ranks() x threads of the host's cores (the pipeline picks inline exchanges
  /// when that is all of them). mpi: processes on this host; local: the world's ranks.
  int host_ranks() const { return backend_->host_ranks(); }

  /// Collective over this group (every rank calls it): ranks with the same color >= 0
  /// form a new group, ranked by (key, rank); color < 0 returns nullptr.
  std::shared_ptr<ProcessGroup> split(int color, int key, std::string name = "");
  /// Collective over this group: a group of `ranks` (ranks of this group, in their new
  /// order); returns nullptr on ranks not listed.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, std::string name = "");

  /// Counters of ops completed so far (thread-safe snapshot).
  CommStats stats() const;
  /// CPU time the comm thread has used so far (CLOCK_THREAD_CPUTIME_ID of that thread;
  /// 0 before the first op that needed it). Busy-polling for a peer counts, so on cores
  /// shared with compute this is time taken from the compute threads. Thread-safe.
  double comm_thread_cpu_s() const;
  void reset_stats();

  /// Fails the group: queued and future ops throw CommError with `reason`, and peers are
  /// told (local: their ops fail at once; mpi: the job is torn down at exit).
  void abort(const std::string& reason);

  static constexpr int kMaxUserTag = 30000;

 private:
  struct OpInfo;
  struct Task;
  struct InlineBatch;  // a batch_isend_irecv progressed by its callers (process_group_ops.cpp)
  /// Bytes one op sent: counted on send/recv, or modelled for a native collective.
  struct SentBytes {
    int64_t counted = 0, modelled = 0;
  };
  using Body = std::function<void(const OpInfo&, SentBytes& bytes)>;

  Work enqueue(OpInfo info, Body body);
  void run_task(Task& t);
  /// Drives an inline batch until it completed (true) or `until` passed (false).
  bool progress_inline(InlineBatch& b, Deadline until);
  /// describe() of an inline batch, its ops' text built on first use (only messages need it).
  std::string describe_inline(InlineBatch& b) const;
  /// Counts a completed op in stats().
  void count_op(const OpInfo& info, const SentBytes& bytes, double seconds);
  /// Marks the group failed (first failure wins), logs it and aborts the backend.
  void fail_group(const std::string& msg);
  /// The error an op's exception `e` is reported as (CommError naming the op; timeouts
  /// and transport errors fail the group).
  std::exception_ptr op_failure(OpInfo& info, std::exception_ptr e);
  void comm_loop();
  void execute(const OpInfo& info, const Collective& c, SentBytes& bytes);
  void execute_generic(const OpInfo& info, const Collective& c, int64_t& bytes_counted);
  void debug_check(const OpInfo& info);
  std::string describe(const OpInfo& info) const;
  /// After a collective timed out: "; rank 2 never joined all_reduce seq 57 ...; ranks
  /// 0,1,3 reached it", from a bounded exchange with the ranks that timed out too
  /// (process_group_hang.cpp). Empty for p2p ops and device backends.
  std::string hang_report(const OpInfo& info);
  void check_tensor(const char* op, const Tensor& t, bool written) const;

  std::unique_ptr<Backend> backend_;
  CommOptions opts_;
  std::string name_;
  int rank_, size_;
  bool debug_;
  Device device_;
  std::atomic<Algorithm> algorithm_;
  std::atomic<ReduceDtype> reduce_dtype_;

  mutable std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<std::unique_ptr<Task>> queue_;
  bool stop_ = false;
  bool running_ = false;     // the comm thread is running a task
  bool inline_p2p_ = false;  // set_inline_p2p
  // Inline batches not yet known complete (and failed ones, whose buffers the transport
  // may still touch): the group keeps their buffers alive.
  std::vector<std::shared_ptr<InlineBatch>> inline_ops_;
  int64_t next_seq_ = 0;      // next collective's seq
  int64_t next_p2p_seq_ = 0;  // next point-to-point op's seq
  std::thread thread_;
  std::string failure_;  // set once on the first fatal error (under qmu_)
  // hang_report's buffers: messages may still land in them after it returns (comm thread only).
  std::vector<int64_t> hang_status_;
  // Buffers of batch_isend_irecv ops that timed out while still posted: the transport may
  // still write or read them, so they live as long as the group (comm thread only).
  std::vector<Tensor> orphaned_;

  mutable std::mutex stats_mu_;
  CommStats stats_;
};

/// Where a tensor handed to a collective is checked against its group: the error text
/// for a tensor on `tensor` given to `op` of a group on `group_device`, or nullopt when
/// they match. `group`, `backend` and `rank` name the group in the message, e.g.
/// "[all_reduce] group 'world' (nccl, rank 1) runs on cuda:1 but the tensor is on cuda:0: ...".
/// Pure (no CUDA calls): ProcessGroup runs it on the caller's thread for every tensor
/// argument before an op is queued and throws strata::Error with the text.
std::optional<std::string> device_mismatch(std::string_view op, std::string_view group, std::string_view backend,
                                           int rank, Device group_device, Device tensor);

/// Blocking collectives on small host values (losses, timings, status bytes) for code
/// that must work on every backend: `t` is a CPU tensor, copied to group.device() for the
/// op (nccl takes only GPU memory); the result comes back as a new CPU tensor and `t` is
/// left unchanged. Collective: every rank calls them in the same order.
Tensor all_reduce_host(ProcessGroup& group, const Tensor& t, ReduceOp op);
/// t (c elements, any shape) -> (N*c): block j is rank j's t.
Tensor all_gather_host(ProcessGroup& group, const Tensor& t);

}  // namespace strata::comm
