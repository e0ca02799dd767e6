// The ZeRO measurements (see zero_bench.h). Stages run one after the other, each on a
// fresh model, so the allocator's per-category counters show what each one holds.
#include "bench/zero_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <strata/autograd/engine.h>
#include <strata/autograd/grad_mode.h>
#include <strata/comm/local.h>
#include <strata/core/config.h>
#include <strata/core/memory.h>
#include <strata/core/threads.h>
#include <strata/optim/adam.h>
#include "bench/bench_util.h"
#include <strata/parallel/data/ddp.h>
#include <strata/parallel/memory_plan.h>
#include <strata/parallel/data/zero.h>

namespace strata::bench {

using namespace strata::parallel;
namespace {

using Clock = detail::BenchClock;
using detail::max_over_ranks;
using detail::median;
using detail::since;

ZeroBenchMemory snapshot() {
  auto cur = [](MemCategory c) { return cpu_memory().stats(c).current; };
  return {cur(MemCategory::params), cur(MemCategory::grads), cur(MemCategory::optimizer), cur(MemCategory::comm)};
}

int64_t sent_bytes(comm::ProcessGroup& g) { return g.stats().total_bytes_sent(); }

// The model and this rank's batch of one bench run (every layout starts from the same weights).
struct GptRun {
  std::shared_ptr<nn::GPT> model;
  Tensor idx, tgt;
  GptRun(comm::ProcessGroup& g, const ZeroBenchOptions& o, bool bf16 = false) {
    Generator gen(17);
    model = std::make_shared<nn::GPT>(o.gpt, gen);
    if (bf16) model->to(DType::bf16);  // 16-bit model states: the optimizer keeps f32 masters
    Generator d(1000 + uint64_t(g.rank()));
    const double v = double(o.gpt.vocab);
    idx = ops::to_dtype(ops::uniform({o.batch, o.gpt.block_size}, 0, v - 0.5, d), DType::i64);
    tgt = ops::to_dtype(ops::uniform({o.batch, o.gpt.block_size}, 0, v - 0.5, d), DType::i64);
  }
  Tensor loss() { return model->loss(idx, tgt); }
};

// dp_shard > 0: HSDP, ZeRO within shard groups of dp_shard consecutive ranks of g.
ZeroStageResult run_stage(comm::ProcessGroup& g, const ZeroBenchOptions& o, int stage, bool bf16, int dp_shard = 0) {
  const int64_t div = std::string(g.backend_kind()) == "local" ? g.size() : 1;
  ZeroStageResult r;
  r.stage = stage;
  r.bf16_params = bf16;
  r.dp_shard = dp_shard;
  // HSDP's groups (split before the allocator baseline; they outlive the ZeRO instance).
  std::shared_ptr<comm::ProcessGroup> shard, replicate;
  if (dp_shard > 0) {
    shard = g.split(g.rank() / dp_shard, g.rank(), "dp_shard");
    replicate = g.split(g.rank() % dp_shard, g.rank(), "dp_replicate");
  }
  comm::ProcessGroup& zg = shard ? *shard : g;
  g.barrier().wait();
  const ZeroBenchMemory before = snapshot();
  const int64_t total_before = cpu_memory().total_current();
  g.barrier().wait();
  if (g.rank() == 0) cpu_memory().reset_peaks();
  g.barrier().wait();
  {
    GptRun run(g, o, bf16);
    const std::shared_ptr<nn::GPT>& model = run.model;
    const optim::AdamWOptions adam{.lr = 1e-4};
    std::unique_ptr<DistributedDataParallel> ddp;
    std::unique_ptr<optim::Optimizer> opt;
    std::unique_ptr<ZeroDataParallel> zero;
    std::vector<int64_t> units;
    if (stage == 0) {
      ddp = apply_ddp(model, g, {});
      opt = std::make_unique<optim::AdamW>(model->named_parameters(), adam);
    } else {
      zero = apply_zero(model, zg, {.stage = stage, .wrap = {}},
                        [&](optim::NamedTensors p) { return std::make_unique<optim::AdamW>(std::move(p), adam); },
                        replicate.get());
      for (const auto& u : zero->units()) {
        units.push_back(u.numel);
        r.padded += u.padded();
      }
    }
    r.predicted = [&] {
      const int64_t b = bf16 ? 2 : 4;  // DDP's buckets follow the gradients' dtype
      MemoryPlanInput in{.param_elements = model->num_parameters(), .bytes_per_element = 4, .optimizer_states = 2,
                         .world_size = zg.size(), .zero_stage = stage,
                         .ddp_bucket_bytes = stage == 0 ? b * model->num_parameters() : 0, .flat_units = units};
      if (bf16) in = sixteen_bit_states(in);
      const MemoryPlan p = plan_memory(in);
      return ZeroBenchMemory{p.params, p.grads, p.optimizer, p.comm};
    }();
    // Gradients are cleared at the start of a step, so after one they are still held
    // (what DDP's 4Ψ of grads counts).
    auto step = [&] {
      if (ddp) {
        ddp->zero_grad();
        backward(ddp->forward_with([&] { return run.loss(); }));
        ddp->finalize();
        opt->step();
      } else {
        zero->zero_grad();
        backward(zero->forward_with([&] { return run.loss(); }));
        zero->finalize();
        zero->step();
      }
    };
    for (int i = 0; i < o.warmup; ++i) step();
    g.barrier().wait();
    std::vector<double> t;
    const auto sent_on = [](const std::shared_ptr<comm::ProcessGroup>& p) { return p ? sent_bytes(*p) : 0; };
    const int64_t sent0 = sent_bytes(g), shard0 = sent_on(shard), rep0 = sent_on(replicate);
    for (int i = 0; i < o.steps; ++i) {
      const auto t0 = Clock::now();
      step();
      t.push_back(since(t0));
    }
    r.replicate_bytes_sent = (sent_on(replicate) - rep0) / o.steps;
    r.shard_bytes_sent = ((shard ? sent_on(shard) - shard0 : 0) + sent_bytes(g) - sent0) / o.steps;
    r.bytes_sent = r.shard_bytes_sent + r.replicate_bytes_sent;
    r.step_s = max_over_ranks(g, median(t));
    g.barrier().wait();
    const ZeroBenchMemory after = snapshot();
    r.measured = {(after.params - before.params) / div, (after.grads - before.grads) / div,
                  (after.optimizer - before.optimizer) / div, (after.comm - before.comm) / div};
    r.peak = (cpu_memory().total_peak() - total_before) / div;
    r.peak_activations = cpu_memory().stats(MemCategory::activations).peak / div;
    g.barrier().wait();
  }
  return r;
}

// One layout of the overlap measurement: its own model, ZeRO instance and the
// communication of one of its steps on buffers of its units' sizes.
struct OverlapLayout {
  GptRun run;
  std::unique_ptr<ZeroDataParallel> zero;
  std::vector<Tensor> full, part;  // per non-empty unit: padded and shard buffers
  ZeroOverlapResult r;
  std::vector<double> ts, tc, tm;

  OverlapLayout(comm::ProcessGroup& g, const ZeroBenchOptions& o, int stage, double first_mb, double cap_mb)
      : run(g, o) {
    const optim::AdamWOptions adam{.lr = 1e-4};
    zero = apply_zero(run.model, g,
                      {.stage = stage, .bucket_cap_mb = cap_mb, .wrap = {}, .first_unit_mb = first_mb,
                       .last_unit_mb = first_mb},
                      [&](optim::NamedTensors p) { return std::make_unique<optim::AdamW>(std::move(p), adam); });
    r.stage = stage;
    r.first_unit_mb = first_mb;
    r.cap_mb = cap_mb;
    for (const auto& u : zero->units()) {
      if (u.numel == 0) continue;
      ++r.units;
      full.push_back(ops::zeros({u.padded()}));
      part.push_back(ops::zeros({u.shard}));
    }
  }
  void zero_step() {
    zero->zero_grad();
    backward(zero->forward_with([&] { return run.loss(); }));
    zero->finalize();
    zero->step();
  }
  void compute_step() {
    zero->zero_grad();
    {
      auto no_comm = zero->no_sync();  // stages 1-2: backward's hooks do nothing
      backward(zero->forward_with([&] { return run.loss(); }));
      zero->finalize();
    }
    NoGradGuard no_grad;
    zero->optimizer().step();
  }
  // Every reduce-scatter queued, then every all-gather, as the step issues them.
  void comm_step(comm::ProcessGroup& g) {
    std::vector<comm::Work> w;
    for (size_t k = 0; k < full.size(); ++k) w.push_back(g.reduce_scatter(full[k], part[k], comm::ReduceOp::avg));
    for (auto& x : w) x.wait();
    w.clear();
    for (size_t k = 0; k < full.size(); ++k) w.push_back(g.all_gather(part[k], full[k]));
    for (auto& x : w) x.wait();
  }
};

// Stages 1-2, each with the default (DDP-like) units and with one unit of everything:
// all layouts timed in one interleaved loop, so load changes on a shared host hit all.
std::vector<ZeroOverlapResult> run_overlap(comm::ProcessGroup& g, const ZeroBenchOptions& o) {
  const ZeroOptions d{};
  std::vector<std::unique_ptr<OverlapLayout>> layouts;
  for (int stage : {1, 2}) {
    layouts.push_back(std::make_unique<OverlapLayout>(g, o, stage, d.first_unit_mb, d.bucket_cap_mb));
    layouts.push_back(std::make_unique<OverlapLayout>(g, o, stage, 1024.0, 1024.0));
  }
  auto timed = [&](const auto& fn, std::vector<double>* out) {
    g.barrier().wait();
    const auto t0 = Clock::now();
    fn();
    if (out) out->push_back(since(t0));
  };
  for (int i = 0; i < o.warmup + o.steps; ++i)
    for (auto& l : layouts) {
      const bool keep = i >= o.warmup;
      timed([&] { l->zero_step(); }, keep ? &l->ts : nullptr);
      timed([&] { l->compute_step(); }, keep ? &l->tc : nullptr);
      timed([&] { l->comm_step(g); }, keep ? &l->tm : nullptr);
    }
  std::vector<ZeroOverlapResult> out;
  for (auto& l : layouts) {
    l->r.step_s = max_over_ranks(g, median(l->ts));
    l->r.compute_s = max_over_ranks(g, median(l->tc));
    l->r.comm_s = max_over_ranks(g, median(l->tm));
    out.push_back(l->r);
  }
  return out;
}

std::string mib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", double(b) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

ZeroBenchReport bench_zero(comm::ProcessGroup& group, const ZeroBenchOptions& opts) {
  const int saved = get_num_threads();
  set_num_threads(opts.threads);
  ZeroBenchReport rep;
  rep.ranks = group.size();
  rep.backend = group.backend_kind();
  {
    Generator gen(17);
    rep.psi = nn::GPT(opts.gpt, gen).num_parameters();
  }
  const comm::Algorithm algo0 = group.algorithm();
  const comm::ReduceDtype rd0 = group.reduce_dtype();
  group.set_algorithm(opts.algorithm.value_or(algo0));
  group.set_reduce_dtype(opts.reduce_dtype.value_or(rd0));
  rep.algorithm = comm::algorithm_name(group.algorithm());
  rep.reduce_dtype = comm::reduce_dtype_name(group.reduce_dtype());
  if (opts.dp_shard != 0 && (opts.dp_shard < 1 || opts.dp_shard >= group.size() || group.size() % opts.dp_shard != 0))
    STRATA_THROW(ConfigError, "--dp-shard: ", opts.dp_shard, " must divide the ", group.size(),
                 " ranks and be smaller (shard groups of that many ranks, at least 2 replicas)");
  for (int stage = 0; stage <= 3; ++stage) {
    rep.stages.push_back(run_stage(group, opts, stage, false));
    if (opts.bf16_params) rep.stages.push_back(run_stage(group, opts, stage, true));
    if (stage > 0 && opts.dp_shard > 0 && opts.dp_shard < group.size() && group.size() % opts.dp_shard == 0)
      rep.stages.push_back(run_stage(group, opts, stage, false, opts.dp_shard));
  }
  group.set_algorithm(algo0);
  group.set_reduce_dtype(rd0);
  if (opts.overlap && group.size() > 1) rep.overlap = run_overlap(group, opts);
  set_num_threads(saved);
  return rep;
}

ZeroBenchReport bench_zero_local(int ranks, const ZeroBenchOptions& opts) {
  ZeroBenchReport out;
  comm::run_local(ranks, [&](comm::ProcessGroup& g) {
    ZeroBenchReport r = bench_zero(g, opts);
    if (g.rank() == 0) out = r;
  });
  return out;
}

namespace {

// "DDP", "ZeRO-2", "HSDP ZeRO-2 (S=2)".
std::string label(const ZeroStageResult& r) {
  if (r.stage == 0) return "DDP";
  std::string s = r.dp_shard > 0 ? "HSDP ZeRO-" : "ZeRO-";
  s += std::to_string(r.stage);
  if (r.dp_shard > 0) s.append(" (S=").append(std::to_string(r.dp_shard)).append(1, ')');
  return s;
}

}  // namespace

std::string ZeroBenchReport::to_string() const {
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "ZeRO on gpt_char's GPT (Ψ = %lld parameters, AdamW), %d ranks (%s backend, algorithm %s, "
                "comm.reduce_dtype %s); MiB per rank; vs DDP: step time over the same precision's DDP row\n\n",
                (long long)psi, ranks, backend.c_str(), algorithm.c_str(), reduce_dtype.c_str());
  s += buf;
  s += "| stage | precision | step ms | vs DDP | params | grads | optim | comm | static | predicted | measured/pred | "
       "Ψ-multiple | activations peak | peak | sent/step |\n";
  s += "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  auto ddp_s = [&](bool bf16) {
    for (const auto& r : stages)
      if (r.stage == 0 && r.bf16_params == bf16) return r.step_s;
    return 0.0;
  };
  for (const auto& r : stages) {
    const double ratio = r.predicted.total() > 0 ? double(r.measured.total()) / double(r.predicted.total()) : 0;
    const double d = ddp_s(r.bf16_params);
    std::snprintf(buf, sizeof buf,
                  "| %s | %s | %.1f | %.2f | %s | %s | %s | %s | %s | %s | %.3f | %.2fΨ | %s | %s | %s |\n",
                  label(r).c_str(), r.bf16_params ? "bf16_params" : "f32", r.step_s * 1e3, d > 0 ? r.step_s / d : 0.0,
                  mib(r.measured.params).c_str(), mib(r.measured.grads).c_str(), mib(r.measured.optimizer).c_str(),
                  mib(r.measured.comm).c_str(), mib(r.measured.total()).c_str(), mib(r.predicted.total()).c_str(),
                  ratio, double(r.measured.total()) / double(psi), mib(r.peak_activations).c_str(),
                  mib(r.peak).c_str(), mib(r.bytes_sent).c_str());
    s += buf;
  }
  // Bytes per group: HSDP against ZeRO over every rank. Ring formulas per rank and step,
  // N ranks, S per shard group, R = N / S replicas, P the padded flat bytes: within the
  // shard group k (S-1)/S P (k = 2 at stages 1-2, 3 at stage 3); over the replicas
  // 2 (R-1)/R P/S.
  bool hybrid = false;
  for (const auto& r : stages) hybrid |= r.dp_shard > 0;
  if (hybrid) {
    s += "\nBytes sent per rank and step by group (KiB; predicted by the ring formulas: within the shard group "
         "k (S-1)/S P, k = 2 at stages 1-2 and 3 at stage 3; over the replicas 2 (R-1)/R P/S; P the padded flat "
         "units):\n\n";
    s += "| layout | shard group S | within it | predicted | replicas R | across them | predicted |\n";
    s += "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (const auto& r : stages) {
      if (r.stage == 0 || r.bf16_params) continue;
      const int64_t S = r.dp_shard > 0 ? r.dp_shard : ranks, R = ranks / S, P = 4 * r.padded;
      const int64_t within = (r.stage == 3 ? 3 : 2) * (S - 1) * P / S, across = R > 1 ? 2 * (R - 1) * (P / S) / R : 0;
      std::snprintf(buf, sizeof buf, "| %s | %lld | %.2f | %.2f | %lld | %.2f | %.2f |\n", label(r).c_str(),
                    (long long)S, double(r.shard_bytes_sent) / 1024.0, double(within) / 1024.0, (long long)R,
                    double(r.replicate_bytes_sent) / 1024.0, double(across) / 1024.0);
      s += buf;
    }
  }
  // bf16_params against f32, stage by stage
  bool any16 = false;
  for (const auto& r : stages) any16 |= r.bf16_params;
  if (any16) {
    s += "\nbf16_params / f32, per stage (static bytes, peak, bytes sent per step, step time):\n\n";
    s += "| stage | static | peak | sent/step | step time |\n| --- | ---: | ---: | ---: | ---: |\n";
    for (const auto& h : stages) {
      if (!h.bf16_params) continue;
      for (const auto& f : stages) {
        if (f.bf16_params || f.stage != h.stage) continue;
        auto q = [](double a, double b) { return b > 0 ? a / b : 0.0; };
        std::snprintf(buf, sizeof buf, "| %s | %.3f | %.3f | %.3f | %.2f |\n",
                      h.stage == 0 ? "DDP" : ("ZeRO-" + std::to_string(h.stage)).c_str(),
                      q(double(h.measured.total()), double(f.measured.total())), q(double(h.peak), double(f.peak)),
                      q(double(h.bytes_sent), double(f.bytes_sent)), q(h.step_s, f.step_s));
        s += buf;
      }
    }
  }
  if (overlap.empty()) return s;
  s += "\nOverlap, end to end (medians of interleaved steps, slowest rank; hidden = 1 - exposed / comm alone, "
       "unclamped):\n\n";
  s += "| stage | units | first / cap MiB | ZeRO step ms | compute-only ms | exposed ms | RS+AG alone ms | hidden |\n";
  s += "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& r : overlap) {
    std::snprintf(buf, sizeof buf, "| ZeRO-%d | %d | %g / %g | %.2f | %.2f | %.2f | %.2f | %.0f %% |\n", r.stage,
                  r.units, r.first_unit_mb, r.cap_mb, r.step_s * 1e3, r.compute_s * 1e3, r.exposed_s() * 1e3,
                  r.comm_s * 1e3, 100.0 * r.hidden());
    s += buf;
  }
  return s;
}

}  // namespace strata::bench
