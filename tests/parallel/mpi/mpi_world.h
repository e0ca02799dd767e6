// The world group of the mpirun test binary (set by main in ddp_mpi_test.cpp).
#pragma once
#include <memory>

#include <strata/comm/process_group.h>

namespace strata::testing {
inline std::shared_ptr<comm::ProcessGroup> g_world;
}  // namespace strata::testing
