// The layout search (see plan_search.h): per layout the stages, each pipeline rank's
// bytes and in-flight micro-batches, the bytes sent per step, the bubble and the
// step-time model; then every layout of N ranks, ranked.
#include "apps/plan_search.h"

#include <algorithm>
#include <string>

#include "apps/layout.h"
#include "apps/model_family.h"
#include <strata/core/config.h>
#include <strata/core/error.h>
#include <strata/parallel/pipeline/stage.h>

namespace strata::apps {

int peak_in_flight(const parallel::ScheduleShape& s, int rank) {
  switch (s.kind) {
    case parallel::ScheduleKind::gpipe: return s.microbatches;
    case parallel::ScheduleKind::one_f_one_b:
    case parallel::ScheduleKind::zb_h1:  // 1F1B's order (its deferred W inputs are not counted)
      return std::min(s.microbatches, s.pp - rank);
    case parallel::ScheduleKind::interleaved:  // Megatron's warm-up forwards, then one more before the first backward
      return std::min(s.microbatches * s.virtual_stages, (s.pp - rank - 1) * 2 + (s.virtual_stages - 1) * s.pp + 1);
  }
  return s.microbatches;
}

namespace {

constexpr int64_t kF32 = 4;

int64_t ring_all_reduce(int64_t k, int64_t n) { return n > 1 ? 2 * (n - 1) * k / n : 0; }

// Bytes one rank sends in `list`'s all-reduces over tp for a micro-batch of b samples, each
// entry `times` over.
int64_t tp_all_reduces(const std::vector<nn::TpAllReduce>& list, int64_t times, int64_t b, int tp) {
  int64_t bytes = 0;
  for (const nn::TpAllReduce& r : list) bytes += times * r.count * ring_all_reduce(b * r.per_sample * kF32, tp);
  return bytes;
}

// Why this build's parallelize() refuses a layout ("" when it runs it).
// (parallelize() in parallel/parallelize.cpp; drop a line when it composes them.)
// pp x ZeRO-3 runs (parallelize keeps a stage's units gathered for the whole pipeline
// step), but its peak is the gathered stage, which this table's ZeRO-3 row does not model.
std::string unmodelled(const parallel::ParallelDims& d) {
  if (d.pp > 1 && d.zero_stage == 3) return "pp x ZeRO-3";
  return "";
}

}  // namespace

int64_t all_to_all_bytes(int64_t a2a_per_sample, int64_t samples, int ep, int64_t moe_layers, int microbatches,
                         int64_t bytes_per_value) {
  if (ep <= 1) return 0;
  return 4 * moe_layers * int64_t(microbatches) * (int64_t(ep) - 1) * samples * a2a_per_sample * bytes_per_value / ep;
}

LayoutPlan plan_layout(const TrainConfig& cfg, const nn::ModelSpec& model, const parallel::ParallelDims& dims,
                       parallel::ScheduleKind schedule, int microbatches, int virtual_stages,
                       const PlanAssumptions& a) {
  LayoutPlan p;
  p.dims = dims;
  p.note = unmodelled(dims);
  const int64_t batch_dp = cfg.train.batch_size / dims.dp;  // samples per dp rank per step
  const int pp = dims.pp;
  const int v = pp > 1 ? virtual_stages : 1;
  const int mb = pp > 1 ? microbatches : int(std::max<int64_t>(1, cfg.train.grad_accum_steps));
  p.schedule = schedule;
  p.microbatches = mb;
  p.virtual_stages = v;
  const int64_t b = batch_dp / mb;  // samples per micro-batch
  const int64_t mb_bytes = b * model.stage_output_per_sample * kF32;  // what a stage sends per micro-batch

  // The stages (blocks [begin, end)) and each rank's in-flight micro-batches.
  std::vector<parallel::PipelineStageSpec> stages;
  std::vector<int> in_flight(size_t(pp), 1);
  if (pp > 1) {
    const parallel::ScheduleShape shape{schedule, pp, mb, v};
    const std::string bad = shape.invalid();
    if (!bad.empty()) config_fail(bad.substr(0, bad.find(' ')), bad.substr(bad.find(' ') + 1));
    const bool configured = cfg.parallel.dims.pp == pp && cfg.parallel.pipeline.virtual_stages == v;
    stages = parallel::split_stages(model.block_params, model.first_params, model.last_params, pp * v,
                                    configured ? cfg.parallel.pp_layers : std::vector<int64_t>{});
    for (int r = 0; r < pp; ++r) in_flight[size_t(r)] = peak_in_flight(shape, r);
    p.bubble = parallel::bubble_formula(shape);
  } else if (model.has_pp_plan()) {
    stages.push_back({.stage = 0, .stages = 1, .begin = 0, .end = int64_t(model.block_params.size())});
  }

  const int states = parallel::optimizer_state_count(cfg.optim.name, cfg.optim.momentum);
  const bool sp = cfg.parallel.sequence_parallel && dims.tp > 1;
  int64_t worst = -1;
  for (int r = 0; r < pp; ++r) {
    int64_t elements = 0, sharded = 0, layers_max = 0, blocks = 0;
    int64_t experts = 0, moe_blocks = 0, moe_max = 0;  // expert weights, MoE blocks, those of the largest chunk
    bool first = false, last = false;
    int64_t pp_sent = 0;
    if (stages.empty()) {  // no pipeline description: the whole model on every rank
      elements = model.total;
      sharded = model.tp_sharded;
      experts = model.expert_params;
    } else {
      for (const auto& st : stages) {
        if (st.stage % pp != r) continue;
        int64_t moe_here = 0;
        for (int64_t l = st.begin; l < st.end; ++l) {
          elements += model.block_params[size_t(l)];
          sharded += model.block_tp_sharded[size_t(l)];
          if (model.moe_block(l)) experts += model.block_expert_params[size_t(l)], ++moe_here;
        }
        first = first || st.first();
        last = last || st.last();
        // The chunk with the most blocks (the most MoE blocks among equals) sets the stored activations.
        if (st.end - st.begin > layers_max || (st.end - st.begin == layers_max && moe_here > moe_max))
          layers_max = st.end - st.begin, moe_max = moe_here;
        blocks += st.end - st.begin;
        moe_blocks += moe_here;
        // Per micro-batch it sends its output forward (unless last) and its input's
        // gradient back (unless first).
        pp_sent += int64_t(mb) * mb_bytes * ((st.last() ? 0 : 1) + (st.first() ? 0 : 1));
      }
      if (first) elements += model.first_params, sharded += model.first_tp_sharded;
      if (last) elements += model.last_params, sharded += model.last_tp_sharded;
      if (first && last) elements -= model.tied_params, sharded -= model.tied_tp_sharded;
    }
    // Expert parallelism: this rank holds experts / ep of its MoE layers' expert weights.
    const int ep = model.has_moe() ? dims.ep : 1;
    const int64_t rank_experts = parallel::ep_rank_expert_elements(experts, ep);
    parallel::MemoryPlanInput in;
    in.param_elements = elements - (ep > 1 ? experts - rank_experts : 0);
    in.expert_elements = rank_experts;
    in.bytes_per_element = kF32;  // f32 parameters, grads and state (autocast keeps f32 masters)
    in.optimizer_states = states;
    in.world_size = dims.shard_size();  // ZeRO shards over the shard group (HSDP), else over dp
    in.zero_stage = dims.zero_stage;
    in.tp = dims.tp;
    in.tp_sharded_elements = dims.tp > 1 ? sharded : 0;
    if (precision_state_dtype(cfg.run.precision)) in = parallel::sixteen_bit_states(in);  // 16-bit params, f32 masters
    const int64_t rank_elements = parallel::dense_rank_elements(in);  // what DDP or ZeRO handles
    in.ddp_bucket_bytes = dims.dp > 1 && dims.zero_stage == 0 && !cfg.parallel.ddp.gradient_as_bucket_view
                              ? rank_elements * in.bytes_per_element
                              : 0;
    const parallel::MemoryPlan mem = parallel::plan_memory(in);
    const int64_t act = model.activation_bytes({.batch = b,
                                                .layers = layers_max,
                                                .first = first,
                                                .last = last,
                                                .in_flight = in_flight[size_t(r)],
                                                .pipeline = pp > 1,
                                                .tp = dims.tp,
                                                .sequence_parallel = sp,
                                                .moe_layers = stages.empty() ? model.moe_layers() : moe_max,
                                                .ep = ep});
    // dp: DDP all-reduces the grads (2 (N-1)/N), ZeRO-1/2 reduce-scatter the grads and
    // all-gather the params ((N-1)/N twice), ZeRO-3 gathers twice and reduce-scatters.
    // HSDP: that over the S ranks of a shard group, plus the all-reduce of the rank's
    // slice (padded / S) over the R = dp / S replicas, 2 (R-1)/R of it.
    const int S = dims.shard_size(), R = dims.replicate_size();
    const int64_t padded = parallel::shard_elements(rank_elements, S) * S * kF32;
    const int64_t dp_sent = (dims.zero_stage == 3 ? 3 * (S - 1) * padded / S
                                                  : ring_all_reduce(dims.zero_stage > 0 ? padded : rank_elements * kF32, S)) +
                            (dims.hybrid() ? ring_all_reduce(padded / S, R) : 0) +
                            ring_all_reduce(rank_experts * kF32, dims.dp / ep);  // experts over the dp / ep holding them
    // tp: per micro-batch the family's all-reduces of its blocks, first and last stage
    // (a model without blocks: its whole-model ones).
    // An MoE block all-reduces its attention's only (tp_per_moe_block).
    int64_t tp_sent = 0;
    const int64_t rank_moe_blocks = stages.empty() ? model.moe_layers() : moe_blocks;
    if (dims.tp > 1)
      tp_sent = int64_t(mb) * (tp_all_reduces(model.tp_per_block, blocks - rank_moe_blocks, b, dims.tp) +
                               tp_all_reduces(model.tp_per_moe_block, rank_moe_blocks, b, dims.tp) +
                               tp_all_reduces(model.tp_first, first ? 1 : 0, b, dims.tp) +
                               tp_all_reduces(model.tp_last, last ? 1 : 0, b, dims.tp) +
                               tp_all_reduces(model.tp_whole, stages.empty() ? 1 : 0, b, dims.tp));
    // ep: the all-to-alls of its MoE layers, rows in the parameters' dtype (2 bytes under
    // 16-bit model states).
    const int64_t ep_sent = all_to_all_bytes(model.a2a_per_sample, b, ep, rank_moe_blocks, mb,
                                             precision_state_dtype(cfg.run.precision) ? 2 : kF32);
    p.dp_bytes = std::max(p.dp_bytes, dp_sent);
    p.ep_bytes = std::max(p.ep_bytes, ep_sent);
    p.tp_bytes = std::max(p.tp_bytes, tp_sent);
    p.pp_bytes = std::max(p.pp_bytes, pp_sent);
    p.pp_ranks.push_back({.memory = mem, .activations = act, .in_flight = in_flight[size_t(r)]});
    if (mem.total() + act > worst) {
      worst = mem.total() + act;
      p.memory = mem;
      p.activations = act;
      p.in_flight = in_flight[size_t(r)];
    }
  }
  const double flops = model.flops_per_sample * double(cfg.train.batch_size) / double(dims.world());
  p.compute_s = a.flops_per_s > 0 ? flops / a.flops_per_s : 0;
  const double inner = a.bytes_per_s > 0 ? double(p.tp_bytes + p.pp_bytes + p.ep_bytes) / a.bytes_per_s : 0;
  const double outer = a.bytes_per_s > 0 ? double(p.dp_bytes) / a.bytes_per_s : 0;
  p.comm_s = inner + outer;
  // The bubble stretches everything inside the pipeline flush; dp's exchange follows it.
  p.step_s = (p.compute_s + inner) / (1.0 - p.bubble) + outer;
  p.fits = a.memory_per_rank <= 0 || p.total() <= a.memory_per_rank;
  return p;
}

std::vector<LayoutPlan> plan_layouts(const TrainConfig& cfg, int ranks, const PlanAssumptions& a) {
  const nn::ModelSpec model = model_family(cfg).spec(cfg);
  std::vector<LayoutPlan> out;
  for (int tp = 1; tp <= ranks; ++tp) {
    if (ranks % tp != 0 || (tp > 1 && (!model.has_tp_plan() || model.tp_sharded % tp != 0))) continue;
    if (tp > 1 && std::any_of(model.tp_widths.begin(), model.tp_widths.end(), [tp](int64_t w) { return w % tp != 0; }))
      continue;  // every width the TP plan cuts splits into tp
    for (int pp = 1; pp * tp <= ranks; ++pp) {
      if ((ranks / tp) % pp != 0 || (pp > 1 && !model.has_pp_plan())) continue;
      // ep: 1, and for a mixture of experts every divisor of dp that divides the experts.
      for (int ep = 1; ep <= ranks / tp / pp; ++ep) {
        if ((ranks / tp / pp) % ep != 0 || (ep > 1 && (!model.has_moe() || model.experts % ep != 0))) continue;
        parallel::ParallelDims dims{.dp = ranks / tp / pp, .tp = tp, .pp = pp, .zero_stage = 0, .ep = ep};
        try {  // the checks `strata train` makes: the family's limits by tp, pp and ep, batch by dp
          TrainConfig c = cfg;
          c.parallel.dims = dims;
          c.parallel.pipeline.microbatches = 1;
          c.parallel.pipeline.virtual_stages = 1;
          dims = resolve_dims(c, ranks);
        } catch (const ConfigError&) {
          continue;
        }
        const int64_t batch_dp = cfg.train.batch_size / dims.dp;
        struct Sched {
          parallel::ScheduleKind kind;
          int v;
        };
        std::vector<Sched> scheds;
        int m = 1;
        if (pp > 1) {
          m = a.microbatches > 0 ? a.microbatches : int(batch_dp);
          if (batch_dp % m != 0) continue;
          scheds = {{parallel::ScheduleKind::gpipe, 1}, {parallel::ScheduleKind::one_f_one_b, 1}};
          if (m % pp == 0 && int64_t(model.block_params.size()) >= 2 * pp)
            scheds.push_back({parallel::ScheduleKind::interleaved, 2});
        } else {
          scheds = {{parallel::ScheduleKind::one_f_one_b, 1}};  // unused at pp 1
        }
        for (int zero = 0; zero <= (dims.dp > 1 ? 3 : 0); ++zero) {
          dims.zero_stage = zero;
          // ZeRO over all dp ranks (dp_shard 0), then HSDP over every smaller shard group
          // 1 < S < dp that divides dp (shard groups of consecutive ranks, averaged over
          // dp / S replicas). S = 1 is left out: every rank holds everything, DDP's bytes
          // and sends without its buckets, which gradient_as_bucket_view already removes.
          for (int S = dims.dp; S >= 2 || S == dims.dp; --S) {
            if (dims.dp % S != 0 || (zero == 0 && S < dims.dp)) continue;
            dims.dp_shard = S == dims.dp ? 0 : S;
            for (const Sched& s : scheds) out.push_back(plan_layout(cfg, model, dims, s.kind, m, s.v, a));
          }
          dims.dp_shard = 0;
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const LayoutPlan& x, const LayoutPlan& y) {
    if (x.fits != y.fits) return x.fits;
    if (x.step_s != y.step_s) return x.step_s < y.step_s;
    return x.total() < y.total();
  });
  return out;
}

bool layout_fixed(const TrainConfig& cfg) {
  const auto& d = cfg.parallel.dims;
  return d.dp != parallel::ParallelDims::kAuto || d.tp != 1 || d.pp != 1 || d.cp != 1 || d.ep != 1 || d.zero_stage != 0 ||
         d.dp_shard != 0 || d.dp_replicate != 0 ||
         cfg.parallel.thread_replicas();
}

}  // namespace strata::apps
