# The tokenizer through the strata binary (tests/tokenizer_e2e.sh): training on text with
# data.tokenizer equals training on its `strata tokenize` file, sample decodes, and the
# errors' exit codes. The comparisons against `tokenizers` are in python_env.cmake.
foreach(case text_matches_tokens errors)
  add_test(NAME e2e_tokenizer_${case}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/tokenizer_e2e.sh $<TARGET_FILE:strata_cli> ${PROJECT_SOURCE_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/e2e_tokenizer/${case} ${case})
  set_tests_properties(e2e_tokenizer_${case} PROPERTIES LABELS e2e TIMEOUT 120)
endforeach()
