# Installs strata into a scratch prefix and builds the examples against it with
# find_package(strata) alone:
# - examples/embed runs alone, under mpirun -np 2 (DDP) and with ZeRO-3
#   (tests/embed_run.sh): parallelize() trains the same model in every layout;
# - examples/train (its own Module and Dataset, a DataLoader, checkpoints) trains, is
#   resumed at another world size, and ends where one process ends (tests/train_example_run.sh).
# Both include the generated umbrella header <strata/strata.h> or installed headers only.
set(embed_prefix ${PROJECT_BINARY_DIR}/embed_install)
add_test(NAME embed_install
  COMMAND bash -c "rm -rf '${embed_prefix}' && ${CMAKE_COMMAND} --install '${PROJECT_BINARY_DIR}' --prefix '${embed_prefix}' >/dev/null")
set_tests_properties(embed_install PROPERTIES LABELS e2e FIXTURES_SETUP strata_installed)
foreach(example embed train)
  set(run_script embed_run.sh)
  set(run_args)
  if(example STREQUAL "train")
    set(run_script train_example_run.sh)
    set(run_args "'${embed_prefix}/train_runs'")
  endif()
  add_test(NAME example_${example}_find_package
    COMMAND bash -c
      "set -e; ${CMAKE_COMMAND} -S '${PROJECT_SOURCE_DIR}/examples/${example}' -B '${embed_prefix}/build_${example}' -G Ninja \
         -DCMAKE_PREFIX_PATH='${embed_prefix}' -DCMAKE_BUILD_TYPE=Release >/dev/null && \
       ${CMAKE_COMMAND} --build '${embed_prefix}/build_${example}' >/dev/null && \
       '${PROJECT_SOURCE_DIR}/tests/${run_script}' '${embed_prefix}/build_${example}/${example}' '${MPIEXEC_EXECUTABLE}' ${run_args}")
  set_tests_properties(example_${example}_find_package PROPERTIES LABELS e2e TIMEOUT 300 PROCESSORS 2
                       FIXTURES_REQUIRED strata_installed)
endforeach()
