# nccl comm backend: multi-process GPU tests under mpirun (labels cuda, dist) of the
# collectives and of DDP / ZeRO over them, built when the backend is (cmake/nccl.cmake).
# They need one GPU per rank and report SKIPPED (ctest shows them as skipped) on machines
# with fewer. Included by tests/CMakeLists.txt.
if(NOT STRATA_WITH_NCCL)
  return()
endif()
set(_nccl_mpirun ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root)
set(_nccl_env "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")

add_executable(strata_test_comm_nccl ${CMAKE_CURRENT_SOURCE_DIR}/comm/mpi/nccl_collectives_test.cpp)
target_link_libraries(strata_test_comm_nccl PRIVATE strata_comm strata_warnings GTest::gtest)
foreach(np 1 2 4)
  add_test(NAME comm_nccl_np${np} COMMAND ${_nccl_mpirun} -np ${np} $<TARGET_FILE:strata_test_comm_nccl>)
  set_tests_properties(comm_nccl_np${np} PROPERTIES LABELS "cuda;dist" TIMEOUT 300 ENVIRONMENT "${_nccl_env}"
                       SKIP_REGULAR_EXPRESSION "SKIPPED: needs one GPU per rank")
endforeach()

# The last rank skips a collective: the others fail after comm.timeout_s naming the op,
# abort their NCCL kernels and exit non-zero.
add_test(NAME comm_nccl_timeout
  COMMAND ${CMAKE_COMMAND} -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DNP=2 -DEXE=$<TARGET_FILE:strata_test_comm_nccl>
    -DMODE=timeout -DLIMIT=90
    "-DEXPECT=timed out after 10 s \\(comm.timeout_s\\): all_reduce seq 1 in group 'world' \\(nccl, 2 ranks\\) on rank 0: f32 x 1000|SKIPPED: needs one GPU per rank"
    -P ${CMAKE_CURRENT_SOURCE_DIR}/comm/mpi/run_fault.cmake)
set_tests_properties(comm_nccl_timeout PROPERTIES LABELS "cuda;dist" TIMEOUT 120 ENVIRONMENT "${_nccl_env}"
                     SKIP_REGULAR_EXPRESSION "SKIPPED: needs one GPU per rank")

# DDP, ZeRO stages 1-3, tensor parallelism (with and without sequence parallelism) and the
# pipeline schedules over the nccl backend (tests/parallel/mpi/nccl/, a folder the cpu
# mpirun test's glob in parallel.cmake does not see): equal to the single-process CPU run.
# The tp and pp tests need 2 or 4 ranks and skip naming why at 1.
if(TARGET strata_parallel)
  add_executable(strata_test_parallel_nccl ${CMAKE_CURRENT_SOURCE_DIR}/parallel/mpi/nccl/nccl_parallel_test.cpp
                                           ${CMAKE_CURRENT_SOURCE_DIR}/parallel/mpi/nccl/nccl_layouts_test.cpp)
  target_include_directories(strata_test_parallel_nccl PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/parallel)
  target_link_libraries(strata_test_parallel_nccl PRIVATE strata_parallel strata_comm strata_warnings GTest::gtest)
  foreach(np 2 4)
    add_test(NAME parallel_nccl_np${np} COMMAND ${_nccl_mpirun} -np ${np} $<TARGET_FILE:strata_test_parallel_nccl>)
    set_tests_properties(parallel_nccl_np${np} PROPERTIES LABELS "cuda;dist" TIMEOUT 600 ENVIRONMENT "${_nccl_env}"
                         SKIP_REGULAR_EXPRESSION "SKIPPED: needs one GPU per rank")
  endforeach()
endif()

# Context parallelism on CUDA: ring attention on each rank's GPU, its K/V and dK/dV blocks
# over nccl, and the GPT at cp 2 equal to the single-process CPU run (2 GPUs).
if(TARGET strata_parallel)
  add_executable(strata_test_cp_nccl ${CMAKE_CURRENT_SOURCE_DIR}/parallel/mpi/nccl/nccl_cp_test.cpp)
  target_include_directories(strata_test_cp_nccl PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/parallel)
  target_link_libraries(strata_test_cp_nccl PRIVATE strata_parallel strata_comm strata_warnings GTest::gtest)
  add_test(NAME parallel_nccl_cp_np2 COMMAND ${_nccl_mpirun} -np 2 $<TARGET_FILE:strata_test_cp_nccl>)
  set_tests_properties(parallel_nccl_cp_np2 PROPERTIES LABELS "cuda;dist" TIMEOUT 300 ENVIRONMENT "${_nccl_env}"
                       SKIP_REGULAR_EXPRESSION "SKIPPED: needs one GPU per rank")
endif()
