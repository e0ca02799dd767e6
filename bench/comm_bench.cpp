// Comm benchmark: sizes, iteration counts agreed across ranks, timing (max over ranks),
// bus-bandwidth factors and the table (see comm/bench.h).
#include "bench/comm_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <vector>

#include <strata/comm/local.h>
#include <strata/core/error.h>
#include <strata/tensor/ops.h>

namespace strata::bench {

using namespace strata::comm;
namespace {

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// Buffers for one size and a closure issuing the op once.
struct BenchCase {
  Tensor a, b;
  int64_t bytes = 0, count = 0;
};

BenchCase make_case(OpKind op, int64_t bytes, DType dt, int n) {
  const int64_t es = int64_t(element_size(dt));
  BenchCase c;
  // Round to whole elements per rank so every op's shape rule holds.
  int64_t per_rank = std::max<int64_t>(1, bytes / es / n);
  switch (op) {
    case OpKind::all_gather:
      c.a = ops::zeros({per_rank}, dt);
      c.b = ops::zeros({per_rank * n}, dt);
      c.count = per_rank * n;
      break;
    case OpKind::reduce_scatter:
      c.a = ops::zeros({per_rank * n}, dt);
      c.b = ops::zeros({per_rank}, dt);
      c.count = per_rank * n;
      break;
    case OpKind::all_to_all:
      c.a = ops::zeros({per_rank * n}, dt);
      c.b = ops::zeros({per_rank * n}, dt);
      c.count = per_rank * n;
      break;
    case OpKind::all_reduce:
    case OpKind::broadcast:
    case OpKind::reduce:
      c.count = std::max<int64_t>(1, bytes / es);
      c.a = ops::zeros({c.count}, dt);
      break;
    default:
      STRATA_THROW(ConfigError, "bench comm --op: ", op_kind_name(op),
                   " is not benchmarked (use all_reduce, all_gather, reduce_scatter, broadcast, reduce or all_to_all)");
  }
  c.bytes = c.count * es;
  return c;
}

Work issue(ProcessGroup& g, OpKind op, const BenchCase& c) {
  switch (op) {
    case OpKind::all_gather: return g.all_gather(c.a, c.b);
    case OpKind::reduce_scatter: return g.reduce_scatter(c.a, c.b);
    case OpKind::all_to_all: return g.all_to_all(c.a, c.b);
    case OpKind::broadcast: return g.broadcast(c.a, 0);
    case OpKind::reduce: return g.reduce(c.a, 0);
    default: return g.all_reduce(c.a);
  }
}

// Mean seconds per op over `iters` back-to-back ops (issued together, waited at the end,
// as nccl-tests does), max over ranks. `sent`: this rank's bytes per op, and the part of
// them that is modelled rather than counted.
double time_ops(ProcessGroup& g, OpKind op, const BenchCase& c, int iters, OpStats* sent = nullptr) {
  g.barrier().wait();
  const OpStats s0 = g.stats()[op];
  const double t0 = now_s();
  std::vector<Work> ws;
  ws.reserve(size_t(iters));
  for (int i = 0; i < iters; ++i) ws.push_back(issue(g, op, c));
  for (auto& w : ws) w.wait();
  double dt = (now_s() - t0) / iters;
  if (sent) {
    const OpStats s1 = g.stats()[op];
    sent->bytes_sent = (s1.bytes_sent - s0.bytes_sent) / iters;
    sent->bytes_modelled = (s1.bytes_modelled - s0.bytes_modelled) / iters;
  }
  Tensor t = ops::full({1}, dt, DType::f64);
  g.all_reduce(t, ReduceOp::max).wait();
  return t.item<double>();
}

}  // namespace

double bus_factor(OpKind op, int n) {
  switch (op) {
    case OpKind::all_reduce: return 2.0 * (n - 1) / n;
    case OpKind::all_gather:
    case OpKind::reduce_scatter:
    case OpKind::all_to_all: return double(n - 1) / n;
    default: return 1.0;
  }
}

std::vector<CommBenchRow> run_comm_bench(ProcessGroup& g, const CommBenchOptions& o) {
  STRATA_CHECK(o.min_bytes > 0 && o.max_bytes >= o.min_bytes && o.step_factor >= 2,
               "[bench comm] bad size range ", o.min_bytes, ":", o.max_bytes, " step ", o.step_factor);
  const Algorithm saved = g.algorithm();
  g.set_algorithm(o.algorithm);
  std::vector<CommBenchRow> rows;
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.step_factor) {
    BenchCase c = make_case(o.op, bytes, o.dtype, g.size());
    for (int i = 0; i < o.warmup; ++i) issue(g, o.op, c).wait();
    int iters = o.iters;
    if (iters <= 0) {  // calibrate, then agree on the count (max over ranks)
      const double t = std::max(time_ops(g, o.op, c, 2), 1e-7);
      Tensor n = ops::full({1}, std::clamp(o.target_seconds / t, 5.0, 1000.0), DType::f64);
      g.all_reduce(n, ReduceOp::max).wait();
      iters = int(n.item<double>());
    }
    CommBenchRow row;
    row.bytes = c.bytes;
    row.count = c.count;
    row.iters = iters;
    OpStats sent;
    const double t = time_ops(g, o.op, c, iters, &sent);
    row.bytes_sent = sent.bytes_sent;
    row.bytes_modelled = sent.bytes_modelled;
    row.time_us = t * 1e6;
    row.algbw = double(c.bytes) / t / 1e9;
    row.busbw = row.algbw * bus_factor(o.op, g.size());
    if (o.with_memcpy && g.rank() == 0) row.memcpy_bw = memcpy_bandwidth(c.bytes);
    rows.push_back(row);
    if (bytes > o.max_bytes / o.step_factor) break;
  }
  {  // rank 0 measured memcpy and its bytes; share them so every rank returns the same rows
    const size_t k = rows.size();
    std::vector<double> v(3 * k);
    for (size_t i = 0; i < k; ++i)
      std::tie(v[i], v[k + i], v[2 * k + i]) =
          std::tuple(rows[i].memcpy_bw, double(rows[i].bytes_sent), double(rows[i].bytes_modelled));
    Tensor m = ops::from_vector(v, {int64_t(3 * k)});
    g.broadcast(m, 0).wait();
    v = m.to_vector<double>();
    for (size_t i = 0; i < k; ++i) {
      rows[i].memcpy_bw = v[i];
      rows[i].bytes_sent = int64_t(v[k + i]);
      rows[i].bytes_modelled = int64_t(v[2 * k + i]);
    }
  }
  g.set_algorithm(saved);
  return rows;
}

std::vector<CommBenchRow> run_local_comm_bench(const CommBenchOptions& o) {
  std::vector<CommBenchRow> rows;
  CommOptions co;
  co.algorithm = o.algorithm;
  run_local(o.ranks, [&](ProcessGroup& g) {
    auto r = run_comm_bench(g, o);
    if (g.rank() == 0) rows = std::move(r);
  }, co);
  return rows;
}

std::string format_comm_bench(const CommBenchOptions& o, int ranks, const std::vector<CommBenchRow>& rows) {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line, "# strata bench comm: backend %s, op %s, algorithm %s, %d ranks, dtype %s\n",
                o.backend.c_str(), op_kind_name(o.op), algorithm_name(o.algorithm), ranks, dtype_name(o.dtype));
  s += line;
  std::snprintf(line, sizeof line, "# busbw = algbw x %s\n",
                o.op == OpKind::all_reduce ? "2(N-1)/N"
                : (o.op == OpKind::broadcast || o.op == OpKind::reduce) ? "1"
                                                                         : "(N-1)/N");
  s += line;
  // One label for the whole table when every row agrees (it does unless a size crosses
  // from a native op to a fallback).
  std::string kind = rows.empty() ? "none" : rows[0].bytes_kind();
  for (const auto& r : rows)
    if (r.bytes_kind() != kind) kind = "per row";
  std::snprintf(line, sizeof line, "# sent(B): bytes rank 0 sent per op, %s%s\n", kind.c_str(),
                kind == "modelled" ? " (native collective: nccl-tests bus model, not observed)"
                : kind == "counted" ? " (every message on send/recv)"
                                    : "");
  s += line;
  std::snprintf(line, sizeof line, "%12s %12s %7s %12s %10s %10s %12s %-9s%s\n", "size(B)", "count", "iters",
                "time(us)", "algbw(GB/s)", "busbw(GB/s)", "sent(B)", "bytes", o.with_memcpy ? "  memcpy(GB/s)" : "");
  s += line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%12lld %12lld %7d %12.1f %10.2f %10.2f %12lld %-9s", static_cast<long long>(r.bytes),
                  static_cast<long long>(r.count), r.iters, r.time_us, r.algbw, r.busbw,
                  static_cast<long long>(r.bytes_sent), r.bytes_kind());
    s += line;
    if (o.with_memcpy) {
      std::snprintf(line, sizeof line, "  %12.2f", r.memcpy_bw);
      s += line;
    }
    s += "\n";
  }
  return s;
}

int64_t parse_size(const std::string& s) {
  if (s.empty()) STRATA_THROW(ConfigError, "bench comm --sizes: empty size");
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    STRATA_THROW(ConfigError, "bench comm --sizes: cannot parse size '", s, "' (e.g. 1K, 256M, 1G)");
  }
  std::string unit = s.substr(pos);
  int64_t mult = 1;
  if (unit == "K" || unit == "k" || unit == "KB" || unit == "KiB") mult = int64_t(1) << 10;
  else if (unit == "M" || unit == "MB" || unit == "MiB") mult = int64_t(1) << 20;
  else if (unit == "G" || unit == "GB" || unit == "GiB") mult = int64_t(1) << 30;
  else if (!unit.empty() && unit != "B")
    STRATA_THROW(ConfigError, "bench comm --sizes: unknown unit '", unit, "' in '", s, "' (use K, M or G)");
  if (!(v > 0)) STRATA_THROW(ConfigError, "bench comm --sizes: size must be > 0, got '", s, "'");
  return int64_t(v * double(mult));
}

std::pair<int64_t, int64_t> parse_size_range(const std::string& s) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos) {
    const int64_t v = parse_size(s);
    return {v, v};
  }
  const int64_t lo = parse_size(s.substr(0, colon)), hi = parse_size(s.substr(colon + 1));
  if (hi < lo) STRATA_THROW(ConfigError, "bench comm --sizes: '", s, "' ends below its start");
  return {lo, hi};
}

double memcpy_bandwidth(int64_t bytes) {
  if (bytes <= 0) return 0;
  std::vector<char> src(size_t(bytes), 1), dst(size_t(bytes), 0);
  const int reps = int(std::clamp<int64_t>((int64_t(256) << 20) / bytes, 3, 10000));
  double best = 1e30;
  for (int trial = 0; trial < 3; ++trial) {
    const double t0 = now_s();
    for (int i = 0; i < reps; ++i) {
      std::memcpy(dst.data(), src.data(), size_t(bytes));
      asm volatile("" : : "r"(dst.data()) : "memory");  // keep the copies
    }
    best = std::min(best, (now_s() - t0) / reps);
  }
  return double(bytes) / best / 1e9;
}

}  // namespace strata::bench
