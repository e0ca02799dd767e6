# comm layer: multi-process tests of the mpi backend (label dist) and the comm benchmark.
# Included by tests/CMakeLists.txt; the local-backend tests are tests/comm/*.cpp.
set(_comm_mpirun ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root)
set(_comm_env "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")

add_executable(strata_test_comm_mpi ${CMAKE_CURRENT_SOURCE_DIR}/comm/mpi/mpi_collectives_test.cpp)
target_link_libraries(strata_test_comm_mpi PRIVATE strata_comm strata_warnings GTest::gtest)
foreach(np 2 3 4)
  add_test(NAME comm_mpi_np${np} COMMAND ${_comm_mpirun} -np ${np} $<TARGET_FILE:strata_test_comm_mpi>)
  set_tests_properties(comm_mpi_np${np} PROPERTIES LABELS dist TIMEOUT 120 ENVIRONMENT "${_comm_env}")
endforeach()

# Fault injection: a rank that skips a collective (timeout) and a rank killed by SIGKILL.
add_executable(strata_comm_mpi_fault ${CMAKE_CURRENT_SOURCE_DIR}/comm/mpi/mpi_fault.cpp)
target_link_libraries(strata_comm_mpi_fault PRIVATE strata_comm strata_warnings)
set(_comm_fault -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DNP=3 -DEXE=$<TARGET_FILE:strata_comm_mpi_fault>)
add_test(NAME comm_mpi_timeout
  COMMAND ${CMAKE_COMMAND} ${_comm_fault} -DMODE=timeout -DLIMIT=30
    "-DEXPECT=timed out after 2 s \\(comm.timeout_s\\): all_reduce seq 1 in group 'world' \\(mpi, 3 ranks\\) on rank 0: f32 x 1000"
    -P ${CMAKE_CURRENT_SOURCE_DIR}/comm/mpi/run_fault.cmake)
# Default mpirun: the survivors name the dead rank themselves before the launcher tears
# the job down (mpirun's own "exited on signal 9" is not enough).
add_test(NAME comm_mpi_rank_death
  COMMAND ${CMAKE_COMMAND} ${_comm_fault} -DMODE=kill -DLIMIT=30
    "-DEXPECT=rank [02] exits with status 3 after: .*lost peer: rank 1 \\(pid [0-9]+ on"
    -P ${CMAKE_CURRENT_SOURCE_DIR}/comm/mpi/run_fault.cmake)
# With --enable-recovery mpirun keeps the survivors running: strata itself must notice
# the dead peer and exit naming it (mpirun's own exit code is 0 in this mode).
add_test(NAME comm_mpi_rank_death_detected
  COMMAND ${CMAKE_COMMAND} ${_comm_fault} -DMODE=kill -DLIMIT=30 -DFLAGS=--enable-recovery -DANY_RC=ON
    "-DEXPECT=rank 0 exits with status 3 after: .*lost peer: rank 1 \\(pid [0-9]+ on"
    -P ${CMAKE_CURRENT_SOURCE_DIR}/comm/mpi/run_fault.cmake)
# A rank stopped by SIGSTOP before a collective: the others time out and name it as the
# rank that never joined; the job ends within comm.timeout_s (2 s) + margin.
add_test(NAME comm_mpi_stopped_rank_named
  COMMAND ${CMAKE_COMMAND} ${_comm_fault} -DMODE=stop -DLIMIT=20
    "-DEXPECT=rank [02] exits with status 3 after: .*timed out after 2 s \\(comm.timeout_s\\): all_reduce seq 1 in group 'world'.*; rank 1 \\(pid [0-9]+ on [^)]+\\) never joined all_reduce seq 1 in group 'world' .*; ranks 0,2 reached it"
    -P ${CMAKE_CURRENT_SOURCE_DIR}/comm/mpi/run_fault.cmake)
# batch_isend_irecv whose peer never posts its half, or dies: the error names the label,
# the pending op and its tag, and the peer.
add_test(NAME comm_mpi_p2p_timeout
  COMMAND ${CMAKE_COMMAND} ${_comm_fault} -DMODE=p2p -DLIMIT=20
    "-DEXPECT=rank 0 exits with status 3 after: \\[batch_isend_irecv\\] timed out after 2 s \\(comm.timeout_s\\): batch_isend_irecv p2p seq 0 in group 'world' \\(mpi, 3 ranks\\) on rank 0 \\[pp stage 0 mb 2\\].*still pending: recv f32 x 1000 from rank 1 tag 5; waiting for rank 1 \\(pid [0-9]+ on"
    -P ${CMAKE_CURRENT_SOURCE_DIR}/comm/mpi/run_fault.cmake)
add_test(NAME comm_mpi_p2p_peer_death
  COMMAND ${CMAKE_COMMAND} ${_comm_fault} -DMODE=p2p_kill -DLIMIT=30 -DFLAGS=--enable-recovery -DANY_RC=ON
    "-DEXPECT=rank 0 exits with status 3 after: \\[batch_isend_irecv\\] batch_isend_irecv p2p seq 0 in group 'world' \\(mpi, 3 ranks\\) on rank 0 \\[pp stage 0 mb 2\\]: 2 ops .*recv f32 x 1000 from rank 1 tag 5.*lost peer: rank 1 \\(pid [0-9]+ on"
    -P ${CMAKE_CURRENT_SOURCE_DIR}/comm/mpi/run_fault.cmake)
# The launcher's SIGTERM (mpirun stopping the survivors of a lost host) during a wait: the
# ranks end the wait at once and name the rank that never joined (comm/launcher_signal.h),
# in well under comm.timeout_s (20 s); during compute it kills as it always did (a rank
# that swallowed it would compute for hours: the others name rank 0 as a lost peer instead,
# and mpirun reports either rank 0's signal or the first survivor's exit 3).
add_test(NAME comm_mpi_sigterm_names_missing_rank
  COMMAND ${CMAKE_COMMAND} ${_comm_fault} -DMODE=sigterm -DLIMIT=7
    "-DEXPECT=rank [02] exits with status 3 after: \\[all_reduce\\] stopped by the launcher \\(SIGTERM\\) after waiting 1(\\.[0-9])? s of comm.timeout_s 20 s: all_reduce seq 1 in group 'world' \\(mpi, 3 ranks\\) on rank [02].*; rank 1 \\(pid [0-9]+ on [^)]+\\) never joined all_reduce seq 1 in group 'world' .*within 0.5 s\\); ranks 0,2 reached it"
    -P ${CMAKE_CURRENT_SOURCE_DIR}/comm/mpi/run_fault.cmake)
add_test(NAME comm_mpi_sigterm_while_computing
  COMMAND ${CMAKE_COMMAND} ${_comm_fault} -DMODE=sigterm_busy -DLIMIT=30
    "-DEXPECT=lost peer: rank 0 \\(pid [0-9]+ on"
    -P ${CMAKE_CURRENT_SOURCE_DIR}/comm/mpi/run_fault.cmake)
set_tests_properties(comm_mpi_timeout comm_mpi_rank_death comm_mpi_rank_death_detected comm_mpi_stopped_rank_named
  comm_mpi_p2p_timeout comm_mpi_p2p_peer_death comm_mpi_sigterm_names_missing_rank comm_mpi_sigterm_while_computing
  PROPERTIES LABELS dist TIMEOUT 60 ENVIRONMENT "${_comm_env}")
set_tests_properties(comm_mpi_stopped_rank_named comm_mpi_p2p_timeout comm_mpi_p2p_peer_death
  comm_mpi_sigterm_names_missing_rank comm_mpi_sigterm_while_computing
  PROPERTIES LABELS "dist;fault")

# `strata bench comm` (bench/comm_bench.h) end to end, on both backends.
add_test(NAME comm_bench_local_smoke
  COMMAND strata_cli bench comm --backend local --ranks 2 --sizes 1K:64K --iters 5 --no-memcpy)
add_test(NAME comm_bench_mpi_smoke
  COMMAND ${_comm_mpirun} -np 2 $<TARGET_FILE:strata_cli> bench comm --backend mpi --algorithm ring --sizes 1K:64K
    --iters 5 --no-memcpy)
set_tests_properties(comm_bench_local_smoke PROPERTIES LABELS unit TIMEOUT 60)
set_tests_properties(comm_bench_mpi_smoke PROPERTIES LABELS dist TIMEOUT 60 ENVIRONMENT "${_comm_env}")
