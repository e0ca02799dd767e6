// Trainer: the loop, evaluation, logging and checkpoint cadence of `strata train`.
#include "apps/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "apps/memory_report.h"
#include "autograd/autocast.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "comm/local.h"
#include "comm/mpi.h"
#include "comm/nccl.h"
#include "core/memory.h"
#include "core/threads.h"
#include "optim/clip.h"
#include "tensor/file_io.h"
#include "tensor/storage.h"
#ifdef STRATA_WITH_CUDA
#include "tensor/cuda/runtime.h"
#endif

namespace strata::apps {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = int64_t(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(t / 3600), (long long)(t % 3600 / 60));
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(t / 60), (long long)(t % 60));
  else
    std::snprintf(buf, sizeof buf, "%llds", (long long)t);
  return buf;
}

std::string fmt_count(double v) {
  char buf[32];
  if (v >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e4)
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", (long long)step);
  return buf;
}

// Seed of replica k's init/dropout generator in mode dp (k >= 1; replica 0 uses run.seed).
uint64_t replica_seed(uint64_t seed, uint64_t k) { return seed + k * 0x9E3779B97F4A7C15ull; }

// run.device as a Device: "cuda" under mpirun is the local rank's GPU. ConfigError naming
// run.device when that GPU is not visible (the CPU-only build was refused by validate()).
Device resolve_device(const RunSection& run) {
  Device d = parse_device(run.device);
  if (d.is_cpu()) return d;
  if (run.device == "cuda" && comm::launched_by_mpi()) d.index = comm::local_rank();
#ifdef STRATA_WITH_CUDA
  const int count = cuda::device_count();
  if (count == 0)
    config_fail("run.device", "'" + run.device + "': no CUDA device is visible (" + cuda::unavailable_reason() + ")");
  if (d.index >= count)
    config_fail("run.device", "'" + run.device + "' resolves to cuda:" + std::to_string(d.index) + " but only " +
                                  std::to_string(count) + " CUDA device(s) are visible" +
                                  (run.device == "cuda" ? " (one GPU per rank: start at most that many ranks per node)"
                                                        : ""));
#endif
  return d;
}

}  // namespace

ProgressStyle choose_progress_style(bool stdout_is_tty, bool launched_by_mpi, const char* forced) {
  if (forced && *forced) {
    const std::string f = forced;
    if (f == "bar") return ProgressStyle::bar;
    if (f == "lines") return ProgressStyle::lines;
    STRATA_THROW(ConfigError, "STRATA_PROGRESS: expected bar or lines, got '", f, "'");
  }
  return stdout_is_tty && !launched_by_mpi ? ProgressStyle::bar : ProgressStyle::lines;
}

Trainer::Trainer(TrainConfig cfg, TrainerOptions opts) : cfg_(std::move(cfg)), opts_(opts) {
  const bool ddp = cfg_.parallel.mode == "ddp";
  const bool dp = cfg_.parallel.mode == "dp";
  const bool zero = ddp && cfg_.parallel.zero_stage > 0;
  write_files_any_rank_ = opts_.write_files;
  // Progress style first: a bad STRATA_PROGRESS is a config error before any work.
  draw_bar_ = opts_.verbose && choose_progress_style(::isatty(STDOUT_FILENO) != 0, comm::launched_by_mpi(),
                                                     std::getenv("STRATA_PROGRESS")) == ProgressStyle::bar;
  device_ = resolve_device(cfg_.run);
  if (cfg_.run.precision != "f32") autocast_ = cfg_.run.precision == "bf16" ? DType::bf16 : DType::f16;
  if (cfg_.run.precision == "f16") scaler_.emplace();
  if (ddp) {
    // Under mpirun: one rank per process. Otherwise a 1-rank world, which trains exactly
    // like mode none (same sampler order, same batch). CUDA tensors travel over nccl.
    const bool nccl = cfg_.comm_backend == "nccl" || (cfg_.comm_backend == "auto" && !device_.is_cpu());
    group_ = nccl                         ? comm::init_nccl_world(cfg_.comm, device_.index)
             : comm::launched_by_mpi() ? comm::init_mpi_world(cfg_.comm)
                                       : comm::make_local_world(1, cfg_.comm)[0];
    rank_ = group_->rank();
    world_ = group_->size();
    if (rank_ != 0) {  // logs, metrics and checkpoints come from rank 0 only
      opts_.verbose = false;
      opts_.write_files = false;
      draw_bar_ = false;
    }
  }
  if (dp) {
    // run.threads is the process's budget, shared by the replica threads.
    int total = cfg_.run.threads > 0 ? cfg_.run.threads : int(std::thread::hardware_concurrency());
    set_num_threads(std::max(1, total / cfg_.parallel.replicas));
  } else {
    set_num_threads(cfg_.run.threads);
  }
  manual_seed(cfg_.run.seed);
  data_ = build_data(cfg_);
  Generator init_gen(cfg_.run.seed);
  model_ = build_model(cfg_, init_gen);
  if (!device_.is_cpu()) model_->to(device_);  // before the optimizer: its state follows the parameters
  // ZeRO builds its optimizer over this rank's slices after flattening (the plain one
  // would keep the unsharded parameters alive).
  if (!zero) {
    optimizer_ = build_optimizer(cfg_, *model_);
    params_ = model_->parameters();
  }

  const int64_t n = data_.train->size();
  if (cfg_.train.batch_size % world_ != 0)
    config_fail("train.batch_size", "is " + std::to_string(cfg_.train.batch_size) + " but must be divisible by the " +
                                        std::to_string(world_) + " ranks of parallel.mode ddp (the global batch is "
                                        "split evenly)");
  const int64_t bs = cfg_.train.batch_size / world_;  // per rank
  const int64_t n_local = (n + world_ - 1) / world_;  // DistributedSampler pads to a multiple of the world
  if (n_local < bs)
    config_fail("train.batch_size", "is " + std::to_string(cfg_.train.batch_size) + " but the training split has only " +
                                        std::to_string(n) + " samples");
  steps_per_epoch_ = std::max<int64_t>(1, (n_local / bs) / cfg_.train.grad_accum_steps);
  total_steps_ = cfg_.train.max_steps > 0 ? cfg_.train.max_steps : cfg_.train.epochs * steps_per_epoch_;
  schedule_ = build_schedule(cfg_, total_steps_);

  sampler_seed_ = cfg_.run.seed;
  data::LoaderState start;
  nlohmann::json replica_rngs;  // mode dp: the checkpoint's replica dropout streams
  std::optional<Checkpoint> zero_resume;  // loaded into the shards once they exist
  if (!cfg_.train.resume.empty()) {
    Checkpoint ck = read_checkpoint(cfg_.train.resume, true);
    const std::string state_file = (fs::path(ck.dir) / kStateFile).string();
    auto gens = model_->generators();
    if (gens.size() != ck.state.model_rngs.size())
      STRATA_THROW(DataError, "checkpoint state '", state_file, "': holds ", ck.state.model_rngs.size(),
                   " model RNG states but the model has ", gens.size(), " generators");
    if (ck.state.loader_batch > n_local / bs)
      STRATA_THROW(DataError, "checkpoint state '", state_file, "': loader position batch ", ck.state.loader_batch,
                   " is past the ", n_local / bs, " batches per epoch of this config (batch size changed?)");
    if (zero)
      zero_resume = ck;
    else
      load_into(ck, *model_, optimizer_.get());
    for (size_t i = 0; i < gens.size(); ++i) gens[i]->set_state(ck.state.model_rngs[i].first, ck.state.model_rngs[i].second);
    default_generator().set_state(ck.state.default_rng.first, ck.state.default_rng.second);
    sampler_seed_ = ck.state.sampler_seed;
    step_ = ck.state.step;
    start = {ck.state.loader_epoch, ck.state.loader_batch};
    last_checkpoint_step_ = step_;
    if (ck.state.extra.contains("dp_replica_rngs")) replica_rngs = ck.state.extra["dp_replica_rngs"];
    if (scaler_ && ck.state.extra.contains("grad_scaler")) {  // an f32/bf16 checkpoint starts a fresh scale
      try {
        scaler_->load_state_dict(ck.state.extra["grad_scaler"]);
      } catch (const Error& e) {
        STRATA_THROW(DataError, "checkpoint state '", state_file, "': grad_scaler: ", e.what());
      }
    }
    if (opts_.verbose) std::printf("resumed from %s at step %lld\n", ck.dir.c_str(), (long long)step_);
  }
  if (dp) {
    // Replicas k > 0 get the weights of replica 0 (model_) before every forward; their
    // own init is discarded, their dropout generators are seeded per replica.
    uint64_t next = 1;
    dp_ = std::make_shared<parallel::DataParallel>(
        model_,
        [&] {
          Generator g(replica_seed(cfg_.run.seed, next++));
          return build_model(cfg_, g);
        },
        cfg_.parallel.dp_options());
    // Resuming a dp checkpoint with the same replica count continues their streams too.
    if (replica_rngs.is_array() && replica_rngs.size() == size_t(dp_->replicas() - 1)) {
      for (int k = 1; k < dp_->replicas(); ++k) {
        auto gens = dp_->replica(k).generators();
        const auto& saved = replica_rngs[size_t(k - 1)];
        if (!saved.is_array() || saved.size() != gens.size()) continue;
        for (size_t i = 0; i < gens.size(); ++i)
          gens[i]->set_state(saved[i][0].get<uint64_t>(), saved[i][1].get<uint64_t>());
      }
    }
  }
  if (ddp) {
    sampler_ = std::make_shared<data::DistributedSampler>(
        n, data::DistributedSamplerOptions{.num_replicas = world_, .rank = rank_, .seed = sampler_seed_});
    if (zero) {
      const parallel::ZeroOptions zo{.stage = cfg_.parallel.zero_stage,
                                     .bucket_cap_mb = cfg_.parallel.ddp.bucket_cap_mb,
                                     .prefetch = cfg_.parallel.fsdp_prefetch,
                                     .broadcast_buffers = cfg_.parallel.ddp.broadcast_buffers,
                                     .wrap = {}};
      zero_ = parallel::apply_zero(model_, *group_, zo,
                                   [&](optim::NamedTensors p) { return build_optimizer(cfg_, std::move(p)); });
      if (zero_resume) {  // any checkpoint (plain or sharded, any world size / stage), read whole
        std::map<std::string, const Tensor*> by_name;
        for (const auto& [n, t] : zero_resume->model) by_name[n] = &t;
        for (const auto& [n, t] : zero_resume->optimizer) by_name[n] = &t;
        const std::string where = zero_resume->dir;
        zero_->load_state(
            [&](const std::string& name, int64_t b, int64_t e) {
              auto it = by_name.find(name);
              if (it == by_name.end())
                STRATA_THROW(DataError, "checkpoint '", where, "': tensor '", name, "' is missing");
              STRATA_CHECK(e <= it->second->numel(), "[resume] checkpoint '", where, "': tensor '", name, "' has ",
                           it->second->numel(), " elements, the model needs ", e);
              return ops::narrow(ops::flatten(*it->second), 0, b, e - b);
            },
            &zero_resume->state.optimizer);
      }
    } else {
      ddp_ = parallel::apply_ddp(model_, *group_, cfg_.parallel.ddp);  // broadcasts rank 0's weights
    }
  } else {
    sampler_ = std::make_shared<data::RandomSampler>(n, sampler_seed_);
  }
  loader_ = std::make_unique<data::DataLoader>(
      data_.train, sampler_, data::DataLoaderOptions{.batch_size = bs, .drop_last = true, .prefetch = cfg_.data.prefetch},
      start);

  if (opts_.write_files) {
    std::error_code ec;
    fs::create_directories(cfg_.run.dir, ec);
    if (ec) STRATA_THROW(DataError, "cannot create run directory '", cfg_.run.dir, "': ", ec.message());
    const std::string path = (fs::path(cfg_.run.dir) / "metrics.jsonl").string();
    metrics_.open(path, cfg_.train.resume.empty() ? std::ios::trunc : std::ios::app);
    if (!metrics_) STRATA_THROW(DataError, "cannot open '", path, "' for writing");
  }
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
  const double lr = lr_at(step_);
  opt().set_lr(lr);
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
    // DDP: the first accum-1 micro-batches only accumulate locally (no_sync); the last
    // one's backward all-reduces the accumulated sum and finalize() averages it.
    std::optional<parallel::NoSyncGuard> no_sync;
    std::optional<parallel::ZeroNoSyncGuard> zero_no_sync;
    if (ddp_ && a + 1 < accum) no_sync.emplace(ddp_->no_sync());
    if (zero_ && a + 1 < accum) zero_no_sync.emplace(zero_->no_sync());
    Tensor loss;
    {
      AutocastGuard amp(autocast_);  // forward and loss only; backward runs in the ops' own dtypes
      loss = ddp_    ? ddp_->forward_with([&] { return batch_loss(*model_, cfg_, b); })
             : zero_ ? zero_->forward_with([&] { return batch_loss(*model_, cfg_, b); })
             : dp_   ? dp_loss(b)
                     : batch_loss(*model_, cfg_, b);
    }
    const double lv = loss.item<double>();
    if (!std::isfinite(lv))
      STRATA_THROW(Error, "training diverged at step ", step_ + 1, ": loss is ", lv,
                   " (lower optim.lr or set train.grad_clip)");
    if (accum > 1) loss = loss * (1.0 / double(accum));
    backward(scaler_ ? scaler_->scale(loss) : loss);
    if (ddp_) ddp_->finalize();  // no-op inside no_sync
    if (zero_) zero_->finalize();
    sum += lv;
  }
  if (zero_) {
    if (cfg_.train.grad_clip > 0) zero_->clip_grad_norm(cfg_.train.grad_clip);  // global norm
    zero_->step();
    zero_->zero_grad();
    ++step_;
    return sum / double(accum);
  }
  if (scaler_) scaler_->unscale_(*optimizer_);  // clipping sees the true gradients
  const bool finite = !scaler_ || scaler_->non_finite(*optimizer_).empty();
  if (cfg_.train.grad_clip > 0 && finite) optim::clip_grad_norm(params_, cfg_.train.grad_clip);
  if (scaler_) {
    scaler_->step(*optimizer_);  // skipped, with a warning naming the parameters, unless finite
    scaler_->update();
  } else {
    optimizer_->step();
  }
  if (ddp_)
    ddp_->zero_grad();
  else
    optimizer_->zero_grad();
  ++step_;
  if (dp_) last_dp_memory_ = dp_->memory_report();  // a copy of K small records; optimizer added when printed
  return sum / double(accum);
}

data::Batch Trainer::on_device(data::Batch b) const {
  if (!device_.is_cpu()) {
    b.input = b.input.to(device_);
    b.target = b.target.to(device_);
  }
  return b;
}

Tensor Trainer::dp_loss(const data::Batch& batch) {
  Tensor out = dp_->forward(batch.input);  // classifier (B, classes) | GPT (B, T, vocab)
  if (data_.tokens)  // as GPT::loss: mean next-token cross-entropy over B*T positions
    return cross_entropy(reshape(out, {-1, out.size(out.dim() - 1)}), ops::reshape(batch.target, {-1}), -1);
  return cross_entropy(out, batch.target);
}

EvalResult Trainer::evaluate() {
  NoGradGuard no_grad;
  model_->eval();
  const int64_t bs = std::max<int64_t>(cfg_.train.batch_size, data_.tokens ? 64 : 256);
  auto sampler = std::make_shared<data::SequentialSampler>(data_.eval->size());
  data::DataLoader loader(data_.eval, sampler, {.batch_size = bs, .drop_last = false, .prefetch = cfg_.data.prefetch});
  EvalResult r;
  double loss_sum = 0.0;
  int64_t correct = 0, batches = 0;
  AutocastGuard amp(autocast_);
  while (auto next = loader.next()) {
    const Tensor target = next->target;  // on the CPU
    const data::Batch b = on_device(std::move(*next));
    const int64_t n = b.size();
    if (data_.tokens) {
      loss_sum += (dp_ ? dp_loss(b) : batch_loss(*model_, cfg_, b)).item<double>() * double(n);
    } else {
      Tensor logits = dp_ ? dp_->forward(b.input) : model_->forward(b.input);
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
  r.loss = r.samples > 0 ? loss_sum / double(r.samples) : 0.0;
  if (!data_.tokens) r.accuracy = r.samples > 0 ? double(correct) / double(r.samples) : 0.0;
  return r;
}

TrainingState Trainer::capture_state() const {
  TrainingState st;
  st.step = step_;
  st.loader_epoch = loader_->state().epoch;
  st.loader_batch = loader_->state().batch;
  st.default_rng = {default_generator().seed(), default_generator().offset()};
  for (Generator* g : model_->generators()) st.model_rngs.emplace_back(g->seed(), g->offset());
  st.sampler_seed = sampler_seed_;
  st.config_yaml = cfg_.yaml;
  st.extra = {{"model_type", cfg_.model.type}, {"dataset", cfg_.data.dataset}};
  if (scaler_) st.extra["grad_scaler"] = scaler_->state_dict();
  if (dp_) {  // the other replicas' dropout streams; a single-process resume ignores them
    nlohmann::json reps = nlohmann::json::array();
    for (int k = 1; k < dp_->replicas(); ++k) {
      nlohmann::json gens = nlohmann::json::array();
      for (Generator* g : dp_->replica(k).generators()) gens.push_back({g->seed(), g->offset()});
      reps.push_back(gens);
    }
    st.extra["dp_replica_rngs"] = reps;
  }
  return st;
}

void Trainer::save(const std::string& dir) {
  const TrainingState st = capture_state();
  if (zero_) {  // collective: every rank writes its slices
    std::vector<std::string> names;
    for (const auto& [n, t] : model_->state_dict()) names.push_back(n);
    save_sharded_checkpoint(dir, *group_, zero_->state_pieces(), cfg_.parallel.zero_stage, names,
                            zero_->optimizer().state_dict().scalars, st);
    return;
  }
  save_checkpoint(dir, model_->state_dict(), optimizer_->state_dict(), st);
}

EvalResult Trainer::evaluate_collective() {
  std::optional<parallel::ZeroDataParallel::FullParams> full;
  if (zero_) full.emplace(zero_->summon_full_params());
  return rank_ == 0 ? evaluate() : EvalResult{};
}

void Trainer::write_metrics(const nlohmann::json& j) {
  if (!metrics_.is_open()) return;
  metrics_ << j.dump() << '\n';
  metrics_.flush();
}

void Trainer::log_step(double loss, double lr) {
  const double dt = seconds_since(window_start_);
  const double throughput = dt > 0 ? double(window_steps_ * units_per_step()) / dt : 0.0;
  const double bpe = double(loader_->batches_per_epoch());
  const double epoch = double(loader_->state().epoch) + (bpe > 0 ? double(loader_->state().batch) / bpe : 0.0);
  nlohmann::json j = {{"type", "train"},
                      {"step", step_},
                      {"epoch", epoch},
                      {"loss", loss},
                      {"lr", lr},
                      {"throughput", throughput},
                      {"throughput_unit", throughput_unit()},
                      {"elapsed_s", seconds_since(run_start_)}};
  if (scaler_) {
    j["loss_scale"] = scaler_->get_scale();
    j["skipped_steps"] = scaler_->skipped_steps();
  }
  write_metrics(j);
  if (opts_.verbose && !draw_bar_) {
    const int64_t done = step_ - run_start_step_;
    const double eta = done > 0 ? seconds_since(run_start_) / double(done) * double(total_steps_ - step_) : NAN;
    std::printf("step %lld/%lld | epoch %.2f | loss %.4f | lr %.3e | %s %s | eta %s\n", (long long)step_,
                (long long)total_steps_, epoch, loss, lr, fmt_count(throughput).c_str(), throughput_unit(),
                fmt_duration(eta).c_str());
    std::fflush(stdout);
  }
}

void Trainer::log_eval(const EvalResult& r) {
  nlohmann::json j = {{"type", "eval"}, {"step", step_}, {"split", data_.eval_split}, {"loss", r.loss},
                      {"samples", r.samples}};
  if (r.accuracy) j["accuracy"] = *r.accuracy;
  if (data_.bigram_entropy) j["bigram_entropy"] = *data_.bigram_entropy;
  write_metrics(j);
  if (!opts_.verbose) return;
  if (bar_open_) {
    std::printf("\r\033[K");
    bar_open_ = false;
  }
  if (r.accuracy)
    std::printf("eval step %lld: %s accuracy %.4f, %s loss %.4f\n", (long long)step_, data_.eval_split.c_str(),
                *r.accuracy, data_.eval_split.c_str(), r.loss);
  else if (data_.bigram_entropy)
    std::printf("eval step %lld: %s loss %.4f (bigram entropy %.4f)\n", (long long)step_, data_.eval_split.c_str(),
                r.loss, *data_.bigram_entropy);
  else
    std::printf("eval step %lld: %s loss %.4f\n", (long long)step_, data_.eval_split.c_str(), r.loss);
  std::fflush(stdout);
}

void Trainer::maybe_checkpoint(bool final) {
  (void)final;
  // ZeRO checkpoints are written by every rank (rank 0 renames the directory into place).
  const bool collective = zero_ != nullptr && write_files_any_rank_;
  if ((!opts_.write_files && !collective) || last_checkpoint_step_ == step_) return;
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
  if (opts_.verbose) {
    if (bar_open_) {
      std::printf("\r\033[K");
      bar_open_ = false;
    }
    std::printf("checkpoint: %s\n", (root / name).string().c_str());
    std::fflush(stdout);
  }
}

EvalResult Trainer::train() {
  if (opts_.verbose) {
    std::printf("model: %s, %lld parameters | data: %s (%lld train / %lld %s samples) | optim: %s lr %g | "
                "steps: %lld (%lld per epoch) | threads: %d\n",
                cfg_.model.type.c_str(), (long long)model_->num_parameters(), cfg_.data.dataset.c_str(),
                (long long)data_.train->size(), (long long)data_.eval->size(), data_.eval_split.c_str(),
                cfg_.optim.name.c_str(), cfg_.optim.lr, (long long)total_steps_, (long long)steps_per_epoch_,
                get_num_threads());
    if (!device_.is_cpu() || autocast_)
      std::printf("device: %s | precision: %s%s\n", device_.str().c_str(), cfg_.run.precision.c_str(),
                  scaler_ ? " (autocast, dynamic loss scaling)" : autocast_ ? " (autocast)" : "");
    if (group_)
      std::printf("ddp: %d rank(s) (%s backend, comm.algorithm %s), %lld samples per rank per step\n", world_,
                  group_->backend_kind(), comm::algorithm_name(group_->algorithm()),
                  (long long)(cfg_.train.batch_size / world_));
    if (dp_)
      std::printf("dp: %d replicas (threads in this process) x %d intra-op thread(s), about %lld samples per "
                  "replica per micro-batch\n",
                  dp_->replicas(), get_num_threads(),
                  (long long)((cfg_.train.batch_size + dp_->replicas() - 1) / dp_->replicas()));
    if (data_.bigram_entropy)
      std::printf("%s split baselines: bigram entropy %.4f nats/token, unigram %.4f\n", data_.eval_split.c_str(),
                  *data_.bigram_entropy, *data_.unigram_entropy);
    std::fflush(stdout);
  }
  run_start_ = window_start_ = last_draw_ = Clock::now();
  run_start_step_ = step_;
  window_loss_ = 0.0;
  window_steps_ = 0;
  while (step_ < total_steps_) {
    const double lr = lr_at(step_);
    const double loss = step();
    window_loss_ += loss;
    ++window_steps_;
    ema_loss_ = (step_ - run_start_step_ == 1) ? loss : 0.95 * ema_loss_ + 0.05 * loss;
    if (step_ % cfg_.train.log_every == 0 || step_ == total_steps_) {
      double mean = window_loss_ / double(window_steps_);
      if (world_ > 1) {  // every rank logs at the same steps: average the window over the world
        const Tensor t = ops::from_vector(std::vector<double>{mean}, {1});
        mean = comm::all_reduce_host(*group_, t, comm::ReduceOp::sum).item<double>() / double(world_);
      }
      log_step(mean, lr);
      window_loss_ = 0.0;
      window_steps_ = 0;
      window_start_ = Clock::now();
    }
    if (draw_bar_ && (seconds_since(last_draw_) > 0.1 || step_ == total_steps_)) {
      last_draw_ = Clock::now();
      const int64_t done = step_ - run_start_step_;
      const double elapsed = seconds_since(run_start_);
      const double rate = elapsed > 0 ? double(done * units_per_step()) / elapsed : 0.0;
      const double eta = elapsed / double(done) * double(total_steps_ - step_);
      constexpr int kWidth = 24;
      const int fill = int(double(kWidth) * double(step_) / double(std::max<int64_t>(1, total_steps_)));
      std::string bar(size_t(fill), '=');
      if (fill < kWidth) bar += '>' + std::string(size_t(kWidth - fill - 1), ' ');
      std::printf("\r[%s] step %lld/%lld | epoch %lld | loss %.4f | lr %.2e | %s %s | eta %s\033[K", bar.c_str(),
                  (long long)step_, (long long)total_steps_, (long long)loader_->epoch(), ema_loss_, lr,
                  fmt_count(rate).c_str(), throughput_unit(), fmt_duration(eta).c_str());
      std::fflush(stdout);
      bar_open_ = true;
    }
    if (cfg_.train.eval_every > 0 && step_ % cfg_.train.eval_every == 0 && step_ < total_steps_) {
      const EvalResult r = evaluate_collective();
      if (rank_ == 0) log_eval(r);
      window_start_ = Clock::now();
    }
    if (cfg_.train.checkpoint_every > 0 && step_ % cfg_.train.checkpoint_every == 0) maybe_checkpoint(false);
  }
  if (bar_open_) {
    std::printf("\n");
    bar_open_ = false;
  }
  if (cfg_.train.save_final) maybe_checkpoint(true);
  const EvalResult r = evaluate_collective();  // rank 0 evaluates
  if (rank_ != 0) return {};
  log_eval(r);
  if (opts_.verbose) {
    if (r.accuracy) std::printf("final %s accuracy: %.4f\n", data_.eval_split.c_str(), *r.accuracy);
    if (data_.bigram_entropy)
      std::printf("final %s loss: %.4f (bigram entropy: %.4f)\n", data_.eval_split.c_str(), r.loss,
                  *data_.bigram_entropy);
    else
      std::printf("final %s loss: %.4f\n", data_.eval_split.c_str(), r.loss);
    std::printf("time: %s\n", fmt_duration(seconds_since(run_start_)).c_str());
    std::printf("%s", memory_report().c_str());
    std::fflush(stdout);
  }
  return r;
}

parallel::MemoryPlan Trainer::predicted_memory() const {
  // DDP holds bucket buffers; none and dp hold one copy of each category (dp's other
  // replicas are extra, shown by its per-replica table).
  parallel::MemoryPlanInput in = memory_plan_input(cfg_, *model_, world_, zero_ ? cfg_.parallel.zero_stage : 0,
                                                   /*ddp_buckets=*/ddp_ != nullptr);
  if (zero_)
    for (const auto& u : zero_->units()) in.flat_units.push_back(u.numel);
  return parallel::plan_memory(in);
}

std::string Trainer::memory_report() const {
  const char* layout = zero_ ? "ZeRO" : ddp_ ? "DDP" : dp_ ? "DataParallel" : "single process";
  char heading[256];
  std::snprintf(heading, sizeof heading,
                "memory (rank %d): allocator bytes vs plan for %s at %d rank(s), zero_stage %d, Ψ = %lld%s", rank_,
                layout, world_, zero_ ? cfg_.parallel.zero_stage : 0, (long long)model_->num_parameters(),
                dp_ ? " (measured includes every replica)" : "");
  std::string s = format_memory_report(predicted_memory(), device_memory(device_), model_->num_parameters(), heading);
  if (dp_ && !last_dp_memory_.empty()) {
    std::vector<parallel::ReplicaMemory> m = last_dp_memory_;
    for (const auto& [name, t] : optimizer_->state_dict().tensors) m[0].optimizer += t.nbytes();
    s += "dp: bytes per replica in the last training step\n" + parallel::DataParallel::format_memory(m);
  }
  return s;
}

}  // namespace strata::apps
