// Pipeline schedules as data: for (pp, micro-batches m, virtual stages v, rank) the ordered
// list of actions one rank runs (forward/backward of a micro-batch on a stage and the
// batched sends/receives between them), plus a simulator that runs every rank's list
// against the others, so deadlock freedom, dependencies and memory are checked as data.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::parallel {

/// parallel.pp_schedule: GPipe (all forwards, then all backwards), 1F1B (warm-up, one
/// forward one backward, cool-down), interleaved 1F1B (v model chunks per rank,
/// Megatron-LM's order) and ZB-H1 (zero bubble, Qi et al. 2023: 1F1B with each backward
/// split into the input gradient B, on the critical path, and the weight gradients W,
/// deferred into what would be the cool-down's idle time; 1F1B's activation memory plus
/// the deferred W's inputs).
enum class ScheduleKind { gpipe, one_f_one_b, interleaved, zb_h1 };

/// "gpipe", "1f1b", "interleaved", "zb-h1"
const char* schedule_name(ScheduleKind k);
/// The kind named by `s`; false when `s` names none.
bool parse_schedule(const std::string& s, ScheduleKind& out);

/// The degrees a schedule is built for. Stage s (of stages() = pp * v) lives on rank
/// s % pp, as its chunk s / pp (chunk c of rank r is stage c * pp + r).
struct ScheduleShape {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int pp = 2;           ///< ranks in the pipeline
  int microbatches = 1; ///< m
  int virtual_stages = 1;  ///< v: chunks per rank (interleaved only; 1 otherwise)
  int stages() const { return pp * virtual_stages; }
  int owner(int stage) const { return stage % pp; }
  /// Empty when the shape is valid, else why not (m % pp for interleaved, v > 1 only for
  /// interleaved, pp >= 2, m >= 1).
  std::string invalid() const;
};

/// One message between adjacent stages. act(mb, s) is forward(mb, s)'s output, sent by
/// owner(s) to owner(s + 1); grad(mb, s) is the gradient of forward(mb, s)'s input, sent
/// by owner(s) to owner(s - 1).
struct CommOp {
  enum class Dir { send, recv } dir;
  enum class Msg { act, grad } msg;
  int mb;
  int stage;  ///< the stage that produced the message
  int peer;   ///< the other rank
  /// The tag both sides use (distinct per message modulo the comm layer's tag range).
  int tag(int stages, int max_tag) const;
  bool operator==(const CommOp&) const = default;
};

/// One step of a rank's list. Exchanges are asynchronous: a `post` action starts its ops
/// (each on the channel of its message kind and direction, see channel_of) and returns at
/// once; a `wait` action blocks until the listed ops, posted earlier by this rank, have
/// completed. The lists post each receive one compute ahead of the compute that needs it,
/// wait for it just before that compute, post each send right after the compute that
/// produced it, and wait for all sends at the end of the step.
struct Action {
  /// backward: the whole backward, or (zb-h1) only its input gradient; weight (zb-h1):
  /// the weight gradients that micro-batch's backward deferred.
  enum class Kind { forward, backward, post, wait, weight } kind;
  int mb = -1;     ///< forward / backward / weight
  int stage = -1;  ///< forward / backward / weight
  std::vector<CommOp> ops;  ///< post / wait
  bool is_compute() const { return kind == Kind::forward || kind == Kind::backward || kind == Kind::weight; }
  /// "F3@1", "B0@2", "W0@2", "post[send act(2,0)->1, recv grad(1,1)<-1]", "wait[recv grad(1,1)<-1]"
  std::string str() const;
};

/// The channel a message travels on: one per (kind, sending rank). act(mb, s) goes from
/// owner(s) to owner(s + 1) = (owner(s) + 1) % pp, grad(mb, s) from owner(s) to
/// (owner(s) - 1 + pp) % pp, so each channel carries one kind in one direction between
/// two ranks, and (for every schedule here) in the same message order on both sides.
/// The executor gives each channel its own 2-rank process group, hence its own comm
/// thread: an op waiting on one channel never holds up another.
struct Channel {
  CommOp::Msg msg;
  int from, to;
  bool operator==(const Channel&) const = default;
};
Channel channel_of(const ScheduleShape& shape, const CommOp& op);

/// Every rank's actions (index = rank): the schedule's compute order with the exchanges
/// derived from it (receives posted one compute ahead, waited just before use; sends
/// posted right after the compute; all sends waited at the end). Deadlock-free for any
/// feasible compute order whose channels carry messages in the same order on both sides
/// (checked by simulate()). ConfigError naming the key on an invalid shape.
std::vector<std::vector<Action>> build_schedules(const ScheduleShape& shape);
/// build_schedules(shape)[rank].
std::vector<Action> build_schedule(const ScheduleShape& shape, int rank);

/// What simulate() found running every rank's list against the others as the executor
/// runs them: each channel is FIFO on both sides (one comm thread per channel and rank:
/// an op starts once the previous op of its channel completed) with rendezvous matching
/// (an op completes only once its peer has posted the matching op), free communication.
struct ScheduleSim {
  std::string error;  ///< empty: every check passed; else the first violation or the deadlock
  /// Time slots with unit-cost forwards and backwards and free communication.
  int64_t makespan = 0;
  std::vector<int64_t> busy;      ///< per rank: slots spent computing
  std::vector<int> peak_in_flight;  ///< per rank: most (mb, stage) forwarded but not yet backwarded
  /// Per rank, per slot: "" (idle) or "F3" / "B3" (micro-batch 3; interleaved adds the chunk, "F3.1").
  std::vector<std::vector<std::string>> cells;
  /// 1 - busy / makespan, averaged over ranks.
  double bubble() const;
};

/// Runs `lists` (one per rank, lists[r] = build_schedule(shape, r) or any other list)
/// and checks: no deadlock, every forward(mb, s) and backward(mb, s) exactly once on
/// owner(s), forward before backward, inputs received before use, outputs computed
/// before sent, every message sent once and received once with matching peers.
/// `rank_cost` (optional, one per rank): the slots each forward and each backward of that
/// rank takes (default 1), to model stages of unequal cost.
ScheduleSim simulate(const ScheduleShape& shape, const std::vector<std::vector<Action>>& lists,
                     const std::vector<int64_t>& rank_cost = {});

/// True for the schedules that split each backward into B and W (zb-h1).
bool splits_backward(ScheduleKind k);

/// The bubble fraction the formula predicts: (p-1)/(m+p-1), (p-1)/(v*m+p-1) interleaved,
/// and (p-1)/(3m+p-1) for zb-h1 with F, B and W of equal cost and m >= p (its idle time
/// is (p-1)(F+B-W) against 1F1B's (p-1)(F+B+W)).
double bubble_formula(const ScheduleShape& shape);
/// The bubble of the busiest rank for ranks of unequal cost: simulate() with rank r's
/// forwards and backwards each taking rank_busy[r] (any unit; scaled to integer slots,
/// the largest 200), 1 - the busiest rank's busy slots / makespan. Equal costs give the
/// formula above. For GPipe it is (sum t - t_max) / (sum t + (m - 1) t_max), and for 1F1B
/// too when the busiest stage is the last (the head and the loss); a heavier first stage
/// never idles under 1F1B once m >= pp (tested). `strata bench pp` prints it for the measured busy times.
double imbalance_bubble(const ScheduleShape& shape, const std::vector<double>& rank_busy);
/// "(p-1)/(m+p-1) = 1/5 = 0.200"
std::string bubble_formula_str(const ScheduleShape& shape);

/// A text chart of a simulation: one row per rank, one cell per slot.
std::string schedule_chart(const ScheduleShape& shape, const ScheduleSim& sim);

}  // namespace strata::parallel
