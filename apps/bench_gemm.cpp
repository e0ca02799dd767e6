// The GEMM benchmarks and the per-kernel step profile (apps/bench_gemm.h).
#include "apps/bench_gemm.h"

#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <tuple>

#include "apps/flops.h"
#include "apps/trainer.h"
#include <strata/core/threads.h>
#include <strata/tensor/cpu/gemm.h>
#include <strata/tensor/cpu/gemm_backends.h>
#include <strata/tensor/cpu/op_profile.h>
#include <strata/tensor/ops.h>

namespace strata::apps::bench_detail {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// The f32 GEMM library cpu::gemm would pick for this call (cblas_sgemm unless the rule of
// cpu::gemm_backends routes the shape elsewhere), called directly: ops::matmul against it
// is the wrapper's own cost.
void library_sgemm(const cpu::gemm_backends::Sgemm& g) {
  namespace gb = cpu::gemm_backends;
  const int threads = get_num_threads();
  const gb::Backend b = gb::forced().value_or(gb::choose(g, threads));
  if (!gb::run(b, g, threads)) gb::run(gb::Backend::openblas, g, threads);
}

// The name of the library library_sgemm calls for an (m, n, k) NN GEMM at this thread count.
std::string library_name(int64_t m, int64_t n, int64_t k) {
  namespace gb = cpu::gemm_backends;
  const gb::Sgemm g{m, n, k, 1.0f, nullptr, k, false, nullptr, n, false, 0.0f, nullptr, n};
  return gb::name(gb::forced().value_or(gb::choose(g, get_num_threads())));
}

int bench_gemm(int64_t n, int repeat, int threads) {
  set_num_threads(threads);
  Generator gen(0);
  const Tensor a = ops::uniform({n, n}, -1, 1, gen);
  const Tensor b = ops::uniform({n, n}, -1, 1, gen);
  Tensor c = ops::zeros({n, n});
  const double flops = 2.0 * double(n) * double(n) * double(n);
  auto direct = [&] {
    library_sgemm({n, n, n, 1.0f, a.data<float>(), n, false, b.data<float>(), n, false, 0.0f, c.data<float>(), n});
  };
  // Warm-up: thread pool start, page faults.
  for (int i = 0; i < 2; ++i) {
    (void)ops::matmul(a, b);
    direct();
  }
  // Interleaved, so machine noise hits both alike.
  std::vector<double> t_ops, t_blas;
  long faults = 0;
  for (int r = 0; r < repeat; ++r) {
    const long f0 = minor_faults();
    t_ops.push_back(time_runs(1, [&] { (void)ops::matmul(a, b); }).front());
    faults += minor_faults() - f0;
    t_blas.push_back(time_runs(1, direct).front());
  }
  std::sort(t_ops.begin(), t_ops.end());
  std::sort(t_blas.begin(), t_blas.end());
  auto report = [&](const char* name, const std::vector<double>& t) {
    std::printf("%-12s %lld^3  median %8.2f GFLOP/s  best %8.2f GFLOP/s  (%.3f ms)\n", name, (long long)n,
                flops / t[t.size() / 2] / 1e9, flops / t.front() / 1e9, t[t.size() / 2] * 1e3);
  };
  std::printf("gemm f32, %d threads, %d runs\n", get_num_threads(), repeat);
  report("ops::matmul", t_ops);
  report("library", t_blas);
  std::printf("ops::matmul / library (%s, called directly): %.3f  (ops::matmul: %.1f minor page faults per call)\n",
              library_name(n, n, n).c_str(),
              t_blas[t_blas.size() / 2] / t_ops[t_ops.size() / 2], double(faults) / repeat);
  return 0;
}

// ---------------------------------------------------------------- bench gemm --shapes model

// One GEMM as the kernels call it: C(m,n) = op(A) op(B) (+ C when accumulate), with the
// operands' leading dimensions (the attention reads q, k, v from the packed projection).
struct GemmShape {
  int64_t m, n, k, lda, ldb;
  bool ta, tb, accumulate;
  auto key() const { return std::tie(m, n, k, lda, ldb, ta, tb, accumulate); }
  bool operator<(const GemmShape& o) const { return key() < o.key(); }
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

std::mutex g_shapes_mu;
std::map<GemmShape, int64_t>* g_shapes = nullptr;  // calls per shape while recording

void record_gemm(DType dt, int64_t m, int64_t n, int64_t k, cpu::MatRef a, cpu::MatRef b, double beta) {
  if (dt != DType::f32) return;
  std::lock_guard<std::mutex> lock(g_shapes_mu);
  if (g_shapes) ++(*g_shapes)[{m, n, k, a.ld, b.ld, a.trans, b.trans, beta != 0.0}];
}

// The f32 GEMMs of one training step of the config (after one untimed step), at the given
// thread count (the conv kernels size their per-thread GEMMs by it).
std::map<GemmShape, int64_t> model_gemm_shapes(const std::string& config, const std::vector<std::string>& sets,
                                               int threads) {
  TrainConfig cfg = TrainConfig::load(config, sets);
  cfg.train.resume.clear();
  cfg.run.threads = threads;
  Trainer trainer(cfg, {.verbose = false, .write_files = false});
  trainer.step();
  std::map<GemmShape, int64_t> shapes;
  {
    std::lock_guard<std::mutex> lock(g_shapes_mu);
    g_shapes = &shapes;
  }
  cpu::set_gemm_observer(&record_gemm);
  trainer.step();
  cpu::set_gemm_observer(nullptr);
  std::lock_guard<std::mutex> lock(g_shapes_mu);
  g_shapes = nullptr;
  return shapes;
}

// (rows x cols) operand with leading dimension ld, as a strided view; transposed: a view
// of a (cols x rows) matrix, as the kernels pass it.
Tensor strided_operand(int64_t rows, int64_t cols, int64_t ld, bool trans, Generator& gen) {
  if (!trans) return ops::narrow(ops::uniform({rows, ld}, -1, 1, gen), 1, 0, cols);
  return ops::transpose(ops::narrow(ops::uniform({cols, ld}, -1, 1, gen), 1, 0, rows), 0, 1);
}

struct GemmTiming {
  double t_ops, t_blas;  // median seconds per call, wall clock
  double c_ops, c_blas;  // the same in process CPU time (all threads)
};

// ops::matmul (ops::gemm_ with beta 1 when the kernel accumulates) against library_sgemm on
// the same operands, alternating sample by sample (order flipped each time), each sample
// long enough (>= ~2 ms) for the clock; medians.
GemmTiming time_gemm(const GemmShape& s, int samples) {
  Generator gen(0);
  const Tensor a = strided_operand(s.m, s.k, s.lda, s.ta, gen);
  const Tensor b = strided_operand(s.k, s.n, s.ldb, s.tb, gen);
  Tensor c = ops::zeros({s.m, s.n});
  Tensor acc = ops::zeros({s.m, s.n});
  const float* ap = static_cast<const float*>(a.raw_data());
  const float* bp = static_cast<const float*>(b.raw_data());
  auto blas = [&] {
    library_sgemm({s.m, s.n, s.k, 1.0f, ap, s.lda, s.ta, bp, s.ldb, s.tb, s.accumulate ? 1.0f : 0.0f, c.data<float>(),
                   s.n});
  };
  auto wrapped = [&] {
    if (s.accumulate) ops::gemm_(acc, a, b, 1.0, 1.0);
    else (void)ops::matmul(a, b);
  };
  for (int i = 0; i < 3; ++i) {
    wrapped();
    blas();
  }
  const double once = std::max(1e-7, time_runs(3, blas)[1]);
  const int reps = int(std::clamp(2e-3 / once, 1.0, 1e5));
  std::vector<double> t_ops, t_blas, c_ops, c_blas;
  auto sample = [&](auto& f, std::vector<double>& out, std::vector<double>& cpu) {
    const double c0 = process_cpu_seconds();
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) f();
    out.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / reps);
    cpu.push_back((process_cpu_seconds() - c0) / reps);
  };
  for (int i = 0; i < samples; ++i) {
    if (i % 2 == 0) {
      sample(wrapped, t_ops, c_ops);
      sample(blas, t_blas, c_blas);
    } else {
      sample(blas, t_blas, c_blas);
      sample(wrapped, t_ops, c_ops);
    }
  }
  auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {median(t_ops), median(t_blas), median(c_ops), median(c_blas)};
}

struct ModelCase {
  std::string name, config;
  std::vector<std::string> sets;
};

// The configs whose GEMMs `--shapes model` lists: the GPT at both benchmark shapes and the
// CNN at both batches (docs/benchmarks.md), looked up under the working directory, then
// under the source tree.
std::vector<ModelCase> model_cases() {
  auto find = [](const std::string& rel) {
    if (std::filesystem::exists(rel)) return rel;
    return std::string(STRATA_SOURCE_DIR) + "/" + rel;
  };
  const std::string gpt = find("configs/gpt_char.yaml"), cnn = find("configs/fashion_cnn.yaml");
  return {{"GPT L4 C128 T64 B32", gpt, {"model.block_size=64", "train.batch_size=32"}},
          {"GPT L4 C128 T128 B16", gpt, {"model.block_size=128", "train.batch_size=16"}},
          {"CNN B64", cnn, {"train.batch_size=64"}},
          {"CNN B128", cnn, {"train.batch_size=128"}},
          {"MLP B128", find("configs/fashion_mlp.yaml"), {}},
          {"Llama L4 C128 T64 B32", find("configs/llama_char.yaml"), {}}};
}

// A model case's distinct GEMM shapes with their calls per step, the most FLOPs first
// (recorded at `threads`, which is left set).
std::vector<std::pair<GemmShape, int64_t>> heaviest_first(const ModelCase& mc, int threads) {
  const auto shapes = model_gemm_shapes(mc.config, mc.sets, threads);
  set_num_threads(threads);
  std::vector<std::pair<GemmShape, int64_t>> rows(shapes.begin(), shapes.end());
  std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) {
    return x.first.flops() * double(x.second) > y.first.flops() * double(y.second);
  });
  return rows;
}

int bench_gemm_model(const std::vector<int>& thread_counts, int samples) {
  std::printf("f32 GEMMs of one training step (recorded at the kernels' cpu::gemm), ops::matmul vs cblas_sgemm\n");
  std::printf("on the same operands and leading dimensions, alternating; medians of %d samples of >= 2 ms each.\n",
              samples);
  std::printf("ratio = cblas time / ops time (wall clock); cpu ratio: the same in process CPU time, which other\n"
              "jobs on a shared host disturb far less.\n");
  std::printf("A GEMM with beta=1 (the kernels accumulate) goes through ops::gemm_(out, a, b, 1, 1).\n");
  std::printf("'cblas'/'blas' here: the library cpu::gemm picks for the shape, called directly (%s).\n",
              cpu::gemm_backend_info().c_str());
  for (int threads : thread_counts) {
    set_num_threads(threads);
    const GemmShape square{1024, 1024, 1024, 1024, 1024, false, false, false};
    const GemmTiming sq = time_gemm(square, samples);
    std::printf("\n== %d thread(s) ==\n1024^3: ops::matmul %.1f GFLOP/s, cblas_sgemm %.1f GFLOP/s, ratio %.3f "
                "(CPU time: %.3f)\n",
                get_num_threads(), square.flops() / sq.t_ops / 1e9, square.flops() / sq.t_blas / 1e9,
                sq.t_blas / sq.t_ops, sq.c_blas / sq.c_ops);
    for (const ModelCase& mc : model_cases()) {
      const std::vector<std::pair<GemmShape, int64_t>> rows = heaviest_first(mc, threads);
      double total_flops = 0, sum_ops = 0, sum_blas = 0, cpu_ops = 0, cpu_blas = 0;
      for (const auto& [s, calls] : rows) total_flops += s.flops() * double(calls);
      std::printf("\n%s (%s): %zu shapes, %.2f GFLOP of GEMM per step\n", mc.name.c_str(), mc.config.c_str(),
                  rows.size(), total_flops / 1e9);
      std::printf("%6s %6s %6s %5s %5s %3s %6s %6s  %6s  %10s %10s %6s %9s\n", "m", "n", "k", "lda", "ldb", "op",
                  "calls", "flop%", "", "ops GF/s", "blas GF/s", "ratio", "cpu ratio");
      for (const auto& [s, calls] : rows) {
        const GemmTiming t = time_gemm(s, samples);
        sum_ops += t.t_ops * double(calls);
        sum_blas += t.t_blas * double(calls);
        cpu_ops += t.c_ops * double(calls);
        cpu_blas += t.c_blas * double(calls);
        const char op[3] = {s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', 0};
        std::printf("%6lld %6lld %6lld %5lld %5lld %3s %6lld %5.1f%%  %6s  %10.1f %10.1f %6.3f %9.3f\n",
                    (long long)s.m, (long long)s.n, (long long)s.k, (long long)s.lda, (long long)s.ldb, op,
                    (long long)calls, 100.0 * s.flops() * double(calls) / total_flops, s.accumulate ? "beta=1" : "",
                    s.flops() / t.t_ops / 1e9, s.flops() / t.t_blas / 1e9, t.t_blas / t.t_ops, t.c_blas / t.c_ops);
      }
      std::printf("step's GEMM time: ops %.2f ms, blas %.2f ms, ratio %.3f (%.1f GFLOP/s through ops); "
                  "CPU time: ops %.2f ms, blas %.2f ms, ratio %.3f\n",
                  sum_ops * 1e3, sum_blas * 1e3, sum_blas / sum_ops, total_flops / sum_ops / 1e9, cpu_ops * 1e3,
                  cpu_blas * 1e3, cpu_blas / cpu_ops);
    }
  }
  return 0;
}

// ---------------------------------------------------------------- bench gemm --backends

namespace gb = cpu::gemm_backends;

// Shape classes of the table in docs/gemm.md, by m*n*k.
constexpr int64_t kClassBounds[] = {int64_t(32) * 32 * 32, int64_t(64) * 64 * 64, int64_t(128) * 128 * 128,
                                    int64_t(256) * 256 * 256};
constexpr const char* kClassNames[] = {"mnk <= 32^3", "<= 64^3", "<= 128^3", "<= 256^3", "> 256^3"};
constexpr int kClasses = 5;
int shape_class(const GemmShape& s) {
  int c = 0;
  while (c < kClasses - 1 && s.m * s.n * s.k > kClassBounds[c]) ++c;
  return c;
}

// Seconds per call of one backend on one shape, warm and cold, wall and CPU (medians);
// declined: the backend does not take this call (cpu::gemm would run OpenBLAS).
struct BackendTiming {
  bool declined = false;
  double warm_wall = 0, warm_cpu = 0, cold_wall = 0, cold_cpu = 0;
};

// A buffer twice the last-level cache; touching every line of it evicts the operands.
class CacheFlusher {
 public:
  CacheFlusher() {
    long llc = 0;  // sysfs first: in a VM sysconf may report the host's whole L3
    if (std::FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r")) {
      if (std::fscanf(f, "%ldK", &llc) == 1) llc <<= 10;
      std::fclose(f);
    }
    if (llc <= 0) llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = 32l << 20;
    buf_.assign(size_t(2 * llc) / sizeof(float), 1.0f);
  }
  size_t bytes() const { return buf_.size() * sizeof(float); }
  void flush() {
    for (size_t i = 0; i < buf_.size(); i += 16) buf_[i] += 1.0f;  // one write per 64-byte line
  }

 private:
  std::vector<float> buf_;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Every backend on one shape, side by side: per sample each backend in turn (the order
// rotates by one each sample). Warm: >= ~2 ms of back-to-back calls on the same operands.
// Cold: one call right after the flusher evicted everything, only the call timed.
std::vector<BackendTiming> time_backends(const GemmShape& s, const std::vector<gb::Backend>& backends, int samples,
                                         int threads, CacheFlusher& flusher) {
  std::mt19937 gen(0);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto operand = [&](int64_t rows, int64_t ld) {
    std::vector<float> v(size_t(rows * ld));
    for (float& x : v) x = u(gen);
    return v;
  };
  const std::vector<float> a = operand(s.ta ? s.k : s.m, s.lda), b = operand(s.tb ? s.n : s.k, s.ldb);
  std::vector<float> c = operand(s.m, s.n);
  const gb::Sgemm g{s.m, s.n, s.k, 1.0f, a.data(), s.lda, s.ta, b.data(), s.ldb, s.tb,
                    s.accumulate ? 1.0f : 0.0f, c.data(), s.n};
  const size_t nb = backends.size();
  std::vector<BackendTiming> out(nb);
  std::vector<int> reps(nb, 1);
  for (size_t i = 0; i < nb; ++i) {
    for (int w = 0; w < 3; ++w)
      if (!gb::run(backends[i], g, threads)) out[i].declined = true;
    if (out[i].declined) continue;
    const auto t0 = Clock::now();
    gb::run(backends[i], g, threads);
    const double once = std::max(1e-7, std::chrono::duration<double>(Clock::now() - t0).count());
    reps[i] = int(std::clamp(2e-3 / once, 1.0, 1e5));
  }
  std::vector<std::vector<double>> ww(nb), wc(nb), cw(nb), cc(nb);
  for (int smp = 0; smp < samples; ++smp)
    for (size_t j = 0; j < nb; ++j) {
      const size_t i = (j + size_t(smp)) % nb;
      if (out[i].declined) continue;
      double c0 = process_cpu_seconds();
      auto t0 = Clock::now();
      for (int r = 0; r < reps[i]; ++r) gb::run(backends[i], g, threads);
      ww[i].push_back(std::chrono::duration<double>(Clock::now() - t0).count() / reps[i]);
      wc[i].push_back((process_cpu_seconds() - c0) / reps[i]);
      flusher.flush();
      c0 = process_cpu_seconds();
      t0 = Clock::now();
      gb::run(backends[i], g, threads);
      cw[i].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      cc[i].push_back(process_cpu_seconds() - c0);
    }
  for (size_t i = 0; i < nb; ++i)
    if (!out[i].declined)
      out[i] = {false, median_of(ww[i]), median_of(wc[i]), median_of(cw[i]), median_of(cc[i])};
  return out;
}

int bench_gemm_backends(const std::vector<int>& thread_counts, int samples, const std::vector<std::string>& names) {
  std::vector<gb::Backend> backends{gb::Backend::openblas};  // first: the reference of every ratio
  for (const std::string& n : names) {
    const auto b = gb::parse(n);
    if (!b) {
      std::fprintf(stderr, "bench gemm: unknown backend '%s' (openblas, blis, onednn_sgemm, onednn_matmul, libxsmm)\n",
                   n.c_str());
      return 2;
    }
    if (!gb::available(*b)) std::printf("%s: not available in this build, left out\n", gb::name(*b));
    else if (std::find(backends.begin(), backends.end(), *b) == backends.end()) backends.push_back(*b);
  }
  const size_t nb = backends.size();
  CacheFlusher flusher;
  std::printf("f32 GEMMs of one training step per model (recorded at cpu::gemm), each library called directly\n"
              "(tensor/cpu/gemm_backends.h) on the same operands, side by side, order rotating per sample; medians of\n"
              "%d samples. warm: >= 2 ms of calls on the same operands; cold: one call after a %zu MiB buffer was\n"
              "touched (the operands evicted from every cache), only the call timed.\n"
              "x = OpenBLAS time / library time in process CPU time (> 1: faster than OpenBLAS); '-': the library\n"
              "declines the call (cpu::gemm runs OpenBLAS). %s\n",
              samples, flusher.bytes() >> 20, gb::describe().c_str());
  for (int threads : thread_counts) {
    set_num_threads(threads);
    // Per class and backend: calls-weighted seconds, warm and cold, wall and CPU, over all models,
    // with OpenBLAS standing in where a backend declines.
    std::vector<std::vector<std::array<double, 4>>> cls(kClasses, std::vector<std::array<double, 4>>(nb));
    std::vector<int64_t> cls_calls(kClasses, 0), cls_shapes(kClasses, 0);
    std::printf("\n== %d thread(s) ==\n", get_num_threads());
    for (const ModelCase& mc : model_cases()) {
      const std::vector<std::pair<GemmShape, int64_t>> rows = heaviest_first(mc, threads);
      std::printf("\n%s: %zu shapes\n%6s %6s %6s %5s %5s %3s %4s %6s %9s %9s", mc.name.c_str(), rows.size(), "m", "n",
                  "k", "lda", "ldb", "op", "beta", "calls", "blas warm", "blas cold");
      for (size_t i = 1; i < nb; ++i) std::printf(" %15s", gb::name(backends[i]));
      std::printf("\n%66s", "us/call, cpu");
      for (size_t i = 1; i < nb; ++i) std::printf(" %15s", "x warm / cold");
      std::printf("\n");
      std::vector<std::array<double, 4>> sum(nb, {0, 0, 0, 0});
      for (const auto& [s, calls] : rows) {
        const std::vector<BackendTiming> t = time_backends(s, backends, samples, threads, flusher);
        const char op[3] = {s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', 0};
        std::printf("%6lld %6lld %6lld %5lld %5lld %3s %4d %6lld %9.2f %9.2f", (long long)s.m, (long long)s.n,
                    (long long)s.k, (long long)s.lda, (long long)s.ldb, op, s.accumulate ? 1 : 0, (long long)calls,
                    t[0].warm_cpu * 1e6, t[0].cold_cpu * 1e6);
        const int c = shape_class(s);
        cls_calls[size_t(c)] += calls;
        ++cls_shapes[size_t(c)];
        for (size_t i = 0; i < nb; ++i) {
          const BackendTiming& x = t[i].declined ? t[0] : t[i];
          const std::array<double, 4> v{x.warm_wall, x.warm_cpu, x.cold_wall, x.cold_cpu};
          for (int q = 0; q < 4; ++q) {
            sum[i][size_t(q)] += v[size_t(q)] * double(calls);
            cls[size_t(c)][i][size_t(q)] += v[size_t(q)] * double(calls);
          }
          if (i == 0) continue;
          if (t[i].declined) std::printf(" %15s", "-");
          else std::printf("   %5.2fx/%5.2fx", t[0].warm_cpu / x.warm_cpu, t[0].cold_cpu / x.cold_cpu);
        }
        std::printf("\n");
      }
      std::printf("step's GEMMs, calls-weighted (declined calls at OpenBLAS's time): openblas warm %.2f ms, cold "
                  "%.2f ms CPU\n",
                  sum[0][1] * 1e3, sum[0][3] * 1e3);
      for (size_t i = 1; i < nb; ++i)
        std::printf("  %-14s warm %.3fx (wall %.3fx), cold %.3fx (wall %.3fx)\n", gb::name(backends[i]),
                    sum[0][1] / sum[i][1], sum[0][0] / sum[i][0], sum[0][3] / sum[i][3], sum[0][2] / sum[i][2]);
    }
    // CPU time: what a shared host disturbs least; wall: what counts at 2+ threads, where
    // idle library threads spinning between calls inflate CPU time.
    for (const char* measure : {"CPU time", "wall"}) {
      const size_t w = measure[0] == 'w' ? 0 : 1;
      std::printf("\nper shape class, all models, calls-weighted, x = OpenBLAS %s / library %s (warm / cold), "
                  "%d thread(s):\n%-12s %6s %6s %9s %9s",
                  measure, measure, get_num_threads(), "class", "shapes", "calls", "blas warm", "blas cold");
      for (size_t i = 1; i < nb; ++i) std::printf(" %15s", gb::name(backends[i]));
      std::printf("\n");
      for (int c = 0; c < kClasses; ++c) {
        if (cls_calls[size_t(c)] == 0) continue;
        const auto& r = cls[size_t(c)];
        std::printf("%-12s %6lld %6lld %7.2fms %7.2fms", kClassNames[c], (long long)cls_shapes[size_t(c)],
                    (long long)cls_calls[size_t(c)], r[0][w] * 1e3, r[0][w + 2] * 1e3);
        for (size_t i = 1; i < nb; ++i) std::printf("   %5.2fx/%5.2fx", r[0][w] / r[i][w], r[0][w + 2] / r[i][w + 2]);
        std::printf("\n");
      }
    }
  }
  return 0;
}

// ---------------------------------------------------------------- bench train --ops

// A kernel's row label: the table's op name, with the op for the enum-selected kernels.
std::string op_label(const cpu::op_profile::Stat& s) {
  static const std::map<std::string, std::vector<const char*>> kEnums{
      {"binary", {"add", "sub", "mul", "div", "pow", "maximum", "minimum"}},
      {"binary_scalar", {"add", "sub", "mul", "div", "pow", "maximum", "minimum"}},
      {"compare", {"eq", "ne", "lt", "le", "gt", "ge"}},
      {"compare_scalar", {"eq", "ne", "lt", "le", "gt", "ge"}},
      {"unary", {"neg", "exp", "log", "sqrt", "rsqrt", "abs", "relu", "gelu", "gelu_tanh", "tanh", "sigmoid", "sign",
                 "square", "reciprocal"}},
      {"activation_backward", {"gelu", "gelu_tanh", "relu", "tanh", "sigmoid"}}};
  if (s.sub < 0) return s.name;
  const auto it = kEnums.find(s.name);
  if (it == kEnums.end() || size_t(s.sub) >= it->second.size()) return s.name + "[" + std::to_string(s.sub) + "]";
  return s.name + " " + it->second[size_t(s.sub)];
}

// `steps` training steps with cpu::op_profile recording: per phase and kernel the self
// time per step (GEMMs apart, per shape, with their achieved rate against the same shape
// timed alone through cblas_sgemm), and what the kernels leave unexplained (autograd,
// tensor and module bookkeeping, allocation).
void print_op_profile(Trainer& trainer, int64_t steps, double unprofiled_step, double model_flops) {
  // The recorder's own cost, measured as it lands: 4000 empty GEMM-keyed scopes nested in
  // one caller. Part of each scope's bookkeeping falls inside its own interval (inflating
  // tiny kernels: the attention's per-head GEMMs) and part in the caller's self time.
  double in_scope = 0, in_caller = 0;
  {
    constexpr int kScopes = 4000;
    cpu::op_profile::start();
    {
      cpu::op_profile::Scope caller("calibrate");
      for (int i = 0; i < kScopes; ++i) {
        cpu::op_profile::Scope s;
        s.begin("gemm", -1, 0, cpu::op_profile::gemm_key(64, 32, 64, 64, 384, false, false, false));
      }
    }
    cpu::op_profile::stop();
    for (const auto& st : cpu::op_profile::results())
      (st.name == "calibrate" ? in_caller : in_scope) += st.self_cpu_s / kScopes;
  }
  cpu::op_profile::start();
  const double c0 = cpu::op_profile::thread_cpu_seconds();
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < steps; ++i) trainer.step();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count() / double(steps);
  const double step_cpu = (cpu::op_profile::thread_cpu_seconds() - c0) / double(steps);
  cpu::op_profile::stop();
  const std::vector<cpu::op_profile::Stat> stats = cpu::op_profile::results();
  const double n = double(steps);
  std::printf("\nop profile: %lld profiled steps, %.2f ms/step of the main thread's CPU time (%.2f ms wall; "
              "unprofiled median %.2f ms wall)\n"
              "cpu ms: the kernel's own CPU time per step, without the kernels it calls (the attention's GEMMs are "
              "under gemm); step%%: of the step's CPU time\n",
              (long long)steps, step_cpu * 1e3, wall * 1e3, unprofiled_step * 1e3);
  // Per (phase, op), GEMMs folded into one "gemm" row per phase.
  struct Row {
    double cpu = 0, wall = 0;
    int64_t calls = 0;
  };
  std::map<std::pair<std::string, std::string>, Row> rows;
  std::map<std::string, Row> phases;
  struct GemmRow {
    int64_t calls = 0;
    double cpu = 0, wall = 0;
  };
  std::map<GemmShape, GemmRow> gemms;
  double gemm_cpu = 0, gemm_wall = 0, gemm_flops = 0, kernels_cpu = 0;
  for (const auto& st : stats) {
    const bool is_gemm = st.name.rfind("gemm ", 0) == 0;
    Row& r = rows[{st.phase, is_gemm ? std::string("gemm (all shapes)") : op_label(st)}];
    r.cpu += st.self_cpu_s;
    r.wall += st.self_s;
    r.calls += st.calls;
    Row& ph = phases[st.phase];
    ph.cpu += st.self_cpu_s;
    ph.wall += st.self_s;
    kernels_cpu += st.self_cpu_s;
    if (!is_gemm) continue;
    gemm_cpu += st.self_cpu_s;
    gemm_wall += st.self_s;
    gemm_flops += st.flops;
    char ta = 'N', tb = 'N';
    int acc = 0;
    long long m, nn, k, lda, ldb;
    if (std::sscanf(st.name.c_str(), "gemm %lld x %lld x %lld, lda %lld, ldb %lld, %c%c, beta %d", &m, &nn, &k, &lda,
                    &ldb, &ta, &tb, &acc) == 8) {
      GemmRow& e = gemms[GemmShape{m, nn, k, lda, ldb, ta == 'T', tb == 'T', acc != 0}];
      e.calls += st.calls;
      e.cpu += st.self_cpu_s;
      e.wall += st.self_s;
    }
  }
  std::vector<std::pair<std::pair<std::string, std::string>, Row>> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) {
    if (x.first.first != y.first.first) return x.first.first < y.first.first;
    return x.second.cpu > y.second.cpu;
  });
  std::printf("%-10s %-36s %8s %9s %7s %9s\n", "phase", "kernel", "calls", "cpu ms", "step%", "wall ms");
  for (const auto& [key, r] : sorted)
    std::printf("%-10s %-36s %8.1f %9.3f %6.1f%% %9.3f\n", key.first.c_str(), key.second.c_str(),
                double(r.calls) / n, r.cpu / n * 1e3, 100.0 * r.cpu / n / step_cpu, r.wall / n * 1e3);
  for (const auto& [ph, r] : phases)
    std::printf("%-10s %-36s %8s %9.3f %6.1f%% %9.3f\n", ph.c_str(), "(all kernels)", "", r.cpu / n * 1e3,
                100.0 * r.cpu / n / step_cpu, r.wall / n * 1e3);
  std::printf("%-10s %-36s %8s %9.3f %6.1f%%\n", "-", "outside kernels (autograd, tensors, data)", "",
              (step_cpu - kernels_cpu / n) * 1e3, 100.0 * (step_cpu - kernels_cpu / n) / step_cpu);
  int64_t scopes = 0;
  for (const auto& st : stats) scopes += st.calls;
  std::printf("profiler overhead: %.1f scopes/step x (%.2f us in the scope + %.2f us in its caller) = %.2f ms/step "
              "of the CPU time above\n",
              double(scopes) / n, in_scope * 1e6, in_caller * 1e6, double(scopes) / n * (in_scope + in_caller) * 1e3);
  std::printf("GEMM: %.3f GFLOP/step in %.2f ms/step of CPU time = %.1f%% of the step: %.1f GFLOP/s "
              "(wall clock: %.2f ms, %.1f GFLOP/s)\n",
              gemm_flops / n / 1e9, gemm_cpu / n * 1e3, 100.0 * gemm_cpu / n / step_cpu, gemm_flops / gemm_cpu / 1e9,
              gemm_wall / n * 1e3, gemm_flops / gemm_wall / 1e9);
  // Each shape's rate in the step against the same shape alone (cblas_sgemm on warm
  // operands, CPU time), the bench gemm --shapes model measure.
  std::vector<std::pair<GemmShape, GemmRow>> gs(gemms.begin(), gemms.end());
  std::sort(gs.begin(), gs.end(), [](const auto& x, const auto& y) { return x.second.cpu > y.second.cpu; });
  std::printf("%6s %6s %6s %5s %5s %3s %4s %7s %7s %9s %10s %6s\n", "m", "n", "k", "lda", "ldb", "op", "beta",
              "calls", "cpu ms", "step GF/s", "alone GF/s", "ratio");
  double alone_cpu = 0;
  for (const auto& [g, r] : gs) {
    const GemmTiming t = time_gemm(g, 5);
    const double in_step = g.flops() * double(r.calls) / r.cpu / 1e9, alone = g.flops() / t.c_blas / 1e9;
    alone_cpu += t.c_blas * double(r.calls);
    const char op[3] = {g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', 0};
    std::printf("%6lld %6lld %6lld %5lld %5lld %3s %4d %7.1f %7.2f %9.1f %10.1f %6.3f\n", (long long)g.m,
                (long long)g.n, (long long)g.k, (long long)g.lda, (long long)g.ldb, op, g.accumulate ? 1 : 0,
                double(r.calls) / n, r.cpu / n * 1e3, in_step, alone, in_step / alone);
  }
  if (alone_cpu <= 0) return;
  const double alone_rate = gemm_flops / alone_cpu;
  std::printf("the step's GEMMs, each shape timed alone (cblas_sgemm, CPU time): %.2f ms/step, %.1f GFLOP/s\n",
              alone_cpu / n * 1e3, alone_rate / 1e9);
  // MFU two ways, in CPU time, peaks measured now: against the 1024^3 GEMM (the trainer's
  // measure), and against the rate the step's own GEMM shapes reach alone (what a step
  // made of nothing but its GEMMs, run at their standalone speed, would score).
  Generator gen(0);
  const Tensor a = ops::uniform({1024, 1024}, -1, 1, gen), b = ops::uniform({1024, 1024}, -1, 1, gen);
  double best = 1e30;
  for (int i = 0; i < 6; ++i) {
    const double t = cpu::op_profile::thread_cpu_seconds();
    (void)ops::matmul(a, b);
    if (i > 0) best = std::min(best, cpu::op_profile::thread_cpu_seconds() - t);
  }
  const double peak = 2.0 * 1024 * 1024 * 1024 / best, unprof = step_cpu - double(scopes) / n * (in_scope + in_caller);
  std::printf("MFU (CPU time, profiler overhead taken out: %.2f ms/step, %.1f GFLOP/s): %.1f%% of the 1024^3 peak "
              "(%.1f GFLOP/s), %.1f%% of the model's own GEMM shapes alone (%.1f GFLOP/s)\n",
              unprof * 1e3, model_flops / unprof / 1e9, 100.0 * model_flops / unprof / peak, peak / 1e9,
              100.0 * model_flops / unprof / alone_rate, alone_rate / 1e9);
}

}  // namespace strata::apps::bench_detail
