// Trainer: the loop of `strata train`: batch -> forward -> loss -> backward -> clip ->
// step -> schedule, evaluation, checkpoint cadence and resume. The layout is built by
// apps/layout.h, the output is apps/progress.h's.
#include "apps/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "apps/flops.h"
#include "apps/layout.h"
#include "apps/memory_report.h"
#include "apps/trace_command.h"
#include <strata/autograd/autocast.h>
#include <strata/autograd/engine.h>
#include <strata/autograd/grad_mode.h>
#include <strata/comm/mpi.h>
#include <strata/core/log.h>
#include <strata/core/memory.h>
#include <strata/core/threads.h>
#include <strata/core/trace.h>
#include <strata/tensor/file_io.h>

namespace strata::apps {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", (long long)step);
  return buf;
}

}  // namespace

Trainer::Trainer(TrainConfig cfg, TrainerOptions opts) : cfg_(std::move(cfg)), opts_(opts) {
  write_files_any_rank_ = opts_.write_files;
  // Progress style first: a bad STRATA_PROGRESS is a config error before any work.
  const ProgressStyle style =
      choose_progress_style(::isatty(STDOUT_FILENO) != 0, comm::launched_by_mpi(), std::getenv("STRATA_PROGRESS"));
  device_ = resolve_device(cfg_.run);
  if (cfg_.run.precision == "bf16" || cfg_.run.precision == "f16")
    autocast_ = cfg_.run.precision == "bf16" ? DType::bf16 : DType::f16;
  // f16 (autocast) and f16_params (f16 model states, f32 masters) scale the loss dynamically
  if (cfg_.run.precision == "f16" || cfg_.run.precision == "f16_params") scaler_.emplace();

  std::shared_ptr<comm::ProcessGroup> world = opts_.world ? opts_.world : init_world(cfg_, device_);
  rank_ = world->rank();
  world_ = world->size();
  const parallel::ParallelDims dims = resolve_dims(cfg_, world_);
  if (rank_ != 0) {  // logs, metrics and checkpoints come from rank 0 only
    opts_.verbose = false;
    opts_.write_files = false;
  }
  // Diagnostics: rank-tagged lines on stderr, and each rank's own file under run.dir/logs.
  init_logging(rank_,
               cfg_.run.log_level.empty() ? std::nullopt
                                          : std::optional(parse_log_level(cfg_.run.log_level, "run.log_level")),
               write_files_any_rank_ ? (fs::path(cfg_.run.dir) / "logs").string() : "");
  // A save that failed earlier (full disk, killed job) left "<step>.tmp" behind: never
  // resumed from, removed before this run writes or resumes anything.
  if (opts_.write_files) remove_stale_tmp((fs::path(cfg_.run.dir) / "checkpoints").string());
  if (cfg_.parallel.thread_replicas()) {
    // run.threads is the process's budget, shared by the replica threads.
    const int total = cfg_.run.threads > 0 ? cfg_.run.threads : int(std::thread::hardware_concurrency());
    set_num_threads(std::max(1, total / cfg_.parallel.replicas));
  } else {
    set_num_threads(cfg_.run.threads);
  }
  manual_seed(cfg_.run.seed);
  data_ = build_data(cfg_);
  Generator init_gen(cfg_.run.seed);
  model_ = build_model(cfg_, init_gen);
  // 16-bit model states: the f32 init rounded once; the optimizer keeps f32 masters of them
  if (cfg_.run.precision == "bf16_params") model_->to(DType::bf16);
  if (cfg_.run.precision == "f16_params") model_->to(DType::f16);
  if (!device_.is_cpu()) model_->to(device_);  // before the optimizer: its state follows the parameters
  // The whole model's size and FLOPs, before tensor and pipeline parallelism leave this
  // rank a shard of its stages.
  model_parameters_ = model_->num_parameters();
  const double flops_per_sample = train_flops_per_sample(cfg_, *model_);
  for (const auto& [n, t] : model_->state_dict()) whole_state_names_.push_back(n);
  pm_ = build_parallel_model(cfg_, world, dims, model_);

  const int64_t n = data_.train->size();
  const int64_t bs = cfg_.train.batch_size / dims.dp;  // per dp rank
  const int64_t n_local = (n + dims.dp - 1) / dims.dp;  // DistributedSampler pads to a multiple of dp
  if (n_local < bs)
    config_fail("train.batch_size", "is " + std::to_string(cfg_.train.batch_size) + " but the training split has only " +
                                        std::to_string(n) + " samples");
  steps_per_epoch_ = std::max<int64_t>(1, (n_local / bs) / cfg_.train.grad_accum_steps);
  total_steps_ = cfg_.train.max_steps > 0 ? cfg_.train.max_steps : cfg_.train.epochs * steps_per_epoch_;
  schedule_ = build_schedule(cfg_, total_steps_);
  sampler_seed_ = cfg_.run.seed;
  // Replicas k > 0 first: their own init is discarded (they take replica 0's weights before
  // every forward), and a resume continues their dropout streams.
  if (cfg_.parallel.thread_replicas()) replicas_ = build_replicas(cfg_, model_);
  const data::LoaderState start = resume(n_local / bs);
  if (needs_data(*pm_)) {
    sampler_ = build_sampler(*pm_, n, sampler_seed_);
    loader_ = std::make_unique<data::DataLoader>(
        data_.train, sampler_,
        data::DataLoaderOptions{.batch_size = bs, .drop_last = true, .prefetch = cfg_.data.prefetch}, start);
  }

  std::string metrics_path;
  if (opts_.write_files) {
    std::error_code ec;
    fs::create_directories(cfg_.run.dir, ec);
    if (ec) STRATA_THROW(DataError, "cannot create run directory '", cfg_.run.dir, "': ", ec.message());
    metrics_path = (fs::path(cfg_.run.dir) / "metrics.jsonl").string();
    if (!cfg_.train.resume.empty()) prune_metrics_for_resume(metrics_path, step_, total_steps_);
  }
  progress_ = std::make_unique<Progress>(opts_.verbose, style, metrics_path, !cfg_.train.resume.empty());
  if (cfg_.run.tensorboard && !metrics_path.empty()) progress_->enable_tensorboard((fs::path(cfg_.run.dir) / "tb").string());
  flops_per_step_ = flops_per_sample * double(cfg_.train.batch_size * cfg_.train.grad_accum_steps);
  // MFU's denominator: given, or this process's GEMM throughput (each replica thread group
  // runs its own GEMMs), measured once on rank 0, which is the one that logs.
  peak_flops_ = cfg_.run.peak_flops;
  if (peak_flops_ == 0 && rank_ == 0 && device_.is_cpu())
    peak_flops_ = measured_gemm_flops() * double(replicas_ ? replicas_->replicas() : 1);
  run_start_ = window_start_ = Clock::now();  // train() restarts both; a save() before it needs them set
}

data::LoaderState Trainer::resume(int64_t batches_per_epoch) {
  if (cfg_.train.resume == "auto")  // torchtitan's auto-resume: continue this run dir if it has a checkpoint
    cfg_.train.resume = fs::exists(fs::path(cfg_.run.dir) / "checkpoints" / kLatestFile) ? cfg_.run.dir : "";
  if (cfg_.train.resume.empty()) return {};
  // Any layout, world size and format version: every rank reads only what it holds.
  const Checkpoint ck = open_checkpoint(cfg_.train.resume);
  const std::string& state_file = ck.state_file;
  auto gens = model_->generators();
  if (gens.size() != ck.state.model_rngs.size())
    STRATA_THROW(DataError, "checkpoint state '", state_file, "': holds ", ck.state.model_rngs.size(),
                 " model RNG states but the model has ", gens.size(), " generators");
  if (ck.state.loader_batch > batches_per_epoch)
    STRATA_THROW(DataError, "checkpoint state '", state_file, "': loader position batch ", ck.state.loader_batch,
                 " is past the ", batches_per_epoch, " batches per epoch of this config (batch size changed?)");
  pm_->load_state(*ck.reader, /*with_optimizer=*/true);
  for (size_t i = 0; i < gens.size(); ++i) gens[i]->set_state(ck.state.model_rngs[i].first, ck.state.model_rngs[i].second);
  default_generator().set_state(ck.state.default_rng.first, ck.state.default_rng.second);
  sampler_seed_ = ck.state.sampler_seed;
  step_ = ck.state.step;
  last_checkpoint_step_ = step_;
  elapsed_before_ = ck.state.extra.value("elapsed_s", 0.0);
  if (scaler_ && ck.state.extra.contains("grad_scaler")) {  // an f32/bf16 checkpoint starts a fresh scale
    try {
      scaler_->load_state_dict(ck.state.extra["grad_scaler"]);
    } catch (const Error& e) {
      STRATA_THROW(DataError, "checkpoint state '", state_file, "': grad_scaler: ", e.what());
    }
  }
  const nlohmann::json saved = ck.state.extra.value("dp_replica_rngs", nlohmann::json());
  if (replicas_ && saved.is_array() && saved.size() == size_t(replicas_->replicas() - 1))  // same replica count
    for (int k = 1; k < replicas_->replicas(); ++k) {
      auto rgens = replicas_->replica(k).generators();
      const auto& s = saved[size_t(k - 1)];
      if (!s.is_array() || s.size() != rgens.size()) continue;
      for (size_t i = 0; i < rgens.size(); ++i) rgens[i]->set_state(s[i][0].get<uint64_t>(), s[i][1].get<uint64_t>());
    }
  if (opts_.verbose) std::printf("resumed from %s at step %lld\n", ck.dir.c_str(), (long long)step_);
  spdlog::info("resumed from {} at step {}", ck.dir, step_);
  return {ck.state.loader_epoch, ck.state.loader_batch};
}

Trainer::~Trainer() = default;

int64_t Trainer::units_per_step() const {
  return cfg_.train.batch_size * cfg_.train.grad_accum_steps * data_.tokens_per_sample;
}

double Trainer::lr_at(int64_t step) const {
  double lr = schedule_->lr_at(step);
  // The schedule itself warms up only for cosine; give constant/step the same ramp.
  const int64_t w = cfg_.schedule.warmup_steps;
  if (cfg_.schedule.name != "cosine" && w > 0 && step < w) lr *= double(step + 1) / double(w);
  return lr;
}

// One pipeline step on this rank's batch (accum is 1 under pp): gradients accumulated
// over the micro-batches and their dp reduction started; the batch's mean loss.
double Trainer::pipeline_loss(const data::Batch& b) {
  AutocastGuard amp(autocast_);
  const double lv = pm_->pipeline_step(b.input, b.target, b.input.shape());
  if (!std::isfinite(lv)) STRATA_THROW(Error, "training diverged at step ", step_ + 1, ": loss is ", lv);
  pm_->finalize();
  return lv;
}

Tensor Trainer::loss_of(const data::Batch& b) {
  if (replicas_) return replicated_batch_loss(*replicas_, b);
  return batch_loss(*model_, cfg_, b);
}

double Trainer::step() {
  STRATA_CHECK(loader_ != nullptr, "[train] this rank holds no data loader (pipeline middle stage)");
  pm_->optimizer().set_lr(lr_at(step_));
  model_->train();
  const int64_t accum = cfg_.train.grad_accum_steps;
  double sum = 0.0;
  for (int64_t a = 0; a < accum; ++a) {
    std::optional<data::Batch> next = loader_->next();
    if (!next) {  // end of epoch: the loader has moved to the next one
      loader_->set_epoch(loader_->epoch());
      next = loader_->next();
    }
    STRATA_CHECK(next.has_value(), "[train] the data loader produced no batch at step ", step_);
    const data::Batch b = on_device(std::move(*next));
    // The first accum-1 micro-batches only accumulate locally; the last one's backward
    // reduces the accumulated sum.
    if (pm_->pipeline()) {  // pp > 1: the schedule runs every micro-batch's forward and backward
      sum += pipeline_loss(b);
      continue;
    }
    std::optional<parallel::NoSync> no_sync;
    if (a + 1 < accum) no_sync.emplace(pm_->no_sync());
    Tensor loss;
    {
      trace::Scope slice("forward");
      AutocastGuard amp(autocast_);  // forward and loss only; backward runs in the ops' own dtypes
      loss = pm_->forward_with([&] { return loss_of(b); });
    }
    const double lv = loss.item<double>();
    if (!std::isfinite(lv))
      STRATA_THROW(Error, "training diverged at step ", step_ + 1, ": loss is ", lv,
                   " (lower optim.lr or set train.grad_clip)");
    if (accum > 1) loss = loss * (1.0 / double(accum));
    backward(scaler_ ? scaler_->scale(loss) : loss);
    {
      trace::Scope slice("finalize");
      pm_->finalize();  // no-op inside no_sync
    }
    sum += lv;
  }
  if (scaler_) pm_->unscale_(*scaler_);  // clipping sees the true gradients; ZeRO agrees on overflow
  const bool finite = !scaler_ || !scaler_->found_inf(pm_->optimizer());
  if (cfg_.train.grad_clip > 0 && finite) pm_->clip_grad_norm(cfg_.train.grad_clip);
  {
    trace::Scope slice("optimizer");
    pm_->step(scaler_ ? &*scaler_ : nullptr);
    pm_->zero_grad();
  }
  ++step_;
  if (replicas_) last_replica_memory_ = replicas_->memory_report();  // K small records; optimizer added when printed
  return sum / double(accum);
}

data::Batch Trainer::on_device(data::Batch b) const {
  if (!device_.is_cpu()) {
    b.input = b.input.to(device_);
    b.target = b.target.to(device_);
  }
  // 16-bit model states: floating inputs (images) enter a bf16 model as bf16; tokens stay i64
  if (cfg_.run.precision == "bf16_params" && b.input.dtype() == DType::f32) b.input = ops::to_dtype(b.input, DType::bf16);
  if (cfg_.run.precision == "f16_params" && b.input.dtype() == DType::f32) b.input = ops::to_dtype(b.input, DType::f16);
  return b;
}

EvalResult Trainer::evaluate(bool test) {
  const std::shared_ptr<const data::Dataset>& ds = test ? data_.test : data_.eval;
  STRATA_CHECK(ds, "[Trainer] no test split to evaluate");
  NoGradGuard no_grad;
  model_->eval();
  const int64_t bs = std::max<int64_t>(cfg_.train.batch_size, data_.tokens ? 64 : 256);
  auto sampler = std::make_shared<data::SequentialSampler>(ds->size());
  data::DataLoader loader(ds, sampler, {.batch_size = bs, .drop_last = false, .prefetch = cfg_.data.prefetch});
  EvalResult r;
  double loss_sum = 0.0;
  int64_t correct = 0, batches = 0;
  AutocastGuard amp(autocast_);
  while (auto next = loader.next()) {
    const Tensor target = next->target;  // on the CPU
    const data::Batch b = on_device(std::move(*next));
    const int64_t n = b.size();
    if (data_.tokens) {
      const auto* pipe = pm_->pipeline();  // pp > 1: every rank evaluates, stage by stage
      loss_sum += (pipe ? pm_->pipeline()->eval_loss(b.input, b.target, b.input.shape()) : loss_of(b).item<double>()) *
                  double(n);
    } else if (pm_->pipeline()) {  // pp > 1: the last stage's rank holds the logits; summed over pp below
      const Tensor logits = pm_->pipeline()->eval_forward(b.input, b.input.shape());
      if (logits.defined()) {
        loss_sum += cross_entropy(logits, b.target).item<double>() * double(n);
        Tensor pred = ops::to_cpu(ops::argmax(logits, 1));
        const int64_t* p = pred.data<int64_t>();
        const int64_t* t = target.data<int64_t>();
        for (int64_t i = 0; i < n; ++i) correct += p[i] == t[i];
      }
    } else {
      Tensor logits = replicas_ ? replicas_->forward(b.input) : model_->forward(b.input);
      loss_sum += cross_entropy(logits, b.target).item<double>() * double(n);
      Tensor pred = ops::to_cpu(ops::argmax(logits, 1));
      const int64_t* p = pred.data<int64_t>();
      const int64_t* t = target.data<int64_t>();
      for (int64_t i = 0; i < n; ++i) correct += p[i] == t[i];
    }
    r.samples += n;
    if (cfg_.train.eval_batches > 0 && ++batches >= cfg_.train.eval_batches) break;
  }
  model_->train();
  if (pm_->pipeline() && !data_.tokens) {  // only the last stage's rank counted: every pp rank gets its sums
    const std::vector<double> part{loss_sum, double(correct)};
    const std::vector<double> all =
        comm::all_reduce_host(*pm_->mesh()["pp"], ops::from_vector(part, {2}), comm::ReduceOp::sum).to_vector<double>();
    loss_sum = all[0];
    correct = int64_t(all[1]);
  }
  r.loss = r.samples > 0 ? loss_sum / double(r.samples) : 0.0;
  if (!data_.tokens) r.accuracy = r.samples > 0 ? double(correct) / double(r.samples) : 0.0;
  return r;
}

TrainingState Trainer::capture_state() const {
  TrainingState st;
  st.step = step_;
  if (loader_) {
    st.loader_epoch = loader_->state().epoch;
    st.loader_batch = loader_->state().batch;
  }
  st.default_rng = {default_generator().seed(), default_generator().offset()};
  for (Generator* g : model_->generators()) st.model_rngs.emplace_back(g->seed(), g->offset());
  st.sampler_seed = sampler_seed_;
  st.config_yaml = cfg_.yaml;
  st.extra = {{"model_type", cfg_.model.type},
              {"dataset", cfg_.data.dataset},
              {"elapsed_s", elapsed_before_ + seconds_since(run_start_)}};
  if (scaler_) st.extra["grad_scaler"] = scaler_->state_dict();
  if (replicas_) {  // the other replicas' dropout streams; a single-process resume ignores them
    nlohmann::json reps = nlohmann::json::array();
    for (int k = 1; k < replicas_->replicas(); ++k) {
      nlohmann::json gens = nlohmann::json::array();
      for (Generator* g : replicas_->replica(k).generators()) gens.push_back({g->seed(), g->offset()});
      reps.push_back(gens);
    }
    st.extra["dp_replica_rngs"] = reps;
  }
  return st;
}

void Trainer::save(const std::string& dir) {
  // One path for every layout, collective over the world: each rank passes its pieces
  // (replicated tensors from rank 0, ZeRO slices from everyone) and the index records the mesh.
  pm_->sync_pipeline_generators();  // pp > 1: rank 0's state lists every stage's dropout streams
  // Not model_->state_dict(): under pp it lists only rank 0's stages, and readers take
  // every tensor not listed for optimizer state (eval, sample, consolidate would miss them).
  const std::vector<std::string>& names = whole_state_names_;
  parallel::CheckpointLayout layout{.mesh = {}, .zero_stage = pm_->dims().zero_stage};
  for (const auto& d : pm_->mesh().shape().dims()) layout.mesh.emplace_back(d.name, d.size);
  save_sharded_checkpoint(dir, *pm_->mesh().world(), pm_->state_pieces(), layout, names,
                          pm_->optimizer().state_dict().scalars, capture_state());
}

EvalResult Trainer::evaluate_collective(bool test) {
  if (pm_->pipeline()) {  // the stages evaluate together (ZeRO-3: each with its units gathered)
    const parallel::ParallelModel::FullParams full = pm_->summon_full_params();
    const EvalResult r = evaluate(test);
    return rank_ == 0 ? r : EvalResult{};
  }
  const parallel::ParallelModel::FullParams full = pm_->summon_full_params();
  return rank_ == 0 ? evaluate(test) : EvalResult{};
}

void Trainer::log_window(double lr) {
  double mean = window_loss_ / double(window_steps_);
  if (world_ > 1) {  // every rank logs at the same steps: average the window over the world
    const Tensor t = ops::from_vector(std::vector<double>{mean}, {1});
    mean = comm::all_reduce_host(*pm_->mesh().world(), t, comm::ReduceOp::sum).item<double>() / double(world_);
  }
  const double dt = seconds_since(window_start_);
  const double bpe = double(loader_->batches_per_epoch());
  const int64_t done = step_ - run_start_step_;
  StepLog s{.step = step_,
            .total_steps = total_steps_,
            .epoch = double(loader_->state().epoch) + (bpe > 0 ? double(loader_->state().batch) / bpe : 0.0),
            .loss = mean,
            .lr = lr,
            .throughput = dt > 0 ? double(window_steps_ * units_per_step()) / dt : 0.0,
            .unit = throughput_unit(),
            .units = step_ * units_per_step(),
            .elapsed_s = elapsed_before_ + seconds_since(run_start_),
            .eta_s = done > 0 ? seconds_since(run_start_) / double(done) * double(total_steps_ - step_) : NAN,
            .flops_per_s = dt > 0 ? double(window_steps_) * flops_per_step_ / dt : 0.0,
            .mfu = dt > 0 && peak_flops_ > 0 ? double(window_steps_) * flops_per_step_ / dt / double(world_) / peak_flops_
                                             : 0.0,
            .loss_scale = scaler_ ? std::optional(scaler_->get_scale()) : std::nullopt,
            .skipped_steps = scaler_ ? std::optional(scaler_->skipped_steps()) : std::nullopt};
  progress_->log_step(s);
}

void Trainer::log_eval(const EvalResult& r, bool test) {
  progress_->log_eval({.step = step_,
                       .split = test ? std::string("test") : data_.eval_split,
                       .loss = r.loss,
                       .samples = r.samples,
                       .accuracy = r.accuracy,
                       .bigram_entropy = test ? std::nullopt : data_.bigram_entropy});
}

void Trainer::maybe_checkpoint() {
  // Checkpoints are written by every rank (rank 0 commits the directory).
  if (!write_files_any_rank_ || last_checkpoint_step_ == step_) return;
  const fs::path root = fs::path(cfg_.run.dir) / "checkpoints";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) STRATA_THROW(DataError, "cannot create '", root.string(), "': ", ec.message());
  const std::string name = checkpoint_name(step_);
  save((root / name).string());
  last_checkpoint_step_ = step_;
  if (!opts_.write_files) return;
  write_file_atomic((root / kLatestFile).string(), name + "\n");
  if (cfg_.train.keep_checkpoints > 0) {
    std::vector<std::string> dirs;
    for (const auto& e : fs::directory_iterator(root)) {
      const std::string f = e.path().filename().string();
      if (e.is_directory() && f.rfind("step_", 0) == 0 && f.find('.') == std::string::npos) dirs.push_back(f);
    }
    std::sort(dirs.begin(), dirs.end());
    for (size_t i = 0; i + size_t(cfg_.train.keep_checkpoints) < dirs.size(); ++i) fs::remove_all(root / dirs[i], ec);
  }
  progress_->line("checkpoint: " + (root / name).string());
  spdlog::info("checkpoint written: {} (step {})", (root / name).string(), step_);
}

EvalResult Trainer::train() {
  if (opts_.verbose) {
    std::printf("model: %s, %lld parameters | data: %s (%lld train / %lld %s samples) | optim: %s lr %g | "
                "steps: %lld (%lld per epoch) | threads: %d\n",
                cfg_.model.type.c_str(), (long long)model_parameters_,
                cfg_.data.dataset.c_str(),
                (long long)data_.train->size(), (long long)data_.eval->size(), data_.eval_split.c_str(),
                cfg_.optim.name.c_str(), cfg_.optim.lr, (long long)total_steps_, (long long)steps_per_epoch_,
                get_num_threads());
    if (!device_.is_cpu() || cfg_.run.precision != "f32")
      std::printf("device: %s | precision: %s%s\n", device_.str().c_str(), cfg_.run.precision.c_str(),
                  cfg_.run.precision == "f16_params" ? " (16-bit model states, f32 master weights, dynamic loss scaling)"
                  : scaler_   ? " (autocast, dynamic loss scaling)"
                  : autocast_ ? " (autocast)"
                              : cfg_.run.precision == "bf16_params" ? " (16-bit model states, f32 master weights)" : "");
    std::printf("flops: %.3g GFLOP per step (model) | peak %.1f GFLOP/s per rank (%s)\n", flops_per_step_ / 1e9,
                peak_flops_ / 1e9, cfg_.run.peak_flops > 0 ? "run.peak_flops" : "measured GEMM");
    std::printf("layout: %s | %s | %lld samples per dp rank per step\n", pm_->dims().str().c_str(),
                pm_->describe().c_str(), (long long)(cfg_.train.batch_size / pm_->dims().dp));
    if (replicas_)
      std::printf("dp: %d replicas (threads in this process) x %d intra-op thread(s), about %lld samples per "
                  "replica per micro-batch\n",
                  replicas_->replicas(), get_num_threads(),
                  (long long)((cfg_.train.batch_size + replicas_->replicas() - 1) / replicas_->replicas()));
    if (data_.bigram_entropy)
      std::printf("%s split baselines: bigram entropy %.4f nats/token, unigram %.4f\n", data_.eval_split.c_str(),
                  *data_.bigram_entropy, *data_.unigram_entropy);
    std::fflush(stdout);
  }
  run_start_ = window_start_ = Clock::now();
  run_start_step_ = step_;
  window_loss_ = 0.0;
  window_steps_ = 0;
  TraceWindow tracing(cfg_.run.trace_start_step, cfg_.run.trace_steps, rank_,
                      write_files_any_rank_ ? cfg_.run.dir : "", *model_);
  while (step_ < total_steps_) {
    const double lr = lr_at(step_);
    tracing.before_step(step_);
    double loss;
    {
      trace::Scope slice("step", trace::Cat::step, {{"step", step_ + 1}});
      loss = step();
    }
    tracing.after_step(step_);
    window_loss_ += loss;
    ++window_steps_;
    ema_loss_ = (step_ - run_start_step_ == 1) ? loss : 0.95 * ema_loss_ + 0.05 * loss;
    if (step_ % cfg_.train.log_every == 0 || step_ == total_steps_) {
      log_window(lr);
      window_loss_ = 0.0;
      window_steps_ = 0;
      window_start_ = Clock::now();
    }
    if (progress_->draws_bar()) {
      const double elapsed = seconds_since(run_start_);
      const int64_t done = step_ - run_start_step_;
      progress_->draw_bar(step_, total_steps_, loader_->epoch(), ema_loss_, lr,
                          elapsed > 0 ? double(done * units_per_step()) / elapsed : 0.0, throughput_unit(),
                          elapsed / double(done) * double(total_steps_ - step_));
    }
    if (cfg_.train.eval_every > 0 && step_ % cfg_.train.eval_every == 0 && step_ < total_steps_) {
      const EvalResult r = evaluate_collective();
      if (rank_ == 0) log_eval(r);
      window_start_ = Clock::now();
    }
    if (cfg_.train.checkpoint_every > 0 && step_ % cfg_.train.checkpoint_every == 0) maybe_checkpoint();
    if (opts_.after_step) opts_.after_step(step_);
  }
  progress_->close_bar();
  tracing.finish();
  if (cfg_.train.save_final) maybe_checkpoint();
  const EvalResult r = evaluate_collective();  // rank 0 evaluates
  // A test split beside a val split: evaluated once, here, never during training.
  const std::optional<EvalResult> rt = data_.test ? std::optional(evaluate_collective(true)) : std::nullopt;
  if (rank_ != 0) return {};
  log_eval(r);
  if (rt) log_eval(*rt, true);
  if (opts_.verbose) {
    if (r.accuracy) std::printf("final %s accuracy: %.4f\n", data_.eval_split.c_str(), *r.accuracy);
    if (data_.bigram_entropy)
      std::printf("final %s loss: %.4f (bigram entropy: %.4f)\n", data_.eval_split.c_str(), r.loss,
                  *data_.bigram_entropy);
    else
      std::printf("final %s loss: %.4f\n", data_.eval_split.c_str(), r.loss);
    if (rt && rt->accuracy) std::printf("final test accuracy: %.4f\n", *rt->accuracy);
    if (rt) std::printf("final test loss: %.4f\n", rt->loss);
    std::printf("time: %s\n", format_duration(seconds_since(run_start_)).c_str());
    if (opts_.memory_report) std::printf("%s", memory_report().c_str());
    std::fflush(stdout);
  }
  return r;
}

parallel::MemoryPlan Trainer::predicted_memory() const {
  // DDP holds bucket buffers; one process and thread replicas hold one copy of each
  // category (the other replicas are extra, shown by DataParallel's per-replica table).
  parallel::MemoryPlanInput in = memory_plan_input(cfg_, *model_, pm_->dims().dp, cfg_.parallel.dims.zero_stage,
                                                   /*ddp_buckets=*/pm_->ddp() != nullptr);
  in.flat_units = pm_->flat_unit_sizes();
  return parallel::plan_memory(in);
}

std::string Trainer::memory_report() const {
  const std::string layout =
      replicas_ ? "DataParallel" : pm_->dims().dp_strategy();
  char heading[256];
  std::snprintf(heading, sizeof heading,
                "memory (rank %d): allocator bytes vs plan for %s at %d rank(s), zero_stage %d, Ψ = %lld%s", rank_,
                layout.c_str(), world_, cfg_.parallel.dims.zero_stage, (long long)model_->num_parameters(),
                replicas_ ? " (measured includes every replica)" : "");
  std::string s = format_memory_report(predicted_memory(), device_memory(device_), model_->num_parameters(), heading);
  if (replicas_ && !last_replica_memory_.empty()) {
    std::vector<parallel::ReplicaMemory> m = last_replica_memory_;
    for (const auto& [name, t] : pm_->optimizer().state_dict().tensors) m[0].optimizer += t.nbytes();
    s += "dp: bytes per replica in the last training step\n" + parallel::DataParallel::format_memory(m);
  }
  return s;
}

}  // namespace strata::apps
