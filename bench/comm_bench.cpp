// Standalone comm benchmark (what `strata bench comm` runs through comm/bench.h):
//   strata_comm_bench --backend local --ranks 2 --op all_reduce --algorithm native --sizes 1K:256M
//   mpirun -np 4 strata_comm_bench --backend mpi --op all_reduce --algorithm ring --sizes 1M:64M
#include <cstdio>
#include <cstring>
#include <string>

#include "comm/bench.h"
#include "comm/mpi.h"
#include "core/threads.h"

using namespace strata;
using namespace strata::comm;

int main(int argc, char** argv) {
  CommBenchOptions o;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) STRATA_THROW(ConfigError, a, " needs a value");
        return argv[++i];
      };
      if (a == "--backend") o.backend = value();
      else if (a == "--op") o.op = parse_op_kind(value());
      else if (a == "--algorithm") o.algorithm = parse_algorithm(value());
      else if (a == "--sizes") std::tie(o.min_bytes, o.max_bytes) = parse_size_range(value());
      else if (a == "--ranks") o.ranks = std::stoi(value());
      else if (a == "--iters") o.iters = std::stoi(value());
      else if (a == "--dtype") o.dtype = parse_dtype(value());
      else if (a == "--no-memcpy") o.with_memcpy = false;
      else STRATA_THROW(ConfigError, "unknown flag ", a,
                        " (--backend local|mpi --op OP --algorithm native|ring|tree|recursive|auto --sizes 1K:256M "
                        "--ranks N --iters N --dtype f32 --no-memcpy)");
    }
    if (o.backend == "local") {
      set_num_threads(1);
      auto rows = run_local_comm_bench(o);
      std::fputs(format_comm_bench(o, o.ranks, rows).c_str(), stdout);
    } else if (o.backend == "mpi") {
      set_num_threads(1);
      auto world = init_mpi_world(CommOptions{}, &argc, &argv);
      auto rows = run_comm_bench(*world, o);
      if (world->rank() == 0) std::fputs(format_comm_bench(o, world->size(), rows).c_str(), stdout);
    } else {
      STRATA_THROW(ConfigError, "--backend must be local or mpi, got '", o.backend, "'");
    }
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "strata_comm_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata_comm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
