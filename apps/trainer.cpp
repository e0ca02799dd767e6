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
#include <set>
#include <thread>

#include "apps/auto_layout.h"
#include "apps/flops.h"
#include "apps/hf/hf_reader.h"
#include "apps/layout.h"
#include "apps/world.h"
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
#include <strata/nn/moe.h>
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

// DataError unless the checkpoint `ck` holds exactly the model tensors `names` (the whole
// model's, as the config builds it): naming what it lacks and what it has beyond them.
void check_same_model(const parallel::Checkpoint& ck, const std::vector<std::string>& names, const std::string& type) {
  const std::vector<std::string> saved = ck.reader->names();
  std::vector<std::string> missing, extra;
  for (const std::string& n : names)
    if (std::find(saved.begin(), saved.end(), n) == saved.end()) missing.push_back(n);
  for (const auto& n : ck.reader->meta().value(parallel::kMetaModelTensors, nlohmann::json::array()))
    if (n.is_string() && std::find(names.begin(), names.end(), n.get<std::string>()) == names.end())
      extra.push_back(n.get<std::string>());
  if (missing.empty() && extra.empty()) return;
  const auto few = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 5; ++i) s += (i ? ", '" : "'") + v[i] + "'";
    return v.size() > 5 ? s + ", ... (" + std::to_string(v.size()) + ")" : s;
  };
  STRATA_THROW(DataError, "checkpoint '", ck.dir, "' holds another model than the config's (", type,
               "; was it trained with other model.* keys?): ", missing.empty() ? "" : "it lacks " + few(missing),
               !missing.empty() && !extra.empty() ? "; " : "", extra.empty() ? "" : "it has " + few(extra) + " the model does not");
}

}  // namespace

Trainer::Trainer(TrainConfig cfg, TrainerOptions opts) : cfg_(std::move(cfg)), opts_(opts) {
  write_files_any_rank_ = opts_.write_files;
  // Progress style first: a bad STRATA_PROGRESS is a config error before any work.
  const ProgressStyle style =
      choose_progress_style(::isatty(STDOUT_FILENO) != 0, comm::launched_by_mpi(), std::getenv("STRATA_PROGRESS"));
  device_ = resolve_device(cfg_.run);
  autocast_ = precision_autocast(cfg_.run.precision);
  // f16 (autocast) and f16_params (f16 model states, f32 masters) scale the loss dynamically
  if (scales_loss(cfg_.run.precision)) scaler_.emplace();

  std::shared_ptr<comm::ProcessGroup> world = opts_.world ? opts_.world : init_world(cfg_, device_);
  rank_ = world->rank();
  world_ = world->size();
  if (cfg_.parallel.auto_layout) {
    // Every rank must choose the same layout: the planner runs on identical inputs, the
    // slowest rank's GEMM speed among them.
    double flops = measured_gemm_flops();
    if (world_ > 1)
      flops = comm::all_reduce_host(*world, ops::full({1}, flops, DType::f64), comm::ReduceOp::min).item<double>();
    const AutoLayout chosen = choose_layout(cfg_, world_, flops);
    apply_layout(cfg_, chosen.plan);
    if (rank_ == 0 && opts_.verbose) std::printf("%s\n", chosen.why.c_str());
    spdlog::info("{}", chosen.why);
  }
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
  if (opts_.write_files) parallel::remove_stale_tmp((fs::path(cfg_.run.dir) / "checkpoints").string());
  set_num_threads(cfg_.parallel.intra_op_threads(cfg_.run.threads));
  manual_seed(cfg_.run.seed);
  data_ = build_data(cfg_);
  Generator init_gen(cfg_.run.seed);
  model_ = build_model(cfg_, init_gen);
  // 16-bit model states: the f32 init rounded once; the optimizer keeps f32 masters of them
  if (const auto dt = precision_state_dtype(cfg_.run.precision)) model_->to(*dt);
  if (!device_.is_cpu()) model_->to(device_);  // before the optimizer: its state follows the parameters
  // The whole model's size and FLOPs, before tensor and pipeline parallelism leave this
  // rank a shard of its stages.
  model_parameters_ = model_->num_parameters();
  const double flops_per_sample = train_flops_per_sample(cfg_);
  for (const auto& [n, t] : model_->state_dict()) whole_state_names_.push_back(n);
  pm_ = build_parallel_model(cfg_, world, dims, model_);
  if (cfg_.model.token_model() && cfg_.model.moe.enabled())
    moe_metrics_ = std::make_unique<MoeMetrics>(cfg_.model.moe, cfg_.model.n_layer);

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
  const data::LoaderState start = resume(n_local / bs);
  if (opts_.write_files && !resumed_from_.empty()) {
    // Resumed from the past of the run in run.dir: its later checkpoints move aside (never
    // deleted), so rotation keeps what this run writes and LATEST never dangles.
    const fs::path root = fs::path(cfg_.run.dir) / "checkpoints";
    for (const std::string& p : parallel::set_aside_later_checkpoints(root.string(), step_, resumed_from_)) {
      if (opts_.verbose) std::printf("a later checkpoint of this run moved aside: %s\n", p.c_str());
      spdlog::warn("resumed at step {}: the later checkpoint moved aside to {}", step_, p);
    }
  }
  sampler_ = build_sampler(*pm_, n, sampler_seed_);
  loader_ = std::make_unique<data::DataLoader>(
      data_.train, sampler_, data::DataLoaderOptions{.batch_size = bs, .drop_last = true, .prefetch = cfg_.data.prefetch},
      start);

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
  // MFU's denominator: given, or this process's GEMM throughput (each thread replica runs
  // its own GEMMs), measured once on rank 0, which is the one that logs.
  peak_flops_ = cfg_.run.peak_flops;
  if (peak_flops_ == 0 && rank_ == 0 && device_.is_cpu()) peak_flops_ = measured_gemm_flops() * double(pm_->compute_streams());
  run_start_ = window_start_ = Clock::now();  // train() restarts both; a save() before it needs them set
  if (cfg_.train.checkpoint_async && write_files_any_rank_) {
    // The background writer's collectives go over a group of their own (collective split).
    async_ckpt_ = std::make_unique<parallel::AsyncCheckpointWriter>(
        pm_->mesh().world()->split(0, pm_->mesh().world()->rank(), "checkpoint"));
  }
}

data::LoaderState Trainer::resume(int64_t batches_per_epoch) {
  if (cfg_.train.resume == "auto")  // torchtitan's auto-resume: continue this run dir if it has a checkpoint
    cfg_.train.resume = fs::exists(fs::path(cfg_.run.dir) / "checkpoints" / parallel::kLatestFile) ? cfg_.run.dir : "";
  if (cfg_.train.resume.empty()) {
    if (!cfg_.model.init_from.empty()) init_from_hf();
    return {};
  }
  // Any layout, world size and format version: every rank reads only what it holds.
  const parallel::Checkpoint ck = parallel::open_checkpoint(cfg_.train.resume);
  const std::string& state_file = ck.state_file;
  // The model first: a checkpoint of another architecture (model.n_layer changed, ...)
  // is named as such, not by a count that follows from it (its RNG states).
  check_same_model(ck, whole_state_names_, cfg_.model.type);
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
  resumed_from_ = ck.dir;
  elapsed_before_ = ck.state.extra.value("elapsed_s", 0.0);
  if (scaler_ && ck.state.extra.contains("grad_scaler")) {  // an f32/bf16 checkpoint starts a fresh scale
    try {
      scaler_->load_state_dict(ck.state.extra["grad_scaler"]);
    } catch (const Error& e) {
      STRATA_THROW(DataError, "checkpoint state '", state_file, "': grad_scaler: ", e.what());
    }
  }
  pm_->load_extra_state(ck.state.extra);  // the layout's own (thread replicas' dropout streams)
  if (opts_.verbose) std::printf("resumed from %s at step %lld\n", ck.dir.c_str(), (long long)step_);
  spdlog::info("resumed from {} at step {}", ck.dir, step_);
  return {ck.state.loader_epoch, ck.state.loader_batch};
}

void Trainer::init_from_hf() {
  // Weights only, delivered in the parameters' dtype; each rank reads the byte ranges of
  // the elements it holds, as from a checkpoint of another layout. The directory must
  // hold exactly the model's parameters: checked here, before any rank loads anything.
  const Clock::time_point t0 = Clock::now();
  const hf::HfModelDir src(cfg_.model.init_from, precision_state_dtype(cfg_.run.precision).value_or(DType::f32));
  const std::vector<std::string> have = src.names();
  for (const std::string& n : whole_state_names_)
    if (std::find(have.begin(), have.end(), n) == have.end())
      STRATA_THROW(DataError, "Hugging Face model directory '", src.dir(), "': holds no tensor for the model's '", n,
                   "' (model.* keys other than its config.json's?)");
  for (const std::string& n : have)
    if (std::find(whole_state_names_.begin(), whole_state_names_.end(), n) == whole_state_names_.end())
      STRATA_THROW(DataError, "Hugging Face model directory '", src.dir(), "': tensor '", src.entry(n).name,
                   "' (strata's '", n, "') is not a parameter of the model built from the config");
  pm_->load_state(src, /*with_optimizer=*/false);
  const double secs = seconds_since(t0);
  if (opts_.verbose) std::printf("initialised from %s (%s) in %.2f s\n", src.dir().c_str(), src.spec().architecture.c_str(), secs);
  spdlog::info("initialised from {} ({}) in {:.2f} s", src.dir(), src.spec().architecture, secs);
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

double Trainer::step() {
  pm_->optimizer().set_lr(lr_at(step_));
  model_->train();
  std::vector<parallel::Batch> batches;
  for (int64_t a = 0; a < cfg_.train.grad_accum_steps; ++a) {
    std::optional<data::Batch> next = loader_->next();
    if (!next) {  // end of epoch: the loader has moved to the next one
      loader_->set_epoch(loader_->epoch());
      next = loader_->next();
    }
    STRATA_CHECK(next.has_value(), "[train] the data loader produced no batch at step ", step_);
    data::Batch b = on_device(std::move(*next));
    batches.push_back({std::move(b.input), std::move(b.target)});
  }
  const parallel::StepResult r =
      pm_->train_step(batches, {.grad_clip = cfg_.train.grad_clip,
                                .scaler = scaler_ ? &*scaler_ : nullptr,
                                .autocast = autocast_,
                                .step = step_ + 1,
                                .before_update = [this] {
                                  if (async_ckpt_) async_ckpt_->wait_snapshot();  // a checkpoint's copy is complete
                                }});
  if (moe_metrics_) moe_metrics_->take(*model_);
  ++step_;
  return r.loss;
}

data::Batch Trainer::on_device(data::Batch b) const {
  if (!device_.is_cpu()) {
    b.input = b.input.to(device_);
    b.target = b.target.to(device_);
  }
  // 16-bit model states: floating inputs (images) enter a 16-bit model as such; tokens stay i64
  const auto dt = precision_state_dtype(cfg_.run.precision);
  if (dt && b.input.dtype() == DType::f32) b.input = ops::to_dtype(b.input, *dt);
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
    const data::Batch b = on_device(std::move(*next));
    const parallel::EvalSums e = pm_->eval_batch({b.input, b.target}, /*classify=*/!data_.tokens);
    loss_sum += e.loss_sum;
    correct += e.correct;
    r.samples += e.samples;
    if (cfg_.train.eval_batches > 0 && ++batches >= cfg_.train.eval_batches) break;
  }
  model_->train();
  r.loss = r.samples > 0 ? loss_sum / double(r.samples) : 0.0;
  if (!data_.tokens) r.accuracy = r.samples > 0 ? double(correct) / double(r.samples) : 0.0;
  return r;
}

parallel::TrainingState Trainer::capture_state() const {
  parallel::TrainingState st;
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
  const nlohmann::json layout_state = pm_->extra_state();  // the layout's own
  for (const auto& [k, v] : layout_state.items()) st.extra[k] = v;
  return st;
}

void Trainer::save(const std::string& dir) {
  save_checkpoint_state(dir, nullptr);
}

void Trainer::save_checkpoint_state(const std::string& dir, const std::function<void()>& after_commit) {
  // Never commit weights that are not finite (they would become LATEST and the resume
  // point): every rank checks the parameters it steps (its shards, slices or stages), and
  // the world agrees before anything is written.
  double local_sq = 0;
  for (const auto& [n, p] : pm_->optimizer().named_parameters()) local_sq += ops::sum_squares(p);
  const double bad = comm::all_reduce_host(*pm_->mesh().world(), ops::full({1}, std::isfinite(local_sq) ? 0.0 : 1.0, DType::f64),
                                           comm::ReduceOp::max)
                         .item<double>();
  if (bad > 0) {
    std::string last = "none";
    try {
      const fs::path root = fs::path(dir).parent_path();
      if (fs::exists(root / parallel::kLatestFile)) last = "'" + parallel::resolve_checkpoint_dir(root.string()) + "'";
    } catch (const std::exception&) {
    }
    STRATA_THROW(Error, "step ", step_, ": the model's weights are not finite (NaN or inf), so no checkpoint is written to '",
                 dir, "'; the last good checkpoint is ", last);
  }
  // One path for every layout, collective over the world: each rank passes its pieces
  // (replicated tensors from rank 0, ZeRO slices from everyone) and the index records the mesh.
  pm_->sync_generators();  // rank 0's state lists every pipeline stage's dropout streams
  // Not model_->state_dict(): under pp it lists only rank 0's stages, and readers take
  // every tensor not listed for optimizer state (eval, sample, consolidate would miss them).
  parallel::CheckpointLayout layout{.mesh = {}, .zero_stage = pm_->dims().zero_stage};
  for (const auto& d : pm_->mesh().shape().dims()) layout.mesh.emplace_back(d.name, d.size);
  if (async_ckpt_ && after_commit) {
    // The state is captured now; the buffers a forward updates (BatchNorm statistics) are
    // copied to host by start(), the parameters and optimizer state by the writer thread
    // while the next step's forward and backward run (its optimizer step waits for it).
    std::set<std::string> buffers;
    for (const auto& [n, b] : model_->named_buffers()) buffers.insert(n);
    async_ckpt_->start(
        pm_->state_pieces(),
        [dir, layout, names = whole_state_names_, scalars = pm_->optimizer().state_dict().scalars, st = capture_state(),
         after_commit](comm::ProcessGroup& g, const std::vector<parallel::ShardPiece>& snap) {
          parallel::save_sharded_checkpoint(dir, g, snap, layout, names, scalars, st);
          after_commit();
        },
        [buffers = std::move(buffers)](const parallel::ShardPiece& p) { return buffers.count(p.name) > 0; });
    return;
  }
  parallel::save_sharded_checkpoint(dir, *pm_->mesh().world(), pm_->state_pieces(), layout, whole_state_names_,
                                    pm_->optimizer().state_dict().scalars, capture_state());
  if (after_commit) after_commit();
}

EvalResult Trainer::evaluate_collective(bool test) {
  // On the ranks the layout evaluates on (every pipeline stage, else rank 0), with the
  // parameters whole where that needs them (ZeRO-3 gathered, tp shards joined).
  EvalResult r;
  pm_->evaluate([&] { r = evaluate(test); });
  return rank_ == 0 ? r : EvalResult{};
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
            .skipped_steps = scaler_ ? std::optional(scaler_->skipped_steps()) : std::nullopt,
            .moe = moe_metrics_ ? moe_metrics_->reduce(*pm_->mesh().world(), pm_->dims().tp) : nlohmann::json()};
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
  if (async_ckpt_) finish_async_checkpoint();  // one write in flight: the previous one first
  const int64_t step = step_;
  save_checkpoint_state((root / name).string(),
                        [this, root = root.string(), name, step] { publish_checkpoint(root, name, step); });
  last_checkpoint_step_ = step_;
  if (async_ckpt_)
    async_pending_ = (root / name).string();  // announced when its write is collected
  else
    progress_->line("checkpoint: " + (root / name).string());
  if (async_ckpt_ && rank_ == 0 && opts_.verbose && !async_reported_) {
    std::printf("checkpoint %s: %.1f MiB of this rank's state snapshotted to host buffers (%.1f ms on this step, the "
                "rest during the next one) and written in the background (train.checkpoint_async)\n",
                name.c_str(), double(async_ckpt_->buffer_bytes()) / (1 << 20), async_ckpt_->last_snapshot_s() * 1e3);
    std::fflush(stdout);
    async_reported_ = true;
  }
}

void Trainer::publish_checkpoint(const std::string& root_dir, const std::string& name, int64_t step) const {
  if (!opts_.write_files) return;
  const fs::path root(root_dir);
  try {
    write_file_atomic((root / parallel::kLatestFile).string(), name + "\n");
  } catch (const DataError& e) {  // a full disk after the commit: the checkpoint itself is complete
    STRATA_THROW(DataError, "checkpoint '", (root / name).string(), "' (step ", step,
                 ") was committed, but LATEST could not be updated to name it: ", e.what(),
                 "; resume from that directory (--resume ", (root / name).string(), ")");
  }
  if (cfg_.train.keep_checkpoints > 0) {
    std::error_code ec;
    const auto dirs = parallel::step_checkpoints(root.string());  // by step: the oldest first
    for (size_t i = 0; i + size_t(cfg_.train.keep_checkpoints) < dirs.size(); ++i)
      fs::remove_all(root / dirs[i].second, ec);
  }
  spdlog::info("checkpoint written: {} (step {})", (root / name).string(), step);  // thread-safe
}

void Trainer::poll_async_checkpoint() {
  // Every rank collects the outcome at the same step (save_sharded ends with the same
  // error on every rank), so none enters the next collective while another throws.
  bool done = async_ckpt_->done_here();
  if (world_ > 1)
    done = comm::all_reduce_host(*pm_->mesh().world(), ops::full({1}, done ? 1.0 : 0.0, DType::f64), comm::ReduceOp::min)
               .item<double>() > 0;
  if (done) finish_async_checkpoint();
}

void Trainer::finish_async_checkpoint() {
  try {
    async_ckpt_->finish();
  } catch (const DataError& e) {
    STRATA_THROW(DataError, "the checkpoint written in the background (train.checkpoint_async) failed: ", e.what());
  }
  if (!async_pending_.empty()) progress_->line("checkpoint: " + std::exchange(async_pending_, std::string()));
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
    if (!device_.is_cpu() || cfg_.run.precision != Precision::f32)
      std::printf("device: %s | precision: %s%s\n", device_.str().c_str(), precision_name(cfg_.run.precision),
                  precision_summary(cfg_.run.precision));
    std::printf("flops: %.3g GFLOP per step (model) | peak %.1f GFLOP/s per rank (%s)\n", flops_per_step_ / 1e9,
                peak_flops_ / 1e9, cfg_.run.peak_flops > 0 ? "run.peak_flops" : "measured GEMM");
    std::printf("layout: %s | %s | %lld samples per dp rank per step\n", pm_->dims().str().c_str(),
                pm_->describe().c_str(), (long long)(cfg_.train.batch_size / pm_->dims().dp));
    for (const std::string& line : pm_->notes(cfg_.train.batch_size)) std::printf("%s\n", line.c_str());
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
    if (async_ckpt_ && async_ckpt_->in_flight()) poll_async_checkpoint();
    if (cfg_.train.checkpoint_every > 0 && step_ % cfg_.train.checkpoint_every == 0) maybe_checkpoint();
    if (opts_.after_step) opts_.after_step(step_);
  }
  progress_->close_bar();
  tracing.finish();
  if (cfg_.train.save_final) maybe_checkpoint();
  if (async_ckpt_) finish_async_checkpoint();  // the run ends with its last checkpoint committed
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
  parallel::MemoryPlanInput in = memory_plan_input(cfg_, *model_, pm_->dims().shard_size(), cfg_.parallel.dims.zero_stage,
                                                   /*ddp_buckets=*/pm_->holds_buckets());
  if (pm_->dims().ep > 1) {  // this rank's experts: outside DDP's buckets and ZeRO's units
    for (const auto& [path, moe] : nn::moe_layers(*model_))
      for (const Tensor& p : moe->child("experts")->parameters()) in.expert_elements += p.numel();
    if (in.ddp_bucket_bytes > 0)
      in.ddp_bucket_bytes = in.ddp_bucket_bytes / in.param_elements * (in.param_elements - in.expert_elements);
  }
  in.flat_units = pm_->flat_unit_sizes();
  return parallel::plan_memory(in);
}

std::string Trainer::memory_report() const {
  const std::string layout = pm_->strategy();
  char heading[256];
  std::snprintf(heading, sizeof heading,
                "memory (rank %d): allocator bytes vs plan for %s at %d rank(s), zero_stage %d, Ψ = %lld%s", rank_,
                layout.c_str(), world_, cfg_.parallel.dims.zero_stage, (long long)model_->num_parameters(),
                pm_->compute_streams() > 1 ? " (measured includes every replica)" : "");
  std::string s = format_memory_report(predicted_memory(), device_memory(device_), model_->num_parameters(), heading);
  return s + pm_->memory_detail();
}

}  // namespace strata::apps
