# The CUDA backend of the tensor layer (tensor/cuda/). STRATA_CUDA=AUTO builds it when a
# CUDA compiler and toolkit are found, ON requires them, OFF skips. Included by the
# top-level CMakeLists.txt before any target exists: enable_language(CUDA) and
# CMAKE_CUDA_ARCHITECTURES must come first, because a target takes its CUDA_ARCHITECTURES
# when it is created, and the Makefile generator refuses a target that has CUDA objects
# and none (Ninja does not check). strata_tensor_add_cuda() then adds the
# kernels: every .cu file compiles once, into one object library whose objects go into
# strata_tensor; the host-only .cpp files of tensor/cuda/ are strata_tensor sources.
set(STRATA_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (if the toolkit is found), ON or OFF")
set_property(CACHE STRATA_CUDA PROPERTY STRINGS AUTO ON OFF)
if(NOT STRATA_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "STRATA_CUDA must be AUTO, ON or OFF, got '${STRATA_CUDA}'")
endif()

set(STRATA_WITH_CUDA OFF)
if(NOT STRATA_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    set(STRATA_WITH_CUDA ON)
  elseif(STRATA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "STRATA_CUDA=ON but no CUDA compiler/toolkit was found (nvcc on PATH or "
                        "CMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc); use STRATA_CUDA=AUTO or OFF to build without it")
  else()
    message(STATUS "strata: CUDA toolkit not found, building without the CUDA backend")
  endif()
endif()

# Called once strata_tensor exists: adds the kernels and host code of tensor/cuda/ to it.
function(strata_tensor_add_cuda)
  if(NOT STRATA_WITH_CUDA)
    return()
  endif()
  file(GLOB strata_cuda_kernels CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tensor/cuda/*.cu)
  file(GLOB strata_cuda_host CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tensor/cuda/*.cpp)

  add_library(strata_tensor_cuda_kernels OBJECT ${strata_cuda_kernels})
  target_include_directories(strata_tensor_cuda_kernels PRIVATE ${PROJECT_BINARY_DIR}/include_root/tensor)
  target_link_libraries(strata_tensor_cuda_kernels PRIVATE strata_core)
  target_compile_definitions(strata_tensor_cuda_kernels PRIVATE STRATA_WITH_CUDA)
  target_link_libraries(strata_tensor_cuda_kernels PRIVATE CUDA::cudart)
  target_compile_options(strata_tensor_cuda_kernels PRIVATE --expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra)
  set_target_properties(strata_tensor_cuda_kernels PROPERTIES POSITION_INDEPENDENT_CODE ON)

  target_sources(strata_tensor PRIVATE ${strata_cuda_host} $<TARGET_OBJECTS:strata_tensor_cuda_kernels>)
  target_compile_definitions(strata_tensor PUBLIC STRATA_WITH_CUDA)
  string(REPLACE ";" "," strata_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
  target_compile_definitions(strata_tensor PRIVATE STRATA_CUDA_ARCHS="${strata_cuda_archs}")
  # cudart is public: tensor/cuda/runtime.h (streams, events) includes its header.
  target_link_libraries(strata_tensor PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt)
  if(STRATA_WITH_CUDNN)
    target_compile_definitions(strata_tensor PRIVATE STRATA_WITH_CUDNN)
    target_include_directories(strata_tensor PRIVATE ${STRATA_CUDNN_INCLUDE_DIR})
    target_link_libraries(strata_tensor PRIVATE ${STRATA_CUDNN_LIBRARY})
  endif()
endfunction()

if(NOT STRATA_WITH_CUDA)
  return()
endif()

# sm_80 (A100) and sm_90 (H100/H200) by default; override with -DCMAKE_CUDA_ARCHITECTURES=...
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
  set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures to compile the kernels for" FORCE)
endif()
# One CUDA runtime in the process: the shared libcudart that cuBLAS, cuDNN and NCCL use too.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
enable_language(CUDA)
# CMake 3.25 does not know that nvcc 12+ accepts C++20; teach it the flag.
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)

# cuDNN is optional: without it conv2d on CUDA throws naming the missing library.
find_path(STRATA_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
find_library(STRATA_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64
             ${CUDAToolkit_LIBRARY_ROOT}/lib)
if(STRATA_CUDNN_INCLUDE_DIR AND STRATA_CUDNN_LIBRARY)
  set(STRATA_WITH_CUDNN ON)
else()
  set(STRATA_WITH_CUDNN OFF)
  message(STATUS "strata: cuDNN not found; conv2d on CUDA will be unavailable")
endif()
message(STATUS "strata: CUDA backend ON (toolkit ${CUDAToolkit_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES}, "
               "cuDNN ${STRATA_WITH_CUDNN})")
