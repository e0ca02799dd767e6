# Installs strata into a scratch prefix and builds examples/embed against it with
# find_package(strata), then runs the program (it fits a line and checks the fit).
set(embed_prefix ${PROJECT_BINARY_DIR}/embed_install)
add_test(NAME embed_find_package
  COMMAND ${CMAKE_COMMAND} -E env bash -c
    "set -e; ${CMAKE_COMMAND} --install '${PROJECT_BINARY_DIR}' --prefix '${embed_prefix}' >/dev/null && \
     ${CMAKE_COMMAND} -S '${PROJECT_SOURCE_DIR}/examples/embed' -B '${embed_prefix}/build' -G Ninja \
       -DCMAKE_PREFIX_PATH='${embed_prefix}' -DCMAKE_BUILD_TYPE=Release >/dev/null && \
     ${CMAKE_COMMAND} --build '${embed_prefix}/build' >/dev/null && '${embed_prefix}/build/embed'")
set_tests_properties(embed_find_package PROPERTIES LABELS e2e TIMEOUT 300)
