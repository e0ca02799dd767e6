# The default CMake generator (Unix Makefiles) must configure and build this tree too:
# test.sh builds with Ninja, and once only Ninja worked (see cmake/cuda.cmake). Included
# by tests/CMakeLists.txt it registers
#   build_default_generator  (label unit) configures a fresh copy of the build with no -G
#       and no CMAKE_GENERATOR, checks that Makefiles were generated, then builds
#       strata_core and, in a CUDA build, one CUDA kernel object (tensor/cuda/dropout.cu)
#       with make: configuring plus a small build, not the whole tree a second time.
# Run as `cmake -DSRC=... -DWORK=... -P build.cmake` it executes the check.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  add_test(NAME build_default_generator
           COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/default_generator
                   -DSTRATA_CUDA=${STRATA_CUDA} -DWITH_CUDA=${STRATA_WITH_CUDA} "-DCUDA_COMPILER=${CMAKE_CUDA_COMPILER}"
                   "-DCXX_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER}" "-DCUDA_LAUNCHER=${CMAKE_CUDA_COMPILER_LAUNCHER}"
                   -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(build_default_generator PROPERTIES LABELS unit TIMEOUT 600 PROCESSORS 2)
  return()
endif()

# ---------------------------------------------------------------- script mode
file(REMOVE_RECURSE ${WORK})
set(args -S ${SRC} -B ${WORK} -DSTRATA_CUDA=${STRATA_CUDA})
if(CUDA_COMPILER)
  list(APPEND args -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER})
endif()
if(CXX_LAUNCHER)
  list(APPEND args -DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER})
endif()
if(CUDA_LAUNCHER)
  list(APPEND args -DCMAKE_CUDA_COMPILER_LAUNCHER=${CUDA_LAUNCHER})
endif()

# step(<name> command...): runs it, fails with its output unless it exits 0; leaves OUT.
macro(step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed (exit ${rc}): ${ARGN}\nstdout:\n${OUT}\nstderr:\n${err}")
  endif()
  message(STATUS "${name}: ok")
endmacro()

# No -G and CMAKE_GENERATOR unset: what a plain `cmake -S . -B build` gets.
step("configure" ${CMAKE_COMMAND} -E env --unset=CMAKE_GENERATOR ${CMAKE_COMMAND} ${args})
if(NOT OUT MATCHES "Generating done")
  message(FATAL_ERROR "configure did not generate:\n${OUT}")
endif()
file(STRINGS ${WORK}/CMakeCache.txt generator REGEX "^CMAKE_GENERATOR:INTERNAL=")
if(NOT generator STREQUAL "CMAKE_GENERATOR:INTERNAL=Unix Makefiles" OR NOT EXISTS ${WORK}/Makefile)
  message(FATAL_ERROR "expected the default generator (Unix Makefiles), got '${generator}'")
endif()
if(WITH_CUDA AND NOT OUT MATCHES "strata: CUDA backend ON")
  message(FATAL_ERROR "the outer build has CUDA but the default-generator configure did not enable it:\n${OUT}")
endif()

step("build strata_core" ${CMAKE_COMMAND} --build ${WORK} --target strata_core -j 2)
if(WITH_CUDA)
  # One .cu object: compiled with the CUDA_ARCHITECTURES flags that used to be missing.
  step("build tensor/cuda/dropout.cu.o" ${CMAKE_COMMAND} --build ${WORK} --target tensor/cuda/dropout.cu.o)
  if(NOT OUT MATCHES "Building CUDA object")
    message(FATAL_ERROR "make did not compile tensor/cuda/dropout.cu:\n${OUT}")
  endif()
endif()
file(REMOVE_RECURSE ${WORK})
