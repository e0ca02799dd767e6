# HSDP under mpirun (label dist): hsdp_mpi_np4 runs HsdpMpi.* on 4 ranks of this host;
# hsdp_multihost runs it on 2 network-namespace hosts x 2 ranks, each host one shard group
# (tests/multihost_hsdp.sh, label multihost). The local-backend tests are
# tests/parallel/hsdp_test.cpp.
if(TARGET strata_parallel AND MPIEXEC_EXECUTABLE)
  add_test(NAME hsdp_mpi_np4
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 4 --oversubscribe --allow-run-as-root
            $<TARGET_FILE:strata_test_parallel_mpi> --gtest_filter=HsdpMpi.*)
  set_tests_properties(hsdp_mpi_np4 PROPERTIES LABELS dist TIMEOUT 180 PROCESSORS 2
    ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
  add_test(NAME hsdp_multihost
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/multihost_hsdp.sh $<TARGET_FILE:strata_test_parallel_mpi>
            ${MPIEXEC_EXECUTABLE} ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/hsdp/multihost)
  set_tests_properties(hsdp_multihost PROPERTIES LABELS "e2e;dist;multihost" TIMEOUT 300 PROCESSORS 2
    SKIP_REGULAR_EXPRESSION "SKIPPED:" FAIL_REGULAR_EXPRESSION "FAIL:" RESOURCE_LOCK netns_hosts)
endif()
