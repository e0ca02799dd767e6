// `strata bench attn` (the GPT's causal attention core, forward and backward, over
// sequence lengths) and `strata bench optim` (the optimizer step and the global-norm clip
// of a config's model): each kernel alone, so a step's time can be split into what its
// parts reach against the device's peak. scripts/gpu_check.sh runs both on a GPU.
#include "apps/bench_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "apps/bench_gemm.h"
#include "apps/config.h"
#include "apps/factory.h"
#include "apps/flops.h"
#include "apps/world.h"
#include <strata/autograd/autocast.h>
#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/core/threads.h>
#include <strata/optim/clip.h>
#include <strata/tensor/ops.h>
#ifdef STRATA_WITH_CUDA
#include <strata/tensor/cuda/runtime.h>
#endif

namespace strata::apps {
namespace bench_detail {

double causal_attention_flops(int64_t b, int64_t h, int64_t t, int64_t hd, bool fwd_and_bwd) {
  // q k^T and p v: 2 GEMMs of 2·T·T·hd per (batch, head), half of them masked
  const double fwd = 2.0 * 2.0 * double(b) * double(h) * double(t) * double(t) * double(hd) / 2.0;
  return fwd_and_bwd ? 3.5 * fwd : fwd;
}

namespace {
bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }
}  // namespace

double gpu_peak_tflops(const std::string& gpu_name, const std::string& dtype) {
  const bool hopper = contains(gpu_name, "H100") || contains(gpu_name, "H200");
  const bool ampere = contains(gpu_name, "A100");
  if (dtype == "bf16" || dtype == "f16") return hopper ? 989.0 : ampere ? 312.0 : 0.0;
  if (dtype == "f32") return hopper ? 67.0 : ampere ? 19.5 : 0.0;
  return 0.0;
}

double gpu_peak_gbs(const std::string& gpu_name) {
  if (contains(gpu_name, "H200")) return 4800.0;
  if (contains(gpu_name, "H100")) return 3350.0;
  if (contains(gpu_name, "A100")) return 2039.0;
  return 0.0;
}

int64_t optimizer_bytes_per_param(const std::string& optimizer, bool momentum, int64_t element_bytes) {
  if (optimizer == "sgd") return (momentum ? 5 : 3) * element_bytes;
  return 7 * element_bytes;  // adam, adamw
}

}  // namespace bench_detail

namespace {

using namespace bench_detail;

struct AttnArgs {
  std::vector<int64_t> seqs{1024, 2048, 4096, 8192};
  int64_t heads = 12, head_dim = 64, batch = 0, tokens = 16384;
  std::string device = "cpu", dtype = "f32";
  int iters = 10, warmup = 2, threads = 0;
  double peak_tflops = 0;
};

struct OptimArgs {
  std::string config = "configs/gpt2_124m.yaml";
  std::vector<std::string> sets;
  std::string device = "cpu", optimizer;  ///< empty: the config's optim.name
  int iters = 20, warmup = 3, threads = 0;
  double peak_gbs = 0;
};

/// Blocks until the work queued on `d` has finished (a no-op on the CPU, whose ops return
/// when done), so a wall clock read after it covers the GPU's time.
void synchronize(Device d) {
#ifdef STRATA_WITH_CUDA
  if (!d.is_cpu()) cuda::synchronize(d.index);
#else
  (void)d;
#endif
}

/// `device` parsed and checked to exist; the GPU's name ("" on the CPU).
std::pair<Device, std::string> open_device(const std::string& device, const char* op) {
  const Device d = parse_device(device);
  if (d.is_cpu()) return {d, ""};
#ifdef STRATA_WITH_CUDA
  cuda::check_device(d.index, op);
  return {d, cuda::device_properties(d.index).name};
#else
  STRATA_THROW(ConfigError, "[", op, "] --device ", device, ": this strata was built without CUDA (-DSTRATA_CUDA=ON)");
#endif
}

/// Median seconds of `iters` calls of f after `warmup`, the device synchronised around each.
template <class F>
double median_seconds(Device d, int warmup, int iters, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  synchronize(d);
  const std::vector<double> t = time_runs(iters, [&] {
    f();
    synchronize(d);
  });
  return t[t.size() / 2];
}

int bench_attn(const AttnArgs& a) {
  if (a.threads > 0) set_num_threads(a.threads);
  const auto [dev, gpu] = open_device(a.device, "bench attn");
  std::optional<DType> autocast;
  if (a.dtype != "f32") autocast = parse_dtype(a.dtype);
  double peak = a.peak_tflops * 1e12;
  std::string peak_what = "--peak-tflops";
  if (peak == 0 && !gpu.empty()) {
    peak = gpu_peak_tflops(gpu, a.dtype) * 1e12;
    peak_what = gpu + (a.dtype == "f32" ? " FP32 (no tensor cores)" : " dense " + a.dtype);
  } else if (peak == 0) {
    peak = measured_gemm_flops();
    peak_what = "this CPU's f32 1024^3 GEMM, measured";
  }
  std::printf("attention alone (the GPT's causal core, forward + backward): %s%s%s, %s (%s), %lld heads x %lld, "
              "median of %d after %d warm-up\n",
              dev.str().c_str(), gpu.empty() ? "" : " ", gpu.c_str(), a.dtype.c_str(),
              autocast ? "causal_attention under autocast (a 16-bit op)" : "fused causal_attention",
              (long long)a.heads, (long long)a.head_dim, a.iters, a.warmup);
  char peak_text[256] = "unknown (give --peak-tflops)";
  if (peak > 0) std::snprintf(peak_text, sizeof peak_text, "%.3g TFLOP/s (%s)", peak / 1e12, peak_what.c_str());
  std::printf("FLOPs as FlashAttention counts causal attention: fwd 4*B*H*T^2*hd/2, bwd 2.5x fwd; peak %s\n",
              peak_text);
  std::printf("| T | B | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s | %% of peak | fwd+bwd FLOP |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  const int64_t c = a.heads * a.head_dim;
  for (const int64_t t : a.seqs) {
    const int64_t b = a.batch > 0 ? a.batch : std::max<int64_t>(1, a.tokens / t);
    Generator gen(0);
    Tensor qkv = ops::normal({b, t, 3 * c}, 0, 1, gen).to(dev);
    qkv.set_requires_grad(true);
    const Tensor dy = ops::normal({b, t, c}, 0, 1, gen).to(dev);
    const auto forward = [&] {  // the GPT's attention core without dropout (nn::CausalSelfAttention::core)
      AutocastGuard guard(autocast);
      return causal_attention(qkv, a.head_dim);
    };
    const double fwd = median_seconds(dev, a.warmup, a.iters, [&] { (void)forward(); });
    const double both = median_seconds(dev, a.warmup, a.iters, [&] {
      qkv.set_grad(Tensor());
      backward(forward(), dy);
    });
    const double fwd_flops = causal_attention_flops(b, a.heads, t, a.head_dim, false);
    const double all_flops = causal_attention_flops(b, a.heads, t, a.head_dim, true);
    char pct[32] = "-";
    if (peak > 0) std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * all_flops / both / peak);
    std::printf("| %lld | %lld | %.3f | %.2f | %.3f | %.2f | %s | %.0f |\n", (long long)t, (long long)b, fwd * 1e3,
                fwd_flops / fwd / 1e12, both * 1e3, all_flops / both / 1e12, pct, all_flops);
    std::fflush(stdout);
  }
  return 0;
}

int bench_optim(const OptimArgs& a) {
  if (a.threads > 0) set_num_threads(a.threads);
  std::vector<std::string> sets = a.sets;
  sets.push_back("run.device=" + a.device);
  TrainConfig cfg = TrainConfig::load(a.config, sets);
  // after loading: the config's optim section may hold keys only its own optimizer reads
  if (!a.optimizer.empty()) cfg.optim.name = a.optimizer;
  const std::string& name = cfg.optim.name;
  const bool momentum = cfg.optim.momentum != 0;
  const auto [dev, gpu] = open_device(a.device, "bench optim");
  (void)resolve_device(cfg.run);
  Generator gen(cfg.run.seed);
  std::shared_ptr<nn::Module> model = build_model(cfg, gen);
  model->to(dev);
  std::vector<Tensor> params;
  int64_t n = 0;
  for (auto& [pname, p] : model->named_parameters()) {
    if (p.dtype() != DType::f32)
      STRATA_THROW(ConfigError, "[bench optim] parameter ", pname, " is ", dtype_name(p.dtype()),
                   "; the byte counts assume f32 parameters (drop run.precision bf16_params/f16_params)");
    p.set_grad(ops::normal(p.shape(), 0, 1e-3, gen).to(dev));
    params.push_back(p);
    n += p.numel();
  }
  std::unique_ptr<optim::Optimizer> opt = build_optimizer(cfg, *model);

  const int64_t step_bytes = n * optimizer_bytes_per_param(name, momentum, 4);
  const int64_t norm_bytes = n * 4, scale_bytes = n * 8;
  const double step_s = median_seconds(dev, a.warmup, a.iters, [&] { opt->step(); });
  const double norm_s = median_seconds(dev, a.warmup, a.iters, [&] { (void)optim::grad_norm_sq(params); });
  // factor 1: the same traffic as a scaling clip without shrinking the gradients run after run
  const double scale_s = median_seconds(dev, a.warmup, a.iters, [&] { optim::scale_grads(params, 1.0); });
  const double all_s = median_seconds(dev, a.warmup, a.iters, [&] {
    (void)std::sqrt(optim::grad_norm_sq(params));
    optim::scale_grads(params, 1.0);
    opt->step();
  });

  const std::string clip_note =
      cfg.train.grad_clip > 0
          ? detail::str_cat("the trainer scales when the norm exceeds train.grad_clip ", cfg.train.grad_clip)
          : "train.grad_clip is 0: this config's trainer does not clip";
  double peak = a.peak_gbs * 1e9;
  std::string peak_what = "--peak-gbs";
  if (peak == 0 && !gpu.empty()) {
    peak = gpu_peak_gbs(gpu) * 1e9;
    peak_what = gpu + " HBM";
  }
  char peak_text[256] = "unknown (give --peak-gbs)";
  if (peak > 0) std::snprintf(peak_text, sizeof peak_text, "%.0f GB/s (%s)", peak / 1e9, peak_what.c_str());
  std::printf("optimizer alone: %s on %s%s%s, %s (%s, %lld parameters in %zu tensors, f32), %d threads; median of %d "
              "after %d warm-up\n",
              opt->type_name().c_str(), dev.str().c_str(), gpu.empty() ? "" : " ", gpu.c_str(), a.config.c_str(),
              cfg.model.type.c_str(), (long long)n, params.size(), get_num_threads(), a.iters, a.warmup);
  std::printf("bytes counted (each tensor read or written once): step %lld B/param (%s), clip norm 4 B/param (read "
              "grad), clip scale 8 B/param (read, write grad; %s); peak %s\n",
              (long long)optimizer_bytes_per_param(name, momentum, 4),
              name == "sgd" ? (momentum ? "read param, grad, buffer; write param, buffer"
                                                              : "read param, grad; write param")
                                   : "read param, grad, exp_avg, exp_avg_sq; write param, exp_avg, exp_avg_sq",
              clip_note.c_str(),
              peak_text);
  std::printf("| phase | ms | bytes | GB/s | %% of peak |\n|---|---|---|---|---|\n");
  const auto row = [&](const char* what, double s, int64_t bytes) {
    char pct[32] = "-";
    if (peak > 0) std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * double(bytes) / s / peak);
    std::printf("| %s | %.3f | %lld | %.1f | %s |\n", what, s * 1e3, (long long)bytes, double(bytes) / s / 1e9, pct);
  };
  row("step", step_s, step_bytes);
  row("clip norm", norm_s, norm_bytes);
  row("clip scale", scale_s, scale_bytes);
  row("clip + step", all_s, step_bytes + norm_bytes + scale_bytes);
  return 0;
}

}  // namespace

std::function<std::optional<int>()> add_bench_kernel_commands(CLI::App& bench) {
  auto at = std::make_shared<AttnArgs>();
  CLI::App* attn = bench.add_subcommand(
      "attn", "Causal attention alone (the GPT's core), forward + backward TFLOP/s over sequence lengths");
  attn->add_option("--seq", at->seqs, "Sequence lengths T (e.g. --seq 1024,2048)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  attn->add_option("--heads", at->heads, "Heads H")->check(CLI::PositiveNumber);
  attn->add_option("--head-dim", at->head_dim, "Head width hd")->check(CLI::PositiveNumber);
  attn->add_option("--batch", at->batch, "Sequences per call (0: --tokens / T, at least 1)")
      ->check(CLI::NonNegativeNumber);
  attn->add_option("--tokens", at->tokens, "Tokens per call where --batch is 0")->check(CLI::PositiveNumber);
  attn->add_option("--device", at->device, "cpu, cuda or cuda:N");
  attn->add_option("--dtype", at->dtype, "f32 (the fused op) or bf16/f16 (autocast, as run.precision)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  attn->add_option("--iters", at->iters, "Timed calls (the median is printed)")->check(CLI::PositiveNumber);
  attn->add_option("--warmup", at->warmup, "Untimed calls first")->check(CLI::NonNegativeNumber);
  attn->add_option("--threads", at->threads, "CPU threads (0: the default)")->check(CLI::NonNegativeNumber);
  attn->add_option("--peak-tflops", at->peak_tflops,
                   "Peak for the % column (0: by GPU name, H100/H200 989 and A100 312 dense bf16; the CPU's "
                   "measured GEMM)")
      ->check(CLI::NonNegativeNumber);

  auto op = std::make_shared<OptimArgs>();
  CLI::App* optim = bench.add_subcommand(
      "optim", "Optimizer step and global-norm clip alone over a config's parameters: ms and GB/s");
  optim->add_option("-c,--config", op->config, "YAML config whose model's parameters are stepped");
  optim->add_option("--set", op->sets, "Override a config key (repeatable)")->type_name("KEY=VALUE");
  optim->add_option("--device", op->device, "cpu, cuda or cuda:N");
  optim->add_option("--optimizer", op->optimizer, "adamw, adam or sgd with the config's optim.* settings (default: optim.name)")
      ->check(CLI::IsMember({"adamw", "adam", "sgd"}));
  optim->add_option("--iters", op->iters, "Timed steps (the median is printed)")->check(CLI::PositiveNumber);
  optim->add_option("--warmup", op->warmup, "Untimed steps first (the first makes the state)")
      ->check(CLI::PositiveNumber);
  optim->add_option("--threads", op->threads, "CPU threads (0: the default)")->check(CLI::NonNegativeNumber);
  optim->add_option("--peak-gbs", op->peak_gbs,
                    "Memory bandwidth for the % column (0: by GPU name, H200 4800, H100 3350, A100 2039)")
      ->check(CLI::NonNegativeNumber);

  return [attn, at, optim, op]() -> std::optional<int> {
    if (attn->parsed()) return bench_attn(*at);
    if (optim->parsed()) return bench_optim(*op);
    return std::nullopt;
  };
}

}  // namespace strata::apps
