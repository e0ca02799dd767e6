// ZeRO's runtime state behind ZeroDataParallel (internal): the flat units, the stage-3
// gather/free of each unit's parameters, and the gradient reduce-scatters driven by the
// parameters' post-accumulate hooks. What a stage shards is read from ZeroPolicy.
#pragma once
#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include <strata/comm/process_group.h>
#include <strata/nn/module.h>
#include <strata/optim/optimizer.h>
#include <strata/parallel/data/zero.h>
#include <strata/parallel/data/zero_plan.h>

namespace strata::parallel::detail {

using ZeroClock = std::chrono::steady_clock;

/// 1-D elements [begin, begin + n) of a flat buffer (a view).
Tensor slice1d(const Tensor& flat, int64_t begin, int64_t n);

struct ZeroUnit {
  FlatUnit layout;
  std::vector<ShardSlice> slices;  // this rank's
  DType dtype = DType::f32;
  nn::Module* module = nullptr;  // stage 3 wrapped module (null: root)
  int hook_id = -1;

  Tensor param_flat;  // padded; persistent unless the policy shards parameters (then released while resharded)
  Tensor param_shard; // shard elements (view of param_flat, or own buffer when parameters are sharded)
  Tensor grad_flat;   // persistent padded gradients when the policy keeps them (.grad are views)
  Tensor grad_shard;  // shard elements

  // Per iteration.
  int pending = 0;          // parameters whose gradient has not arrived
  std::vector<char> ready;  // per layout entry
  bool launched = false;
  Tensor rs_in;             // stages 2-3: the staged full gradient (padded), held until its reduce-scatter is waited on
  Tensor rs_out;            // where the reduce-scatter lands (grad_shard, or a comm buffer to add)
  std::optional<comm::Work> rs_work;
  std::optional<comm::Work> ar_work;  // HSDP: rs_out averaged over the replicate group
  // Stage 3 gather state.
  bool gathered = false;
  std::optional<comm::Work> ag_work;  // in flight until waited
};

struct ZeroState {
  comm::ProcessGroup& group;
  comm::ProcessGroup* replicate = nullptr;  // HSDP: the same slice on the other replicas
  ZeroOptions opts;
  ZeroPolicy policy;
  int rank = 0, world = 1;
  std::vector<std::string> names;  // trainable parameters, registration order
  std::vector<Tensor> params;      // their tensors (views into the units after flattening)
  std::vector<Shape> shapes;
  std::vector<ZeroUnit> units;
  std::vector<int> unit_of;        // per param
  std::vector<int> entry_of;       // per param: index in its unit's layout
  std::vector<int> launch_order;   // units in the order backward completes them
  std::vector<Tensor> buffers;
  std::unique_ptr<optim::Optimizer> optimizer;
  Device device = kCPU;  // where the parameters (and so every flat buffer) live

  bool sync = true;
  bool active = false;       // a synchronized backward is under way (hooks fired)
  bool in_backward = false;  // stage 3: backward reached a unit (recompute forwards keep params)
  bool full_params = false;  // stage 3: summon_full_params() in effect
  bool grads_fresh = true;   // gradient slices hold nothing yet (zero_grad since last finalize)
  size_t next_launch = 0;
  std::deque<ZeroUnit*> staged;  // stages 2-3: launched units still holding rs_in, launch order
  ZeroStepStats stats, last;

  ZeroState(comm::ProcessGroup& g, const ZeroOptions& o)
      : group(g), opts(o), policy(ZeroPolicy::for_stage(o.stage)), rank(g.rank()), world(g.size()) {}

  /// Entry e of unit u inside one of the unit's padded flat buffers (parameters,
  /// gradients or the reduce-scatter staging), shaped like that parameter.
  Tensor entry_view(const Tensor& flat, const ZeroUnit& u, size_t e) const;
  /// Every unit's full parameters from the slices (in place, when they are not sharded);
  /// returns how many all-gathers ran and adds the time blocked on them to `wait_s`.
  int64_t all_gather_params(double& wait_s);

  // Stage 3 gather / free.
  void start_gather(ZeroUnit& u);
  void wait_gather(ZeroUnit& u);
  void ensure_gathered(ZeroUnit& u);
  void reshard(ZeroUnit& u);
  int unit_index(const ZeroUnit& u) const { return int(&u - units.data()); }
  void prefetch_after(const ZeroUnit& u, int step);
  void pre_forward(ZeroUnit& u);
  Tensor post_forward(ZeroUnit& u, const Tensor& out);
  void pre_backward(ZeroUnit& u);

  // Gradient reduce-scatter.
  void begin_iteration();
  void on_grad(int p);
  void launch_ready();
  void launch(ZeroUnit& u);
  /// Waits (on this, the compute thread) for the oldest staged units' reduce-scatters and
  /// frees their staging until at most `keep` remain. The comm thread drops an op's
  /// tensors before it completes the op, so the staging's bytes go here, at a point of
  /// the compute thread's schedule, whatever the comm thread's timing.
  void retire_staged(size_t keep);
  void finalize();
  /// Every unit's gradients so far counted as complete and launched (ZeroDataParallel::reduce_accumulated).
  void reduce_accumulated();
};

}  // namespace strata::parallel::detail
