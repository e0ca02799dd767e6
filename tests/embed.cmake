# Installs strata into a scratch prefix, builds examples/embed against it with
# find_package(strata), then runs it alone, under mpirun -np 2 (DDP) and with ZeRO-3
# (tests/embed_run.sh): parallelize() trains the same model in every layout.
set(embed_prefix ${PROJECT_BINARY_DIR}/embed_install)
add_test(NAME embed_find_package
  COMMAND bash -c
    "set -e; ${CMAKE_COMMAND} --install '${PROJECT_BINARY_DIR}' --prefix '${embed_prefix}' >/dev/null && \
     ${CMAKE_COMMAND} -S '${PROJECT_SOURCE_DIR}/examples/embed' -B '${embed_prefix}/build' -G Ninja \
       -DCMAKE_PREFIX_PATH='${embed_prefix}' -DCMAKE_BUILD_TYPE=Release >/dev/null && \
     ${CMAKE_COMMAND} --build '${embed_prefix}/build' >/dev/null && \
     '${PROJECT_SOURCE_DIR}/tests/embed_run.sh' '${embed_prefix}/build/embed' '${MPIEXEC_EXECUTABLE}'")
set_tests_properties(embed_find_package PROPERTIES LABELS e2e TIMEOUT 300 PROCESSORS 2)
