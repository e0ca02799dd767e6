// The pipeline executor: runs any rank's action list (pipeline_schedule.h) over the
// rank's stages (pipeline_stage.h) and the pp group's point-to-point ops, so GPipe, 1F1B
// and interleaved 1F1B share one implementation and differ only in the list.
#pragma once
#include <strata/autograd/engine.h>
#include <memory>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/parallel/pipeline/schedule.h>
#include <strata/parallel/pipeline/stage.h>

namespace strata::parallel {

/// parallel.pp_exchanges: how the pipeline's exchanges run.
enum class PipelineExchanges {
  automatic,  ///< default_inline_exchanges() for this host
  inline_,    ///< posted and progressed by the compute thread
  thread,     ///< handed to each channel's comm thread
};

/// parallel.{pp_schedule, microbatches, pp_virtual, pp_exchanges}.
struct PipelineOptions {
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int microbatches = 1;    ///< m: micro-batches per step (the batch is cut into m)
  int virtual_stages = 1;  ///< v: model chunks per rank (interleaved)
  PipelineExchanges exchanges = PipelineExchanges::automatic;
};

/// What the last step did on this rank.
struct PipelineStepStats {
  double compute_s = 0;    ///< wall time inside forward/backward actions
  double compute_cpu_s = 0;  ///< this thread's CPU time inside them (below compute_s: it was preempted)
  double comm_s = 0;       ///< wall time posting exchanges and waiting for them (not overlapped)
  int peak_in_flight = 0;  ///< most micro-batches (per stage) forwarded and not yet backwarded
};

/// One pipeline rank. Holds the rank's action list and its stages; the model (pruned by
/// keep_stages) and the pp group must outlive it. Exchanges run asynchronously on
/// channel groups (one 2-rank group per message kind and direction, see channel_of),
/// created from the pp group by the constructor (collective over pp). Not thread-safe.
class PipelineExecutor {
 public:
  /// `stages`: every stage of the split (index = stage); this rank runs those with
  /// shape.owner(stage) == pp.rank().
  PipelineExecutor(std::shared_ptr<nn::Module> model, PipelinePlan plan, ScheduleShape shape,
                   std::vector<PipelineStageSpec> stages, comm::ProcessGroup& pp);

  /// One step's forwards and backwards: the batch (batch_shape[0] rows, a multiple of m)
  /// is cut into m micro-batches along dim 0. `input` is needed on the first stage's rank,
  /// `target` on the last's (others may pass undefined tensors). Each micro-batch's
  /// loss is scaled by 1/m before its backward, so the accumulated gradients equal one
  /// backward of the whole batch's mean loss. Returns that mean loss on every pp rank
  /// (sent from the last stage). A failed exchange throws CommError naming the stage,
  /// the micro-batch and the peer.
  double run(const Tensor& input, const Tensor& target, const Shape& batch_shape);

  /// Forward only, no autograd (evaluation): the whole batch as one micro-batch through
  /// every stage in order. Collective over the pp group; returns the mean loss on every
  /// pp rank. Shapes and errors as run().
  double eval_loss(const Tensor& input, const Tensor& target, const Shape& batch_shape);
  /// Forward only, as eval_loss: the model's output (e.g. a classifier's logits) on the
  /// rank that runs the last stage, an undefined tensor on the others. Collective over pp.
  Tensor eval_forward(const Tensor& input, const Shape& batch_shape);

  const std::vector<Action>& actions() const { return actions_; }
  const ScheduleShape& shape() const { return shape_; }
  const PipelinePlan& plan() const { return plan_; }
  const std::vector<PipelineStageSpec>& stages() const { return stages_; }
  /// The stages this rank runs, in chunk order.
  std::vector<PipelineStageSpec> my_stages() const;
  const PipelineStepStats& last_stats() const { return stats_; }
  /// Exchanges posted by the executor's thread and progressed in its waits (on), or each
  /// handed to its channel group's comm thread (off). The constructor picks
  /// default_inline_exchanges() for this host; `strata bench pp --exchanges` compares.
  void set_inline_exchanges(bool on);
  bool inline_exchanges() const { return inline_; }

 private:
  struct Pending {  // a posted exchange: its Work and, for a receive, the buffer it fills
    CommOp op;
    comm::Work work;
    Tensor buf;
  };
  /// Starts `o` on its channel (a receive into a new buffer sized from the stage specs).
  void post(const CommOp& o, const Shape& mb_shape);
  /// Waits for `o` (posted before); a receive's buffer lands in its slot.
  void wait(const CommOp& o);
  comm::ProcessGroup& channel(const CommOp& o, int& peer) const;
  [[noreturn]] void fail(const CommOp& o, const std::string& why) const;
  double share_loss(double local_on_last);
  /// STRATA_PP_TIMELINE: one event per action / exchange op of the running step.
  void note(char kind, const CommOp* o, int mb, int stage, int64_t t0, int64_t t1, double cpu_s);
  void write_timeline();

  std::shared_ptr<nn::Module> model_;
  PipelinePlan plan_;
  ScheduleShape shape_;
  std::vector<PipelineStageSpec> stages_;
  comm::ProcessGroup& pp_;
  std::vector<Action> actions_;
  PipelineStepStats stats_;
  // Per (stage, micro-batch) of the running step.
  struct Slot {
    Tensor in, out, loss, in_grad, out_grad;
    DeferredGrads weight_grads;  ///< zb-h1: what its B deferred to its W
  };
  std::vector<std::vector<Slot>> slots_;
  // channels_[msg][sending rank]: the 2-rank group {sender, receiver} (null when this rank
  // is neither or the link is unused).
  std::vector<std::shared_ptr<comm::ProcessGroup>> channels_[2];
  // Every pp rank (host backends only; null on nccl): the last stage's loss goes to the
  // others on it, as one inline batch of sends when exchanges are inline (no comm-thread
  // round trip after the schedule).
  std::shared_ptr<comm::ProcessGroup> loss_group_;
  std::vector<std::unique_ptr<Pending>> pending_;
  bool inline_ = false;
  // STRATA_PP_TIMELINE=<prefix>: every step's actions, with steady_clock times, appended
  // to <prefix>.<pp rank> (scripts/pp_timeline.py merges the ranks and prints the
  // critical path). Off: one branch per action.
  struct TimelineEvent {
    char kind;  // F, B, P (op posted), W (op waited for), L (loss all-reduce)
    CommOp op;
    int mb, stage;
    int64_t t0, t1;  // steady_clock ns (one clock for every process on a host)
    int64_t cpu;     // the thread's CPU ns inside it
  };
  std::string timeline_path_;
  std::vector<TimelineEvent> timeline_;
  int64_t timeline_step_ = 0;
};

/// The executor's default for how exchanges run, from `host_ranks` ranks on this host
/// (ProcessGroup::host_ranks) of `threads` compute threads each and the host's `cores`:
/// inline (posted by the compute thread, progressed by it while it waits for the data,
/// polling without sleeping) when host_ranks x threads >= cores, i.e. the compute threads
/// fill the cores and a comm thread could only run by preempting one; comm threads
/// otherwise, which then have a core to progress the transfers on during the compute.
bool default_inline_exchanges(int host_ranks, int threads, int cores);

}  // namespace strata::parallel
