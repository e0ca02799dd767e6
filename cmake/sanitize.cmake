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
