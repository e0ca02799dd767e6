# Multi-process DDP equivalence under mpirun (label dist): the same test executable on
# 2, 3 and 4 ranks, one compute thread each. The local-backend tests are in
# strata_test_parallel (tests/parallel/*.cpp, label unit).
if(TARGET strata_parallel AND MPIEXEC_EXECUTABLE)
  file(GLOB parallel_mpi_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/parallel/mpi/*.cpp)
  add_executable(strata_test_parallel_mpi ${parallel_mpi_srcs})
  target_include_directories(strata_test_parallel_mpi PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/parallel)
  target_link_libraries(strata_test_parallel_mpi PRIVATE strata_parallel strata_warnings GTest::gtest)
  foreach(np 2 3 4)
    add_test(NAME parallel_mpi_np${np}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe --allow-run-as-root
              ${MPIEXEC_PREFLAGS} $<TARGET_FILE:strata_test_parallel_mpi> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(parallel_mpi_np${np} PROPERTIES LABELS dist TIMEOUT 180
      ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
  endforeach()
endif()
