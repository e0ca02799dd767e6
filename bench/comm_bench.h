// The comm benchmark behind `strata bench comm`: times one collective over a range of
// sizes and reports nccl-tests style algorithm and bus bandwidth, and the bytes sent per
// op, labelled counted or modelled.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/process_group.h>

namespace strata::bench {

using comm::Algorithm;
using comm::OpKind;

struct CommBenchOptions {
  std::string backend = "local";  ///< "local" (threads of this process) or "mpi" (under mpirun)
  OpKind op = OpKind::all_reduce;  ///< all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all
  Algorithm algorithm = Algorithm::native;
  int64_t min_bytes = int64_t(1) << 10;   ///< --sizes 1K:256M
  int64_t max_bytes = int64_t(256) << 20;
  int64_t step_factor = 2;                ///< sizes grow by this factor
  int ranks = 2;                          ///< local backend only; mpi uses the job's size
  DType dtype = DType::f32;
  int warmup = 2;
  int iters = 0;             ///< 0: enough to fill ~target_seconds per size (5..1000)
  double target_seconds = 0.2;
  bool with_memcpy = true;   ///< add a single-thread memcpy GB/s column for reference
};

/// One size. `bytes` is nccl-tests' size: the buffer (all_reduce, broadcast, reduce), the
/// gathered output (all_gather) or the scattered input (reduce_scatter, all_to_all).
struct CommBenchRow {
  int64_t bytes = 0;
  int64_t count = 0;  ///< elements of that buffer
  int iters = 0;
  double time_us = 0;   ///< mean time per op, max over ranks
  double algbw = 0;     ///< GB/s = bytes / time
  double busbw = 0;     ///< GB/s = algbw x bus factor (all_reduce 2(N-1)/N, gather-like (N-1)/N, broadcast 1)
  double memcpy_bw = 0; ///< GB/s of one memcpy of `bytes` on this machine (0 if not measured)
  int64_t bytes_sent = 0;      ///< bytes rank 0 sent per op
  int64_t bytes_modelled = 0;  ///< of which modelled (native collectives), not counted
  /// "counted" (send/recv algorithms) or "modelled" (native): see comm::bytes_kind.
  const char* bytes_kind() const { return comm::bytes_kind(bytes_sent, bytes_modelled); }
};

/// Runs the benchmark on `group` (a collective: every rank calls it with the same
/// options). Every rank gets the same rows.
std::vector<CommBenchRow> run_comm_bench(comm::ProcessGroup& group, const CommBenchOptions& options);
/// Makes a local world of options.ranks threads and runs the benchmark on it.
std::vector<CommBenchRow> run_local_comm_bench(const CommBenchOptions& options);
/// The nccl-tests style table (header line with backend/op/algorithm/ranks, one row per size).
std::string format_comm_bench(const CommBenchOptions& options, int ranks, const std::vector<CommBenchRow>& rows);

/// bus bandwidth factor of an op on n ranks (nccl-tests PERFORMANCE.md).
double bus_factor(OpKind op, int n);
/// "4K" -> 4096, "256M", "1G", "512" (binary units); throws ConfigError naming the text.
int64_t parse_size(const std::string& s);
/// "1K:256M" -> {1024, 268435456}; a single size "1M" means {1M, 1M}.
std::pair<int64_t, int64_t> parse_size_range(const std::string& s);
/// GB/s of a single-thread memcpy of `bytes` (best of a few runs, buffers pre-touched).
double memcpy_bandwidth(int64_t bytes);

}  // namespace strata::bench
