# 800 steps of configs/gpt_char_pp.yaml (mpirun -np 2) against configs/gpt_char.yaml on
# one process through the CLI; final training and validation losses within 1e-3 (label
# long: ~20 min of CPU, registered only with -DSTRATA_LONG_TESTS=ON, as tests/tp_cli.cmake's):
#   cmake -B build -DSTRATA_LONG_TESTS=ON && ctest --test-dir build -R pp_long
option(STRATA_LONG_TESTS "Register the long end-to-end tests (tests/tp_cli.cmake)" OFF)
if(NOT STRATA_LONG_TESTS)
  return()
endif()
find_program(strata_pp_long_mpirun NAMES mpirun mpiexec)
find_program(strata_pp_long_python NAMES python3)
if(strata_pp_long_mpirun AND strata_pp_long_python AND TARGET strata_cli AND EXISTS /usr/share/games/fortunes)
  add_test(NAME pp_long_gpt_char_800_steps
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/pp_long.sh $<TARGET_FILE:strata_cli> ${strata_pp_long_mpirun}
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/pp_long)
  set_tests_properties(pp_long_gpt_char_800_steps PROPERTIES LABELS "long;dist" TIMEOUT 5400 PROCESSORS 2
                       PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL:"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()
