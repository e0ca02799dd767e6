# The interop tests run the real reference libraries (transformers, tokenizers,
# safetensors) from a test-only venv that scripts/python_env.sh makes on first use in
# the build tree. strata_python_test() adds a ctest entry whose command runs inside it;
# where the venv cannot be made (no python3-torch, no PyPI) the entry is skipped with
# the reason.
set(STRATA_PYTHON_ENV ${PROJECT_BINARY_DIR}/pyenv)

# strata_python_test(NAME <name> COMMAND <cmd...> [LABELS <labels...>] [TIMEOUT <s>])
function(strata_python_test)
  cmake_parse_arguments(arg "" "NAME;TIMEOUT" "COMMAND;LABELS" ${ARGN})
  if(NOT arg_LABELS)
    set(arg_LABELS e2e)
  endif()
  add_test(NAME ${arg_NAME}
           COMMAND ${PROJECT_SOURCE_DIR}/scripts/python_env.sh ${STRATA_PYTHON_ENV} -- ${arg_COMMAND})
  set_tests_properties(${arg_NAME} PROPERTIES LABELS "${arg_LABELS};python" SKIP_RETURN_CODE 77)
  if(arg_TIMEOUT)
    set_tests_properties(${arg_NAME} PROPERTIES TIMEOUT ${arg_TIMEOUT})
  endif()
endfunction()

# The environment itself: the reference libraries import, at the versions pinned.
strata_python_test(NAME python_env COMMAND ${CMAKE_COMMAND} -E env python -c
                   "import torch, transformers, tokenizers, safetensors; print(transformers.__version__, tokenizers.__version__)"
                   LABELS unit)

# The tokenizer against `tokenizers`: one entry per tokenizer family trained by the script.
foreach(family gpt2 gpt2_prefix llama3 splits gpt2_transformers)
  strata_python_test(NAME tokenizer_vs_tokenizers_${family}
                     COMMAND ${CMAKE_COMMAND} -E env python ${PROJECT_SOURCE_DIR}/tests/data/tokenizer_compare.py
                             $<TARGET_FILE:strata_tokenize_ids> ${PROJECT_BINARY_DIR}/tokenizer_compare/${family} ${family}
                     LABELS e2e TIMEOUT 120)
endforeach()
# `strata tokenizer train` (loaded by `tokenizers`, same ids) and `strata tokenize`.
foreach(family gpt2 llama3)
  strata_python_test(NAME tokenizer_cli_train_${family}
                     COMMAND ${CMAKE_COMMAND} -E env python ${PROJECT_SOURCE_DIR}/tests/data/tokenizer_cli_test.py
                             $<TARGET_FILE:strata_cli> $<TARGET_FILE:strata_tokenize_ids>
                             ${PROJECT_BINARY_DIR}/tokenizer_cli/${family} ${family}
                     LABELS e2e TIMEOUT 120)
endforeach()
