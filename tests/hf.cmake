# Hugging Face interop, proven against the real transformers package (tests/interop/,
# run in the test-only venv by strata_python_test; skipped where it cannot be made).
# GPT-2 end to end: logits, one step's gradients, greedy ids, error exits, and
# train-at-a-layout -> export -> transformers; Llama: the converter's round trip, logits
# and greedy ids, one step's gradients, config errors, and train at tp 2 -> export.
set(hf_args --strata $<TARGET_FILE:strata_cli> --tool $<TARGET_FILE:strata_hf_model_tool>
            --work ${CMAKE_CURRENT_BINARY_DIR}/hf)
foreach(mode logits grads generate errors)
  strata_python_test(NAME hf_gpt2_${mode}
                     COMMAND python ${CMAKE_CURRENT_SOURCE_DIR}/interop/hf_gpt2.py ${mode} ${hf_args}
                     LABELS e2e TIMEOUT 300)
endforeach()
find_program(strata_hf_mpirun NAMES mpirun mpiexec)
if(strata_hf_mpirun)
  strata_python_test(NAME hf_gpt2_export
                     COMMAND python ${CMAKE_CURRENT_SOURCE_DIR}/interop/hf_gpt2.py export ${hf_args}
                             --compare $<TARGET_FILE:strata_compare_checkpoints> --mpirun ${strata_hf_mpirun}
                     LABELS e2e dist TIMEOUT 600)
  set_tests_properties(hf_gpt2_export PROPERTIES PROCESSORS 2
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
endif()
strata_python_test(NAME hf_llama_roundtrip
                   COMMAND python ${CMAKE_CURRENT_SOURCE_DIR}/interop/hf_llama.py roundtrip ${hf_args}
                   LABELS e2e TIMEOUT 300)
foreach(mode logits grads)
  strata_python_test(NAME hf_llama_${mode}
                     COMMAND python ${CMAKE_CURRENT_SOURCE_DIR}/interop/hf_llama.py ${mode} ${hf_args}
                     LABELS e2e TIMEOUT 300)
endforeach()
if(strata_hf_mpirun)
  strata_python_test(NAME hf_llama_export
                     COMMAND python ${CMAKE_CURRENT_SOURCE_DIR}/interop/hf_llama.py export ${hf_args}
                             --compare $<TARGET_FILE:strata_compare_checkpoints> --mpirun ${strata_hf_mpirun}
                     LABELS e2e dist TIMEOUT 600)
  set_tests_properties(hf_llama_export PROPERTIES PROCESSORS 2
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
endif()
