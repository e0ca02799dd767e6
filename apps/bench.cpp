// strata bench: gemm (ops::matmul vs cblas_sgemm called directly), train (steps/s of
// a config's training step after warm-up), alloc (the step with the CPU caching allocator
// on vs off), comm (dispatch point for the comm layer).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <tuple>
#include <vector>

#include "apps/bench_conv.h"
#include "apps/bench_gemm.h"
#include "apps/bench_kernels.h"
#include "apps/commands.h"
#include "apps/soak.h"
#include "apps/trainer.h"
#include "bench/comm_bench.h"
#include "bench/ddp_bench.h"
#include "bench/tp_bench.h"
#include "bench/cp_bench.h"
#include "bench/pp_bench.h"
#include "apps/factory.h"
#include "apps/flops.h"
#include "apps/gemm_replay.h"
#include "apps/model_family.h"
#include "bench/zero_bench.h"
#include <strata/comm/mpi.h>
#include <strata/core/threads.h>
#include <strata/tensor/cpu_allocator.h>
#include <strata/tensor/ops.h>

namespace strata::apps {
namespace {

using namespace bench_detail;

int bench_train(const std::string& config, const std::vector<std::string>& sets, int64_t steps, int64_t warmup,
                int64_t ops_steps) {
  TrainConfig cfg = TrainConfig::load(config, sets);
  cfg.train.resume.clear();
  Trainer trainer(cfg, {.verbose = false, .write_files = false});
  for (int64_t i = 0; i < warmup; ++i) trainer.step();
  std::vector<double> times, cpu_times;
  for (int64_t i = 0; i < steps; ++i) {
    const double c0 = process_cpu_seconds();
    const auto t0 = Clock::now();
    trainer.step();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    cpu_times.push_back(process_cpu_seconds() - c0);
  }
  std::sort(cpu_times.begin(), cpu_times.end());
  double total = 0;
  for (double t : times) total += t;
  std::sort(times.begin(), times.end());
  const double per_step = total / double(steps);
  std::printf("train %s: model %s (%lld parameters), batch %lld x %lld accum, %d threads\n", config.c_str(),
              cfg.model.type.c_str(), (long long)trainer.model().num_parameters(), (long long)cfg.train.batch_size,
              (long long)cfg.train.grad_accum_steps, get_num_threads());
  std::printf("steps/s: %.3f  (mean %.2f ms/step, median %.2f ms, min %.2f ms, %lld steps after %lld warm-up)\n",
              1.0 / per_step, per_step * 1e3, times[times.size() / 2] * 1e3, times.front() * 1e3, (long long)steps,
              (long long)warmup);
  // CPU time (all threads): on a shared host, at one thread, the steadier measure of work
  std::printf("cpu time: median %.2f ms/step\n", cpu_times[cpu_times.size() / 2] * 1e3);
  std::printf("%s: %.1f\n", trainer.throughput_unit(), double(trainer.units_per_step()) / per_step);
  // MFU as the trainer logs it: model FLOPs per step over the median step, against this
  // thread count's measured 1024^3 GEMM throughput (strata bench gemm's peak).
  const double flops = train_flops_per_sample(cfg) *
                       double(cfg.train.batch_size * cfg.train.grad_accum_steps);
  const double peak = measured_gemm_flops();
  std::printf("model: %.3f GFLOP/step, %.1f GFLOP/s (median step); peak (1024^3 GEMM) %.1f GFLOP/s; MFU %.1f%%\n",
              flops / 1e9, flops / times[times.size() / 2] / 1e9, peak / 1e9,
              100.0 * flops / times[times.size() / 2] / peak);
  // The GEMM-only ceiling: this step's own GEMMs (shapes, counts, order) replayed alone.
  // Model FLOPs over their time is the MFU a step with free non-GEMM work would score;
  // step minus replay is what the rest of the step costs.
  const std::vector<GemmCall> step_gemms = record_step_gemms(trainer);
  const GemmReplayTiming replay = replay_gemms(step_gemms, 5);
  const double step_wall = times[times.size() / 2];
  std::printf("GEMM-only: the step's %zu f32 GEMMs (%.3f GFLOP) replayed alone: %.2f ms/step (CPU time %.2f ms); "
              "GEMM-only MFU %.1f%%, step MFU %.1f%%; non-GEMM remainder %.2f ms/step (%.1f%% of the step)\n",
              step_gemms.size(), replay.flops / 1e9, replay.wall_s * 1e3, replay.cpu_s * 1e3,
              100.0 * flops / replay.wall_s / peak, 100.0 * flops / step_wall / peak, (step_wall - replay.wall_s) * 1e3,
              100.0 * (step_wall - replay.wall_s) / step_wall);
  if (get_num_threads() == 1) {
    // the same in CPU time, both sides: what a shared core does not distort
    Generator gen(0);
    const Tensor a = ops::uniform({1024, 1024}, -1, 1, gen), b = ops::uniform({1024, 1024}, -1, 1, gen);
    double best = 1e30;
    for (int i = 0; i < 6; ++i) {
      const double c0 = process_cpu_seconds();
      (void)ops::matmul(a, b);
      if (i > 0) best = std::min(best, process_cpu_seconds() - c0);
    }
    const double peak_cpu = 2.0 * 1024 * 1024 * 1024 / best, step_cpu = cpu_times[cpu_times.size() / 2];
    std::printf("cpu time: %.1f GFLOP/s per step; peak (1024^3 GEMM) %.1f GFLOP/s; MFU %.1f%%\n",
                flops / step_cpu / 1e9, peak_cpu / 1e9, 100.0 * flops / step_cpu / peak_cpu);
    std::printf("cpu time: GEMM-only MFU %.1f%% (the replay's %.2f ms), step MFU %.1f%%; non-GEMM remainder "
                "%.2f ms/step (%.1f%% of the step)\n",
                100.0 * flops / replay.cpu_s / peak_cpu, replay.cpu_s * 1e3, 100.0 * flops / step_cpu / peak_cpu,
                (step_cpu - replay.cpu_s) * 1e3, 100.0 * (step_cpu - replay.cpu_s) / step_cpu);
  }
  if (ops_steps > 0) print_op_profile(trainer, ops_steps, times[times.size() / 2], flops);
  return 0;
}

// Rounds of `steps` steps with the CPU caching allocator on, then off (interleaved, so
// machine noise hits both alike); after each switch one untimed step refills the cache.
int bench_alloc(const std::string& config, const std::vector<std::string>& sets, int64_t steps, int64_t warmup,
                int rounds) {
  TrainConfig cfg = TrainConfig::load(config, sets);
  cfg.train.resume.clear();
  Trainer trainer(cfg, {.verbose = false, .write_files = false});
  for (int64_t i = 0; i < warmup; ++i) trainer.step();
  std::vector<double> times[2], faults[2];  // [0]: caching on, [1]: off
  int64_t requests = 0, hits = 0;                // over the timed caching-on steps
  for (int r = 0; r < rounds; ++r) {
    for (int mode = 0; mode < 2; ++mode) {
      set_cpu_caching(mode == 0);
      trainer.step();
      const CpuAllocatorStats s0 = cpu_allocator_stats();
      for (int64_t i = 0; i < steps; ++i) {
        const long f0 = minor_faults();
        const auto t0 = Clock::now();
        trainer.step();
        times[mode].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        faults[mode].push_back(double(minor_faults() - f0));
      }
      const CpuAllocatorStats s1 = cpu_allocator_stats();
      if (mode == 0) {
        requests += s1.requests - s0.requests;
        hits += s1.cache_hits - s0.cache_hits;
      }
    }
  }
  set_cpu_caching(true);
  std::printf("alloc %s: model %s, batch %lld, %d threads, %d rounds x %lld steps per mode (interleaved)\n",
              config.c_str(), cfg.model.type.c_str(), (long long)cfg.train.batch_size, get_num_threads(), rounds,
              (long long)steps);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / double(v.size());
  };
  const char* names[2] = {"caching on", "caching off"};
  for (int m = 0; m < 2; ++m)
    std::printf("%-12s median %8.2f ms/step  mean %8.2f ms/step  minor faults/step: median %.0f, mean %.1f\n",
                names[m], median(times[m]) * 1e3, mean(times[m]) * 1e3, median(faults[m]), mean(faults[m]));
  std::printf("step time off / on (medians): %.3f\n", median(times[1]) / median(times[0]));
  std::printf("caching on: %.0f allocations/step, %.2f%% from the cache; %.2f MiB peak reserved\n",
              double(requests) / double(rounds * steps), 100.0 * double(hits) / double(std::max<int64_t>(requests, 1)),
              double(cpu_allocator_stats().peak_reserved_bytes) / (1 << 20));
  return 0;
}

struct CommBenchArgs {
  std::string backend = "local", op = "all_reduce", algorithm = "native", sizes = "1K:256M";
  int ranks = 2, threads = 1, iters = 0;
  bool no_memcpy = false;
};

// Prints the nccl-tests style table on rank 0. The mpi backend needs mpirun.
int bench_comm(const CommBenchArgs& a) {
  bench::CommBenchOptions o;
  o.backend = a.backend;
  o.op = comm::parse_op_kind(a.op);
  o.algorithm = comm::parse_algorithm(a.algorithm);
  std::tie(o.min_bytes, o.max_bytes) = bench::parse_size_range(a.sizes);
  o.iters = a.iters;
  o.with_memcpy = !a.no_memcpy;
  o.ranks = a.ranks;
  set_num_threads(a.threads);
  if (a.backend == "local") {
    std::printf("%s", bench::format_comm_bench(o, a.ranks, bench::run_local_comm_bench(o)).c_str());
    return 0;
  }
  if (!comm::launched_by_mpi()) STRATA_THROW(ConfigError, "bench comm --backend mpi: start it under mpirun");
  auto world = comm::init_mpi_world();
  o.with_memcpy = false;
  auto rows = bench::run_comm_bench(*world, o);
  if (world->rank() == 0) std::printf("%s", bench::format_comm_bench(o, world->size(), rows).c_str());
  return 0;
}

struct PpBenchArgs {
  std::string config = "configs/gpt_char.yaml";
  std::vector<std::string> sets;
  int steps = 3;
  std::vector<int> microbatches{1, 2, 4, 8, 16};
  std::string exchanges = "auto";
  std::vector<std::string> schedules;
};

// Pipeline schedules on the mpirun world (pp = ranks, one compute thread each): the
// config's model (it needs a pipeline plan: gpt) with 4-sequence micro-batches.
int bench_pp(const PpBenchArgs& a) {
  if (!comm::launched_by_mpi()) STRATA_THROW(ConfigError, "bench pp: start it under mpirun (one process per stage)");
  const TrainConfig cfg = TrainConfig::load(a.config, a.sets);
  set_num_threads(1);
  auto world = comm::init_mpi_world(cfg.comm);
  const auto make_model = [&] {
    Generator gen(cfg.run.seed);
    return build_model(cfg, gen);
  };
  const auto make_plan = [&family = model_family(cfg)](const nn::Module& m) { return family.pp_plan(m, {}, 1, 1); };
  if (make_plan(*make_model()).empty())
    STRATA_THROW(ConfigError, "bench pp: model.type ", cfg.model.type, " has no pipeline plan (use a gpt config)");
  bench::PpBenchOptions o{.microbatches = a.microbatches, .steps = a.steps, .per_mb = 4, .seq = cfg.model.block_size,
                          .vocab = 256, .exchanges = a.exchanges, .schedules = a.schedules};
  const auto rows = bench::bench_pp(world, make_model, make_plan, o);
  if (world->rank() == 0) std::printf("%s", bench::format_pp_bench(rows, world->size()).c_str());
  return 0;
}

struct DpBenchArgs {
  std::string backend = "local";
  int ranks = 2, steps = 20;
  std::vector<double> caps = {1, 5, 100};  ///< bench ddp: extra GPT bucket caps (MiB)
  std::string precision = "f32";          ///< bench zero: f32, or bf16_params (rows beside f32's)
  std::string algorithm, reduce_dtype;    ///< bench zero: comm overrides (empty: default)
  bool no_overlap = false;                ///< bench zero: skip the overlap table
  int dp_shard = 0;                       ///< bench zero: HSDP rows in shard groups of this many ranks
};

// A data-parallel benchmark (bench_ddp, bench_zero) on a local world of a.ranks threads
// or on the mpirun world; rank 0 prints the report.
template <class Options, class Local, class Mpi>
int bench_dp(const char* name, const DpBenchArgs& a, Local&& local, Mpi&& on_group) {
  Options o;
  o.steps = a.steps;
  if constexpr (requires { o.bucket_caps_mb; }) o.bucket_caps_mb = a.caps;
  if constexpr (requires { o.bf16_params; }) {
    o.bf16_params = a.precision == "bf16_params";
    if (!a.algorithm.empty()) o.algorithm = comm::parse_algorithm(a.algorithm);
    if (!a.reduce_dtype.empty()) o.reduce_dtype = comm::parse_reduce_dtype(a.reduce_dtype);
    o.overlap = !a.no_overlap;
    o.dp_shard = a.dp_shard;
  }
  if (a.backend == "local") {
    std::printf("%s", local(a.ranks, o).to_string().c_str());
    return 0;
  }
  if (!comm::launched_by_mpi()) STRATA_THROW(ConfigError, "bench ", name, " --backend mpi: start it under mpirun");
  auto world = comm::init_mpi_world();
  auto report = on_group(*world, o);
  if (world->rank() == 0) std::printf("%s", report.to_string().c_str());
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& parent) {
  struct Opts {
    int64_t size = 1024;
    int repeat = 10;
    std::vector<int> threads{0};
    std::string shapes = "square";
    std::vector<std::string> backends;
    std::string config;
    std::vector<std::string> sets;
    int64_t steps = 20;
    int64_t warmup = 3;
    int rounds = 5;
    int64_t ops_steps = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = parent.add_subcommand("bench", "Micro-benchmarks: gemm, train, alloc, attn, optim, comm, ddp, zero, tp, pp; soak");
  cmd->require_subcommand(1);
  CLI::App* gemm = cmd->add_subcommand("gemm", "GEMM GFLOP/s: ops::matmul vs cblas_sgemm");
  gemm->add_option("--size", o->size, "Matrix size n (n x n x n)")->check(CLI::PositiveNumber);
  gemm->add_option("--repeat", o->repeat, "Timed runs")->check(CLI::PositiveNumber);
  gemm->add_option("--threads", o->threads, "Threads (0 = all cores); several: one table each (e.g. --threads 1 2)")
      ->check(CLI::NonNegativeNumber);
  gemm->add_option("--shapes", o->shapes,
                   "square: --size^3; model: the GEMMs of a GPT (T64 B32, T128 B16), CNN (B64, B128), MLP and "
                   "Llama training step, and 1024^3")
      ->check(CLI::IsMember({"square", "model"}));
  gemm->add_option("--backends", o->backends,
                   "Time the model shapes through these f32 GEMM libraries against OpenBLAS, warm and cold "
                   "(openblas,blis,onednn_sgemm,onednn_matmul,libxsmm; 'all': every one in the build)")
      ->delimiter(',');
  auto cvo = std::make_shared<BenchConvOptions>();
  CLI::App* conv = cmd->add_subcommand("conv", "The CNN's convolutions: strata's im2col kernel vs oneDNN, per pass");
  conv->add_option("-c,--config", cvo->config, "CNN config (model.channels, data)");
  conv->add_option("--batch", cvo->batches, "Batch sizes")->check(CLI::PositiveNumber);
  conv->add_option("--threads", cvo->threads, "Thread counts, one table each")->check(CLI::PositiveNumber);
  conv->add_option("--rounds", cvo->rounds, "Timed calls per path")->check(CLI::PositiveNumber);
  CLI::App* train = cmd->add_subcommand("train", "Training steps/s of a config after warm-up");
  train->add_option("-c,--config", o->config, "YAML config")->required();
  train->add_option("--set", o->sets, "Override a config key (repeatable)")->type_name("KEY=VALUE");
  train->add_option("--steps", o->steps, "Timed steps")->check(CLI::PositiveNumber);
  train->add_option("--warmup", o->warmup, "Untimed warm-up steps")->check(CLI::NonNegativeNumber);
  train->add_option("--ops", o->ops_steps,
                    "Then profile this many steps per kernel (forward/backward/optimizer; GEMMs per shape, each "
                    "against the same shape alone); best at run.threads=1")
      ->check(CLI::NonNegativeNumber);
  CLI::App* alloc = cmd->add_subcommand("alloc", "Training step time and page faults, CPU caching allocator on vs off");
  alloc->add_option("-c,--config", o->config, "YAML config")->required();
  alloc->add_option("--set", o->sets, "Override a config key (repeatable)")->type_name("KEY=VALUE");
  alloc->add_option("--steps", o->steps, "Timed steps per mode per round")->check(CLI::PositiveNumber);
  alloc->add_option("--warmup", o->warmup, "Untimed warm-up steps")->check(CLI::NonNegativeNumber);
  alloc->add_option("--rounds", o->rounds, "Rounds of on/off")->check(CLI::PositiveNumber);
  CLI::App* comm = cmd->add_subcommand("comm", "Collective bandwidth, nccl-tests style (size, time, algbw, busbw)");
  auto co = std::make_shared<CommBenchArgs>();
  comm->add_option("--backend", co->backend, "local (threads) or mpi (under mpirun)")->check(CLI::IsMember({"local", "mpi"}));
  comm->add_option("--op", co->op, "all_reduce|all_gather|reduce_scatter|broadcast|reduce|all_to_all");
  comm->add_option("--algorithm", co->algorithm, "native|ring|tree|recursive|auto");
  comm->add_option("--sizes", co->sizes, "Size range, e.g. 1K:256M");
  comm->add_option("--ranks", co->ranks, "Ranks (local backend)")->check(CLI::PositiveNumber);
  comm->add_option("--threads", co->threads, "Compute threads per rank")->check(CLI::PositiveNumber);
  comm->add_option("--iters", co->iters, "Timed ops per size (0: enough for ~0.2 s)")->check(CLI::NonNegativeNumber);
  comm->add_flag("--no-memcpy", co->no_memcpy, "Skip the single-thread memcpy reference column");
  CLI::App* ddp = cmd->add_subcommand("ddp", "DDP: overlap, bucket caps, CNN scaling, memory per rank");
  auto dd = std::make_shared<DpBenchArgs>();
  ddp->add_option("--backend", dd->backend, "local (threads) or mpi (under mpirun)")->check(CLI::IsMember({"local", "mpi"}));
  ddp->add_option("--ranks", dd->ranks, "Ranks (local backend)")->check(CLI::PositiveNumber);
  ddp->add_option("--steps", dd->steps, "Timed steps per measurement")->check(CLI::PositiveNumber);
  ddp->add_option("--caps", dd->caps, "GPT bucket caps in MiB measured beside 25 (e.g. --caps 1 5 100; --caps 25: only 25)")
      ->check(CLI::PositiveNumber);
  CLI::App* zero = cmd->add_subcommand("zero", "DDP and ZeRO-1/2/3 on gpt_char: step time, memory per rank vs plan");
  auto zo = std::make_shared<DpBenchArgs>();
  zo->steps = 6;
  zero->add_option("--backend", zo->backend, "local (threads) or mpi (under mpirun)")->check(CLI::IsMember({"local", "mpi"}));
  zero->add_option("--ranks", zo->ranks, "Ranks (local backend)")->check(CLI::PositiveNumber);
  zero->add_option("--steps", zo->steps, "Timed steps per stage")->check(CLI::PositiveNumber);
  zero->add_option("--precision", zo->precision, "f32, or bf16_params (16-bit model states; rows beside f32's)")
      ->check(CLI::IsMember({"f32", "bf16_params"}));
  zero->add_option("--algorithm", zo->algorithm, "Collective algorithm of the stage rows (ring: counted bytes)")
      ->check(CLI::IsMember({"native", "ring", "tree", "recursive", "auto"}));
  zero->add_option("--reduce-dtype", zo->reduce_dtype, "comm.reduce_dtype of the stage rows: param or f32")
      ->check(CLI::IsMember({"param", "f32"}));
  zero->add_flag("--no-overlap", zo->no_overlap, "Skip the stage-1/2 overlap table");
  zero->add_option("--dp-shard", zo->dp_shard,
                   "Also HSDP rows: ZeRO-1/2/3 within shard groups of this many consecutive ranks, with the bytes "
                   "each group sent")
      ->check(CLI::PositiveNumber);
  CLI::App* tp = cmd->add_subcommand("tp", "Tensor parallel at tp 1, 2, 4 (and SP) on gpt_char: step, comm, memory per rank");
  auto to = std::make_shared<bench::TpBenchOptions>();
  tp->add_option("--steps", to->steps, "Timed steps per layout")->check(CLI::PositiveNumber);
  tp->add_option("--batch", to->batch, "Sequences per step")->check(CLI::PositiveNumber);
  // Context parallel.
  CLI::App* cpb = cmd->add_subcommand("cp", "Context parallel (ring attention) at cp 1, 2, 4 over sequence lengths: step, "
                                            "attention, exposed comm, K/V bytes, activations; zigzag vs plain balance");
  auto cpo = std::make_shared<bench::CpBenchOptions>();
  cpb->add_option("--steps", cpo->steps, "Timed steps per layout")->check(CLI::PositiveNumber);
  cpb->add_option("--batch", cpo->batch, "Sequences per step")->check(CLI::PositiveNumber);
  cpb->add_option("--seq", cpo->seqs, "Sequence lengths (each divisible by 2 x the largest cp)")->check(CLI::PositiveNumber);
  cpb->add_option("--cp", cpo->cps, "cp degrees")->check(CLI::PositiveNumber);
  CLI::App* pp = cmd->add_subcommand("pp", "Pipeline schedules under mpirun: step, busy time, bubble vs formula");
  auto po = std::make_shared<PpBenchArgs>();
  pp->add_option("-c,--config", po->config, "A GPT config (the model is benchmarked)");
  pp->add_option("--set", po->sets, "Override a config key (repeatable)")->type_name("KEY=VALUE");
  pp->add_option("--steps", po->steps, "Timed steps per row")->check(CLI::PositiveNumber);
  pp->add_option("--microbatches", po->microbatches, "Micro-batch counts m")->check(CLI::PositiveNumber);
  pp->add_option("--exchanges", po->exchanges,
                 "auto (the executor's choice for this host, the default), thread (comm threads), inline (posted "
                 "and progressed by the compute thread) or both (alternating)")
      ->check(CLI::IsMember({"auto", "inline", "thread", "both"}));
  pp->add_option("--schedules", po->schedules, "Schedules to run (default: all)")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}));
  CLI::App* soak = cmd->add_subcommand("soak", "A long run checkpointing on schedule: is the allocator's peak flat?");
  auto so = std::make_shared<SoakArgs>();
  soak->add_option("-c,--config", so->config, "YAML config")->required();
  soak->add_option("--set", so->sets, "Override a config key (repeatable)")->type_name("KEY=VALUE");
  soak->add_option("--steps", so->steps, "Training steps")->check(CLI::PositiveNumber);
  soak->add_option("--checkpoint-every", so->checkpoint_every, "Checkpoint (and eval, log, probe) period")
      ->check(CLI::PositiveNumber);
  soak->add_option("--probe", so->probe, "Step whose peaks the last step's must equal")->check(CLI::PositiveNumber);
  soak->add_option("--backend", so->backend, "mpi (under mpirun) or local (threads)")
      ->check(CLI::IsMember({"local", "mpi"}));
  soak->add_option("--ranks", so->ranks, "Ranks (local backend)")->check(CLI::PositiveNumber);
  soak->add_option("--dir", so->dir, "run.dir for the checkpoints and metrics (default: the config's)");
  soak->add_flag("--overwrite", so->overwrite,
                 "Start over in a run.dir that holds an earlier run (its metrics.jsonl and checkpoints/ are removed)");
  auto kernels = add_bench_kernel_commands(*cmd);  // attn, optim (apps/bench_kernels.cpp)
  return {cmd, [o, co, dd, zo, to, po, so, cvo, conv, gemm, train, alloc, comm, ddp, zero, tp, pp, cpb, cpo, soak,
                kernels]() -> int {
            if (const std::optional<int> rc = kernels()) return *rc;
            if (soak->parsed()) return bench_soak(*so);
            if (pp->parsed()) return bench_pp(*po);
            if (cpb->parsed()) {
              const bench::CpBenchReport r = bench::bench_cp(*cpo);
              std::printf("GPT %lld layers x %lld wide, %lld heads, batch %lld; local ranks (threads), one compute thread "
                          "per rank\n%s",
                          (long long)cpo->gpt.n_layer, (long long)cpo->gpt.n_embd, (long long)cpo->gpt.n_head,
                          (long long)cpo->batch, r.to_string().c_str());
              return 0;
            }
            if (tp->parsed()) {
              const bench::TpBenchReport r = bench::bench_tp(*to);
              std::printf("GPT, Ψ = %lld, local ranks (threads), one compute thread per rank\n%s", (long long)r.psi,
                          r.to_string().c_str());
              return 0;
            }
            if (ddp->parsed())
              return bench_dp<bench::DDPBenchOptions>(
                  "ddp", *dd, [](int n, const auto& op) { return bench::bench_ddp_local(n, op); },
                  [](comm::ProcessGroup& g, const auto& op) { return bench::bench_ddp(g, op); });
            if (zero->parsed())
              return bench_dp<bench::ZeroBenchOptions>(
                  "zero", *zo, [](int n, const auto& op) { return bench::bench_zero_local(n, op); },
                  [](comm::ProcessGroup& g, const auto& op) { return bench::bench_zero(g, op); });
            if (gemm->parsed()) {
              if (!o->backends.empty()) {
                std::vector<std::string> names = o->backends;
                if (names == std::vector<std::string>{"all"})
                  names = {"openblas", "blis", "onednn_sgemm", "onednn_matmul", "libxsmm"};
                return bench_gemm_backends(o->threads, std::max(o->repeat, 3), names);
              }
              if (o->shapes == "model") return bench_gemm_model(o->threads, std::max(o->repeat, 3));
              for (int t : o->threads) bench_gemm(o->size, o->repeat, t);
              return 0;
            }
            if (conv->parsed()) return bench_conv(*cvo);
            if (train->parsed()) return bench_train(o->config, o->sets, o->steps, o->warmup, o->ops_steps);
            if (alloc->parsed()) return bench_alloc(o->config, o->sets, o->steps, o->warmup, o->rounds);
            if (comm->parsed()) return bench_comm(*co);
            return 2;
          }};
}

}  // namespace strata::apps
