// The nccl world group of strata_test_parallel_nccl: set by the binary's main()
// (nccl_parallel_test.cpp) before RUN_ALL_TESTS, one rank per GPU (cuda:local_rank).
#pragma once
#include <memory>

#include <strata/comm/process_group.h>

namespace strata::testing {

inline std::shared_ptr<comm::ProcessGroup> g_nccl;

}  // namespace strata::testing
