# The comm layer's nccl backend (comm/nccl_backend.cpp). Included by the top-level
# CMakeLists.txt after cmake/cuda.cmake and after the strata_comm target exists; does
# nothing unless cmake/cuda.cmake enabled CUDA (STRATA_WITH_CUDA). Without it the
# backend's entry point throws "strata was built without CUDA/NCCL".
# NCCL is found in NCCL_ROOT, then next to the CUDA toolkit (/usr/local/cuda here).
set(STRATA_WITH_NCCL OFF)
if(NOT STRATA_WITH_CUDA)
  return()
endif()

find_path(STRATA_NCCL_INCLUDE_DIR nccl.h
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}
  PATH_SUFFIXES include)
find_library(STRATA_NCCL_LIBRARY nccl
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
  PATH_SUFFIXES lib lib64)
if(NOT STRATA_NCCL_INCLUDE_DIR OR NOT STRATA_NCCL_LIBRARY)
  message(WARNING "strata: CUDA is on but NCCL (nccl.h, libnccl) was not found; the nccl comm backend is "
                  "disabled (set NCCL_ROOT to its install prefix)")
  return()
endif()

file(STRINGS ${STRATA_NCCL_INCLUDE_DIR}/nccl.h _nccl_version REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
string(REGEX REPLACE "[^0-9;]" "" _nccl_version "${_nccl_version}")
string(REPLACE ";" "." _nccl_version "${_nccl_version}")
# Non-blocking communicators and ncclCommSplit (2.18) carry the timeouts and sub-groups.
if(_nccl_version VERSION_LESS 2.18)
  message(WARNING "strata: NCCL ${_nccl_version} is older than 2.18 (needed for ncclCommSplit); the nccl comm "
                  "backend is disabled")
  return()
endif()
set(STRATA_WITH_NCCL ON)
message(STATUS "strata: nccl comm backend ON (NCCL ${_nccl_version}: ${STRATA_NCCL_LIBRARY})")

# PUBLIC so tests and apps can tell a build with the backend from one without.
target_compile_definitions(strata_comm PUBLIC STRATA_WITH_NCCL)
target_include_directories(strata_comm PRIVATE ${STRATA_NCCL_INCLUDE_DIR})
# NCCL by path (it ships no CMake package); CUDA::cudart comes with strata_tensor too.
target_link_libraries(strata_comm PRIVATE ${STRATA_NCCL_LIBRARY} CUDA::cudart)
