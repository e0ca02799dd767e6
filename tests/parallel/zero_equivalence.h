// The ZeRO equivalence harness (local-backend gtests and the mpirun test): train under
// ZeRO stage 1/2/3 on N ranks and compare with DDP / the single-process reference of
// equivalence.h; count the bytes each step sends; and the memory probes the allocator
// tests share (samples at the gradient and forward hooks, the transient of a resume).
#pragma once
#include <atomic>

#include <strata/core/memory.h>
#include "equivalence.h"
#include <strata/optim/clip.h>
#include <strata/parallel/checkpoint/layout_io.h>
#include <strata/parallel/data/zero.h>
#include <strata/parallel/data/zero_schedule.h>

namespace strata::testing {

struct ZeroCase {
  EquivCase base{};
  int stage = 1;
  double bucket_cap_mb = 25.0;
  bool prefetch = true;
  double clip = 0.0;  // > 0: clip the global grad norm every step
};

/// Single process, batch B, with clipping (the norms it saw go to `norms`, the losses to `losses`).
inline nn::NamedTensors reference_state_clipped(const ZeroCase& zc, std::vector<double>* norms,
                                                std::vector<double>* losses = nullptr) {
  const EquivCase& c = zc.base;
  auto model = make_model(c.model, kModelSeed);
  auto opt = make_optimizer(c.optim, *model);
  for (int s = 0; s < c.steps; ++s) {
    auto [x, y] = make_batch(c.model, c.batch, s);
    Tensor loss = batch_loss(*model, x, y);
    if (losses) losses->push_back(loss.item<double>());
    backward(loss);
    if (zc.clip > 0) {
      const double nrm = optim::clip_grad_norm(model->parameters(), zc.clip);
      if (norms) norms->push_back(nrm);
    }
    opt->step();
    opt->zero_grad();
  }
  return model->state_dict();
}

struct ZeroResult {
  nn::NamedTensors state;     // full parameters and buffers after the last step
  std::vector<double> norms;  // clip_grad_norm results per step
  int64_t bytes_per_step = 0; // reduce-scatter + all-gather bytes this rank sent in the last step
  int64_t padded_elems = 0;   // sum over units of the padded flat size
};

/// Trains under ZeRO on this rank of `group` (each rank starts from a different init;
/// model and batches on c.device). `losses`: each step's loss averaged over the ranks.
inline ZeroResult zero_state(comm::ProcessGroup& group, const ZeroCase& zc, std::vector<double>* losses = nullptr) {
  const EquivCase& c = zc.base;
  const int n = group.size(), r = group.rank();
  auto model = make_model(c.model, r == 0 ? kModelSeed : kModelSeed + 77 * uint64_t(r));
  model->to(c.device);
  parallel::DDPOptions units;
  units.bucket_cap_mb = zc.bucket_cap_mb;  // ZeRO-1/2 units are cut like DDP's buckets
  auto pm = parallelize_on(group, model, zc.stage, units, zc.prefetch, c.optim);
  parallel::ZeroDataParallel* zero = pm->zero();
  STRATA_CHECK(zero != nullptr, "[test] parallelize applied no ZeRO at stage ", zc.stage);
  ZeroResult res;
  for (const auto& u : zero->units()) res.padded_elems += u.padded();
  const int64_t per = c.batch / n;
  auto sent = [&] {
    const comm::CommStats st = group.stats();
    return st[comm::OpKind::reduce_scatter].bytes_sent + st[comm::OpKind::all_gather].bytes_sent;
  };
  for (int s = 0; s < c.steps; ++s) {
    const int64_t before = sent();
    auto [xb, yb] = make_batch(c.model, c.batch, s);
    const double step_loss = accumulate_micro_batches(*zero, *model, xb.to(c.device), yb.to(c.device), r, per, c.accum,
                                                     losses != nullptr);
    if (losses) losses->push_back(rank_mean(group, step_loss));
    if (zc.clip > 0) res.norms.push_back(zero->clip_grad_norm(zc.clip));
    zero->step();
    zero->zero_grad();
    res.bytes_per_step = sent() - before;
  }
  res.state = zero->full_state_dict();
  return res;
}

/// The memory tests' model: four blocks, so that "everything at once" is clearly more
/// than two units (vocab and block size of make_batch("gpt", ...)).
inline std::shared_ptr<nn::GPT> deep_gpt(uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<nn::GPT>(
      nn::GPTConfig{.vocab = 16, .block_size = 8, .n_layer = 4, .n_head = 2, .n_embd = 32}, gen);
}

// Per-rank sizes of a ZeRO layout, in bytes (f32).
struct UnitBytes {
  int64_t shard = 0;        // this rank's slice of every unit
  int64_t max_unit = 0;     // the largest padded unit
  int64_t max_wrapped = 0;  // the largest padded unit other than unit 0 (stage 3's root)
  int64_t root = 0;         // unit 0 padded
  int depth = parallel::kZeroReduceScatterDepth;  // L
  /// Gradient bytes backward may hold: the slices, the L staged units (being sent) and
  /// the one being filled; stage 3 also the root unit, whose gradients arrive at both
  /// ends of backward (ln_f first, the tied embedding last). plan_backward_peak() gives
  /// the exact peak; this is the simple bound.
  int64_t grads_bound(int stage) const { return shard + (depth + 1) * max_unit + (stage == 3 ? root : 0); }
  /// Gathered parameter bytes at stage 3: the root, the current unit and the prefetched one.
  int64_t gathered_bound() const { return root + 2 * max_wrapped; }
};
inline UnitBytes unit_bytes(const parallel::ZeroDataParallel& z) {
  UnitBytes b;
  const auto units = z.units();
  for (size_t k = 0; k < units.size(); ++k) {
    b.shard += 4 * units[k].shard;
    b.max_unit = std::max(b.max_unit, 4 * units[k].padded());
    if (k > 0) b.max_wrapped = std::max(b.max_wrapped, 4 * units[k].padded());
  }
  b.root = units.empty() ? 0 : 4 * units[0].padded();
  return b;
}

/// `steps` ZeRO steps of make_batch("gpt") batches, 2 sequences per rank.
inline void train_steps(parallel::ZeroDataParallel& z, nn::GPT& model, comm::ProcessGroup& g, int steps) {
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = make_batch("gpt", 2 * g.size(), s);
    Tensor xr = ops::narrow(x, 0, 2 * g.rank(), 2), yr = ops::narrow(y, 0, 2 * g.rank(), 2);
    backward(z.forward_with([&] { return model.loss(xr, yr); }));
    z.finalize();
    z.step();
    z.zero_grad();
  }
}

/// Bytes of a category now (this process's allocator).
inline int64_t mem_now(MemCategory c) { return cpu_memory().stats(c).current; }

/// Highest grads / comm bytes (above the baselines taken at construction) seen by the
/// hooks of watch_rank(). Thread-safe: the ranks of a local world share one.
struct MemoryWatch {
  const int64_t g0 = mem_now(MemCategory::grads), c0 = mem_now(MemCategory::comm);
  std::atomic<int64_t> grads{0}, comm{0};
  std::atomic<int> samples{0};
  static void raise(std::atomic<int64_t>& m, int64_t v) {
    int64_t prev = m.load();
    while (v > prev && !m.compare_exchange_weak(prev, v)) {
    }
  }
  void sample() {
    raise(grads, mem_now(MemCategory::grads) - g0);
    raise(comm, mem_now(MemCategory::comm) - c0);
    ++samples;
  }
};

/// One rank: deep_gpt under ZeRO `stage` (stages 1-2: units of at most 16 KiB, c_fc's
/// weight alone, with 4 KiB first and last ones), trained 2 steps while `w` samples at
/// every parameter's post-accumulate hook (after ZeRO's own) and, when `forward_too`,
/// at every block's forward pre/post hooks. Returns the rank's unit sizes.
inline UnitBytes watch_rank(comm::ProcessGroup& g, int stage, bool forward_too, MemoryWatch& w) {
  auto model = deep_gpt(kModelSeed);
  parallel::ZeroOptions o{.stage = stage, .bucket_cap_mb = 16.0 / 1024, .wrap = {}, .first_unit_mb = 4.0 / 1024,
                          .last_unit_mb = 4.0 / 1024};
  auto zero = parallel::apply_zero(model, g, o, optimizer_factory("adam"));
  for (auto& [name, p] : model->named_parameters()) p.register_post_accumulate_grad_hook([&w](Tensor&) { w.sample(); });
  if (forward_too)
    for (auto& [i, m] : model->child("h")->named_children())
      m->register_forward_hooks([&w](nn::Module&) { w.sample(); },
                                [&w](nn::Module&, const Tensor& out) {
                                  w.sample();
                                  return out;
                                });
  train_steps(*zero, *model, g, 2);
  return unit_bytes(*zero);
}

/// Stage 3 on this rank: deep_gpt trained one step, saved to `dir` (collective).
inline void save_trained_stage3(comm::ProcessGroup& g, const std::string& dir) {
  auto model = deep_gpt(kModelSeed);
  auto zero = parallel::apply_zero(model, g, {.stage = 3, .wrap = {}}, optimizer_factory("adam"));
  train_steps(*zero, *model, g, 1);
  const nlohmann::json meta = {{parallel::kOptimizerMetaKey, zero->optimizer().state_dict().scalars}};
  parallel::save_sharded(dir, g, zero->state_pieces(), 3, meta);
}

struct ResumeBytes {
  int64_t transient = 0;  ///< allocator peak during load_zero above max(before, after)
  int64_t bound = 0;      ///< this rank's checkpoint shard (parameter and Adam slices, buffers) + one unit
};

/// A stage-3 resume of `dir` on this rank of a model that has trained one step (its
/// optimizer state exists, as in a long run), then one more step. A stage-3 load issues
/// no collective: the ranks load one at a time, so each one's transient bytes are
/// measured alone even where ranks share an allocator (local worlds). Collective.
inline ResumeBytes measure_resume(comm::ProcessGroup& g, const std::string& dir) {
  auto model = deep_gpt(99 + uint64_t(g.rank()));
  auto zero = parallel::apply_zero(model, g, {.stage = 3, .wrap = {}}, optimizer_factory("adam"));
  train_steps(*zero, *model, g, 1);
  const UnitBytes b = unit_bytes(*zero);
  int64_t buffers = 0;
  for (auto& [nm, t] : model->named_buffers()) buffers += t.nbytes();
  ResumeBytes r;
  r.bound = 3 * b.shard + buffers + b.max_unit;  // parameter + exp_avg + exp_avg_sq slices
  parallel::ShardedCheckpointReader ck(dir);
  for (int k = 0; k < g.size(); ++k) {
    g.barrier().wait();
    if (g.rank() != k) continue;
    const int64_t before = cpu_memory().total_current();
    cpu_memory().reset_peaks();
    parallel::load_zero(ck, *zero, true);
    r.transient = cpu_memory().total_peak() - std::max(before, cpu_memory().total_current());
  }
  g.barrier().wait();
  train_steps(*zero, *model, g, 1);  // the loaded state trains
  return r;
}

}  // namespace strata::testing
