# STRATA_SANITIZE: build everything (library, CLI, tests) under the compiler's sanitizers.
#   -DSTRATA_SANITIZE=address,undefined   ASan + UBSan (and LeakSanitizer, part of ASan)
#   -DSTRATA_SANITIZE=thread              TSan
# scripts/sanitize.sh builds both into build-asan / build-tsan and runs the suites with the
# runtime options and suppression files of scripts/sanitize/ (docs/reliability.md,
# "Sanitizers"). Release semantics (NDEBUG) but -O1 and line tables, for readable stacks
# at a bearable compile time on the 2-core host. Third-party libraries (OpenMPI, OpenBLAS,
# libgomp, yaml-cpp) are the Debian builds, not instrumented.
set(STRATA_SANITIZE "" CACHE STRING "Sanitizers to build with: address,undefined | thread (empty: none)")
if(STRATA_SANITIZE)
  string(REPLACE "," ";" _strata_san_list "${STRATA_SANITIZE}")
  foreach(s ${_strata_san_list})
    if(NOT s MATCHES "^(address|undefined|thread|leak)$")
      message(FATAL_ERROR "STRATA_SANITIZE: unknown sanitizer '${s}' (address,undefined | thread)")
    endif()
  endforeach()
  if("thread" IN_LIST _strata_san_list AND ("address" IN_LIST _strata_san_list OR "leak" IN_LIST _strata_san_list))
    message(FATAL_ERROR "STRATA_SANITIZE: 'thread' cannot be combined with 'address' or 'leak'; build them separately")
  endif()
  # CPU builds only: nvcc does not take these flags, and the GPU code cannot run here.
  if(NOT DEFINED CACHE{STRATA_CUDA})
    set(STRATA_CUDA OFF CACHE STRING "Build the CUDA backend: AUTO (if the toolkit is found), ON or OFF")
  elseif(NOT STRATA_CUDA STREQUAL "OFF")
    message(FATAL_ERROR "STRATA_SANITIZE: CPU builds only; configure with -DSTRATA_CUDA=OFF")
  endif()
  set(_strata_san_flags -fsanitize=${STRATA_SANITIZE} -fno-omit-frame-pointer -O1 -g1)
  if("undefined" IN_LIST _strata_san_list)
    # Any UB report fails the test (default: report and continue).
    list(APPEND _strata_san_flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_strata_san_flags}>")
  add_link_options(-fsanitize=${STRATA_SANITIZE})
  # -O1 after the build type's -O3: the last -O wins.
  message(STATUS "strata: sanitizers ${STRATA_SANITIZE}")
endif()

# A sanitized build runs several times slower (measured on this suite: ASan+UBSan at -O1
# about 2-4x, TSan 5-15x), so the ctest limits of the e2e and dist tests, sized for
# Release, would end slow-but-passing runs. strata_sanitize_test_timeouts() (called at
# the end of tests/CMakeLists.txt) multiplies every TIMEOUT property of the directory's
# tests by STRATA_SANITIZE_TIMEOUT_SCALE (default 4 for address/undefined, 10 for thread;
# 1 without sanitizers). gtest tests have no TIMEOUT of their own: ctest --timeout
# (scripts/sanitize.sh gives 1200 s) bounds them.
if("thread" IN_LIST _strata_san_list)
  set(_strata_timeout_scale_default 10)
elseif(STRATA_SANITIZE)
  set(_strata_timeout_scale_default 4)
else()
  set(_strata_timeout_scale_default 1)
endif()
set(STRATA_SANITIZE_TIMEOUT_SCALE "${_strata_timeout_scale_default}" CACHE STRING
    "Factor on the ctest TIMEOUT of every test in a sanitized build (default 4 for ASan/UBSan, 10 for TSan)")
function(strata_sanitize_test_timeouts)
  if(NOT STRATA_SANITIZE OR STRATA_SANITIZE_TIMEOUT_SCALE EQUAL 1)
    return()
  endif()
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(t IN LISTS tests)
    get_test_property(${t} TIMEOUT limit)
    if(limit)
      math(EXPR limit "${limit} * ${STRATA_SANITIZE_TIMEOUT_SCALE}")
      set_tests_properties(${t} PROPERTIES TIMEOUT ${limit})
    endif()
  endforeach()
endfunction()
