# CUDA backend tests (label cuda): one binary, strata_test_cuda. tests/cuda/host/*.cpp
# need no GPU (the helpers the kernels share with host code, the allocator's bookkeeping,
# the kernel registry, error messages and the no-GPU behaviour) and build in every
# configuration; tests/cuda/device/*.cpp compare every CUDA op with its CPU twin and skip
# ("no CUDA device visible: ...") when no GPU is visible; they build when CUDA is on.
# Included by tests/CMakeLists.txt (tests/cuda/ has no top-level sources of its own).
file(GLOB strata_cuda_test_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/cuda/host/*.cpp)
if(STRATA_WITH_CUDA)
  file(GLOB strata_cuda_device_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/cuda/device/*.cpp)
  list(APPEND strata_cuda_test_srcs ${strata_cuda_device_srcs})
endif()
add_executable(strata_test_cuda ${strata_cuda_test_srcs})
# The device tests call the CUDA runtime and include CPU kernel headers (OpenMP) themselves:
# strata links both privately.
target_link_libraries(strata_test_cuda PRIVATE strata strata_apps strata_warnings GTest::gtest GTest::gtest_main
                      $<$<BOOL:${STRATA_WITH_CUDA}>:CUDA::cudart> OpenMP::OpenMP_CXX)
target_compile_definitions(strata_test_cuda PRIVATE STRATA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# The cuDNN tests (conv2d, the CNN step) run when strata_tensor was built with cuDNN.
if(STRATA_WITH_CUDNN)
  target_compile_definitions(strata_test_cuda PRIVATE STRATA_WITH_CUDNN)
endif()
gtest_discover_tests(strata_test_cuda PROPERTIES LABELS cuda DISCOVERY_TIMEOUT 60)

# `strata info` reports the backend: compiled in or not, and the devices or why there are none.
add_test(NAME cuda_info COMMAND strata_cli info)
if(STRATA_WITH_CUDA)
  set_tests_properties(cuda_info PROPERTIES LABELS cuda TIMEOUT 60 PASS_REGULAR_EXPRESSION
    "cuda: yes \\(runtime [0-9]+\\.[0-9]+, driver [^,]+, kernels for sm [0-9,]+\\)\n    (cuda:0 .*, sm_[0-9]+, [0-9]+ SMs|no CUDA device visible \\(.+\\))")
else()
  set_tests_properties(cuda_info PROPERTIES LABELS cuda TIMEOUT 60 PASS_REGULAR_EXPRESSION
    "cuda: no \\(not compiled in this build\\)")
endif()
