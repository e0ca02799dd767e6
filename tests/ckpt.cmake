# Sharded checkpoints end to end. Included by tests/CMakeLists.txt it registers:
#   ckpt_e2e_write        the gtest ShardedCheckpointE2E.WritesArtifacts writes a 3-rank
#                         checkpoint, its library consolidation, a single-process checkpoint
#                         and expected.json (fixture)
#   ckpt_cli_consolidate  `strata ckpt consolidate` equals the library's file byte for byte;
#                         a damaged checkpoint exits 1 naming the file and tensor; a
#                         single-process checkpoint is said to be one file already (label e2e)
#   ckpt_python_check     tools/check_consolidated.py loads the consolidated file and the
#                         single-process checkpoint's shard file with Python (the safetensors
#                         package when installed) and compares exactly
# Run as `cmake -DCASE=cli|python ... -P ckpt.cmake` it executes one case.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  if(NOT TARGET strata_test_parallel OR NOT TARGET strata_cli)
    return()
  endif()
  set(_ckpt_work ${CMAKE_CURRENT_BINARY_DIR}/ckpt_e2e)
  add_test(NAME ckpt_e2e_write
           COMMAND ${CMAKE_COMMAND} -E env STRATA_CKPT_E2E_DIR=${_ckpt_work}
                   $<TARGET_FILE:strata_test_parallel> --gtest_filter=ShardedCheckpointE2E.WritesArtifacts)
  set_tests_properties(ckpt_e2e_write PROPERTIES LABELS e2e TIMEOUT 60 FIXTURES_SETUP ckpt_e2e
                       PASS_REGULAR_EXPRESSION "\\[  PASSED  \\] 1 test\\." FAIL_REGULAR_EXPRESSION "SKIPPED|FAILED")
  add_test(NAME ckpt_cli_consolidate
           COMMAND ${CMAKE_COMMAND} -DCASE=cli -DSTRATA=$<TARGET_FILE:strata_cli> -DWORK=${_ckpt_work}
                   -P ${CMAKE_CURRENT_LIST_FILE})
  find_program(strata_ckpt_python NAMES python3)
  add_test(NAME ckpt_python_check
           COMMAND ${CMAKE_COMMAND} -DCASE=python "-DPYTHON=${strata_ckpt_python}" -DWORK=${_ckpt_work}
                   -DSCRIPT=${PROJECT_SOURCE_DIR}/tools/check_consolidated.py -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(ckpt_cli_consolidate ckpt_python_check PROPERTIES
                       LABELS e2e TIMEOUT 60 FIXTURES_REQUIRED ckpt_e2e)
  set_tests_properties(ckpt_python_check PROPERTIES SKIP_REGULAR_EXPRESSION "SKIPPED:")
  return()
endif()

# ---------------------------------------------------------------- script mode
set(ckpt ${WORK}/ckpt)
set(library_file ${WORK}/library.safetensors)

set(ENV{STRATA_NO_REEXEC} 1)
# strata(<expected exit code> <stderr regex or ""> args...)
function(strata want_rc want_err)
  execute_process(COMMAND ${STRATA} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL want_rc)
    message(FATAL_ERROR "strata ${ARGN}: exit ${rc}, expected ${want_rc}\nstdout: ${out}\nstderr: ${err}")
  endif()
  if(want_err AND NOT err MATCHES "${want_err}")
    message(FATAL_ERROR "strata ${ARGN}: stderr does not match '${want_err}':\n${err}")
  endif()
  message(STATUS "strata ${ARGN} -> ${rc}: ${out}${err}")
endfunction()

if(CASE STREQUAL "cli")
  set(out ${WORK}/cli.safetensors)
  file(REMOVE ${out})
  strata(0 "" ckpt consolidate --checkpoint ${ckpt} --out ${out})
  file(SHA256 ${out} got)
  file(SHA256 ${library_file} want)
  if(NOT got STREQUAL want)
    message(FATAL_ERROR "CLI output ${out} differs from the library's consolidate() output ${library_file}")
  endif()

  # Damaged copies: exit 1 naming the file (and the tensor), nothing written.
  set(bad ${WORK}/bad)
  file(REMOVE_RECURSE ${bad})
  file(COPY ${ckpt}/ DESTINATION ${bad})
  file(READ ${bad}/index.json index)
  string(JSON index SET "${index}" tensors embed pieces 0 key "\"embed@999\"")
  string(JSON file GET "${index}" tensors embed pieces 0 file)
  file(WRITE ${bad}/index.json "${index}")
  strata(1 "strata: error: .*${file}': tensor 'embed': piece .* is missing"
         ckpt consolidate --checkpoint ${bad} --out ${WORK}/bad.safetensors)
  file(COPY_FILE ${ckpt}/index.json ${bad}/index.json)
  file(WRITE ${bad}/shard_00002_of_00003.safetensors "not a safetensors file")
  strata(1 "shard_00002_of_00003.safetensors" ckpt consolidate --checkpoint ${bad} --out ${WORK}/bad.safetensors)
  file(REMOVE ${bad}/shard_00002_of_00003.safetensors)
  strata(1 "shard_00002_of_00003.safetensors" ckpt consolidate --checkpoint ${bad} --out ${WORK}/bad.safetensors)
  strata(1 "${WORK}/missing/index.json" ckpt consolidate --checkpoint ${WORK}/missing --out ${WORK}/bad.safetensors)
  if(EXISTS ${WORK}/bad.safetensors)
    message(FATAL_ERROR "a failed consolidate left ${WORK}/bad.safetensors behind")
  endif()
  strata(2 "" ckpt consolidate --checkpoint ${ckpt})  # --out is required

  # A single-process checkpoint is one plain file already; consolidating it still works.
  execute_process(COMMAND ${STRATA} ckpt consolidate --checkpoint ${WORK}/single --out ${WORK}/single.safetensors
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "already one safetensors file of whole tensors")
    message(FATAL_ERROR "ckpt consolidate of a single-process checkpoint: exit ${rc}\n${out}${err}")
  endif()
elseif(CASE STREQUAL "python")
  # The first interpreter with the safetensors package, else the first that runs at all.
  set(candidates $ENV{STRATA_PYTHON} ${PYTHON} /usr/bin/python3)
  set(chosen "")
  foreach(py ${candidates})
    if(NOT EXISTS ${py})
      continue()
    endif()
    execute_process(COMMAND ${py} -c "import safetensors, numpy" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    if(rc EQUAL 0)
      set(chosen ${py})
      break()
    endif()
    execute_process(COMMAND ${py} -c "import json, struct" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    if(rc EQUAL 0 AND NOT chosen)
      set(chosen ${py})
    endif()
  endforeach()
  if(NOT chosen)
    message("SKIPPED: no python3 interpreter found (tried: ${candidates})")
    return()
  endif()
  foreach(file ${library_file} ${WORK}/single/shard_00000_of_00001.safetensors)
    execute_process(COMMAND ${chosen} ${SCRIPT} ${file} ${WORK}/expected.json RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${SCRIPT} (${chosen}) on ${file} failed with exit code ${rc}")
    endif()
  endforeach()
else()
  message(FATAL_ERROR "ckpt.cmake: unknown CASE '${CASE}'")
endif()
