// record_step_gemms / replay_gemms: see gemm_replay.h.
#include "apps/gemm_replay.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <tuple>

#include <strata/core/error.h>
#include <strata/tensor/cpu/gemm.h>
#include <strata/tensor/ops.h>

namespace strata::apps {
namespace {

std::mutex g_mu;
std::vector<GemmCall>* g_calls = nullptr;  // the recording, while one is open

void observe(DType dt, int64_t m, int64_t n, int64_t k, cpu::MatRef a, cpu::MatRef b, double beta) {
  if (dt != DType::f32) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_calls) g_calls->push_back({m, n, k, a.ld, b.ld, a.trans, b.trans, beta != 0.0});
}

double process_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace

std::vector<GemmCall> record_step_gemms(Trainer& trainer) {
  std::vector<GemmCall> calls;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_calls = &calls;
  }
  cpu::set_gemm_observer(&observe);
  try {
    trainer.step();
  } catch (...) {
    cpu::set_gemm_observer(nullptr);
    std::lock_guard<std::mutex> lock(g_mu);
    g_calls = nullptr;
    throw;
  }
  cpu::set_gemm_observer(nullptr);
  std::lock_guard<std::mutex> lock(g_mu);
  g_calls = nullptr;
  return calls;
}

GemmReplayTiming replay_gemms(const std::vector<GemmCall>& calls, int repeats) {
  STRATA_CHECK(repeats >= 1, "[replay_gemms] repeats must be >= 1, got ", repeats);
  // One set of operands per distinct shape: A is (rows of op(A)'s storage) x lda, B
  // likewise, C is m x n. Values in [-1, 1]; accumulating calls add onto their C.
  struct Operands {
    Tensor a, b, c;
  };
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool>, Operands> buffers;
  Generator gen(0);
  std::vector<const Operands*> per_call;
  per_call.reserve(calls.size());
  GemmReplayTiming out;
  for (const GemmCall& g : calls) {
    out.flops += g.flops();
    auto key = std::make_tuple(g.m, g.n, g.k, g.lda, g.ldb, g.ta, g.tb);
    auto it = buffers.find(key);
    if (it == buffers.end()) {
      // storage rows: op(A) is m x k, stored k x lda when transposed, m x lda otherwise
      const int64_t a_rows = g.ta ? g.k : g.m, b_rows = g.tb ? g.n : g.k;
      Operands o{ops::uniform({a_rows, g.lda}, -1, 1, gen), ops::uniform({b_rows, g.ldb}, -1, 1, gen),
                 ops::zeros({g.m, g.n})};
      it = buffers.emplace(key, std::move(o)).first;
    }
    per_call.push_back(&it->second);
  }
  auto pass = [&] {
    for (size_t i = 0; i < calls.size(); ++i) {
      const GemmCall& g = calls[i];
      const Operands& o = *per_call[i];
      cpu::gemm(DType::f32, g.m, g.n, g.k, 1.0, {o.a.raw_data(), g.lda, g.ta}, {o.b.raw_data(), g.ldb, g.tb},
                g.accumulate ? 1.0 : 0.0, o.c.raw_data(), g.n);
    }
  };
  pass();  // untimed: first touch, BLAS buffers
  std::vector<double> wall, cpu;
  for (int r = 0; r < repeats; ++r) {
    const double c0 = process_cpu_s();
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(process_cpu_s() - c0);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  out.wall_s = wall[wall.size() / 2];
  out.cpu_s = cpu[cpu.size() / 2];
  return out;
}

}  // namespace strata::apps
