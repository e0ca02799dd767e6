# The portable build (no STRATA_NATIVE) carries x86-64-v4 and x86-64-v3 variants of the
# vectorisable CPU loops next to the baseline ones (tensor/cpu/isa_dispatch.h); this checks
# the library holds them, for the kernels of every hot file. tests/tensor/simd_dispatch_test.cpp
# runs each variant and compares the results.
if(STRATA_CPU_DISPATCH AND NOT STRATA_NATIVE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU"
   AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64" AND CMAKE_NM)
  add_test(NAME simd_variants_compiled
           COMMAND sh -c "lib=\"$1\"; nm -C \"$lib\" > syms.txt || exit 1; fail=0; \
for v in call_v4 call_v3 call_baseline; do \
  for k in map1 map2 adam_impl layer_norm softmax cross_entropy forward_impl conv; do \
    n=$(grep \"$v<\" syms.txt | grep -c \"$k\"); echo \"$v $k: $n\"; [ \"$n\" -gt 0 ] || fail=1; \
  done; done; exit $fail" sh $<TARGET_FILE:strata_tensor>
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(simd_variants_compiled PROPERTIES LABELS unit)
endif()
