# Sharded checkpoints end to end. Included by tests/CMakeLists.txt it registers:
#   ckpt_e2e_write        the gtest ShardedCheckpointE2E.WritesArtifacts writes a 3-rank
#                         checkpoint, its library consolidation, a single-process checkpoint
#                         and expected.json (fixture)
#   ckpt_cli_consolidate  `strata ckpt consolidate` equals the library's file byte for byte;
#                         a damaged checkpoint exits 1 naming the file and tensor; a
#                         single-process checkpoint is said to be one file already (label e2e)
#   ckpt_cli_hostile      `ckpt consolidate --out` refuses a FIFO, symlink, directory, device
#                         (exit 2) and a path inside the input checkpoint (exit 2, input
#                         intact); a 100k-deep index.json and a wrong CRC32 exit 1
#   ckpt_eval_nonfinite   a trained checkpoint with a NaN weight: a flipped byte is a CRC32
#                         mismatch (exit 1), without checksums the NaN is refused naming the
#                         tensor (exit 1), with STRATA_ALLOW_NONFINITE=1 eval reports the
#                         non-finite loss and exits 1
#   ckpt_mpi_one_rank_nonfinite_{zero3,tp2}
#                         `mpirun -np 2` resumes a checkpoint with a NaN in the piece only
#                         rank 1 reads (its ZeRO-3 slice / tp shard, checksums removed): the
#                         job ends with exit 1 in seconds although comm.timeout_s is 300,
#                         rank 1 naming the file and tensor, rank 0 "rank 1: <that error>"
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
  add_test(NAME ckpt_cli_hostile
           COMMAND ${CMAKE_COMMAND} -DCASE=hostile -DSTRATA=$<TARGET_FILE:strata_cli> -DWORK=${_ckpt_work}
                   -P ${CMAKE_CURRENT_LIST_FILE})
  add_test(NAME ckpt_eval_nonfinite
           COMMAND ${CMAKE_COMMAND} -DCASE=nonfinite -DSTRATA=$<TARGET_FILE:strata_cli> -DWORK=${_ckpt_work}_nonfinite
                   -DCONFIG=${PROJECT_SOURCE_DIR}/tests/data_files/tiny_mlp.yaml -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(ckpt_eval_nonfinite PROPERTIES LABELS e2e TIMEOUT 120)
  if(MPIEXEC_EXECUTABLE)
    foreach(layout zero3 tp2)
      if(layout STREQUAL "zero3")
        set(_layout_set "parallel.zero_stage=3")
      else()
        set(_layout_set "parallel.tp=2")
      endif()
      add_test(NAME ckpt_mpi_one_rank_nonfinite_${layout}
               COMMAND ${CMAKE_COMMAND} -DCASE=one_rank_nonfinite -DSTRATA=$<TARGET_FILE:strata_cli>
                       -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DLAYOUT=${_layout_set}
                       -DWORK=${_ckpt_work}_one_rank_${layout}
                       -DCONFIG=${PROJECT_SOURCE_DIR}/tests/data_files/tiny_gpt.yaml
                       -DCORPUS=${PROJECT_SOURCE_DIR}/tests/data_files/tiny_corpus.txt -P ${CMAKE_CURRENT_LIST_FILE})
      set_tests_properties(ckpt_mpi_one_rank_nonfinite_${layout} PROPERTIES LABELS "e2e;dist" TIMEOUT 120)
    endforeach()
  endif()
  set_tests_properties(ckpt_cli_consolidate ckpt_cli_hostile ckpt_python_check PROPERTIES
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

# safetensors_header(<file> <length var> <header var>): the JSON header of a safetensors
# file and its length (the 8-byte little-endian prefix).
function(safetensors_header file len_var header_var)
  file(READ ${file} len_hex LIMIT 8 HEX)
  set(n 0)
  foreach(i 7 6 5 4 3 2 1 0)
    math(EXPR at "${i} * 2")
    string(SUBSTRING ${len_hex} ${at} 2 byte)
    math(EXPR n "${n} * 256 + 0x${byte}")
  endforeach()
  file(READ ${file} header OFFSET 8 LIMIT ${n})
  set(${len_var} ${n} PARENT_SCOPE)
  set(${header_var} "${header}" PARENT_SCOPE)
endfunction()

# write_nan(<file> <header length> <header> <tensor>): NaN (f32 0x7fc00000) over the first
# element of `tensor` in the safetensors file, in place.
function(write_nan file n header tensor)
  string(JSON begin GET "${header}" ${tensor} data_offsets 0)
  math(EXPR data_start "8 + ${n} + ${begin}")
  execute_process(COMMAND sh -c "printf '\\000\\000\\300\\177' | dd of='${file}' bs=1 seek=${data_start} conv=notrunc status=none"
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "could not write the NaN into ${file}")
  endif()
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
elseif(CASE STREQUAL "hostile")
  set(h ${WORK}/hostile)
  file(REMOVE_RECURSE ${h})
  file(MAKE_DIRECTORY ${h})
  file(SHA256 ${ckpt}/shard_00000_of_00003.safetensors shard_before)
  # --out must be a new path or a regular file, outside the checkpoint: exit 2 naming --out.
  execute_process(COMMAND mkfifo ${h}/fifo RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mkfifo failed")
  endif()
  strata(2 "--out '${h}/fifo' is a FIFO" ckpt consolidate --checkpoint ${ckpt} --out ${h}/fifo)
  file(WRITE ${h}/target "keep me")
  file(CREATE_LINK ${h}/target ${h}/link SYMBOLIC)
  strata(2 "--out '${h}/link' is a symbolic link" ckpt consolidate --checkpoint ${ckpt} --out ${h}/link)
  file(READ ${h}/target kept)
  if(NOT IS_SYMLINK ${h}/link OR NOT kept STREQUAL "keep me")
    message(FATAL_ERROR "a refused consolidate changed the symlink or its target")
  endif()
  strata(2 "--out '${h}' is a directory" ckpt consolidate --checkpoint ${ckpt} --out ${h})
  execute_process(COMMAND mknod ${h}/null c 1 3 RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0)  # a private copy of /dev/null's node (never the real /dev/full)
    strata(2 "--out '${h}/null' is a character device" ckpt consolidate --checkpoint ${ckpt} --out ${h}/null)
    execute_process(COMMAND stat -c %F ${h}/null OUTPUT_VARIABLE kind OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT kind STREQUAL "character special file")
      message(FATAL_ERROR "a refused consolidate replaced the device node (now: ${kind})")
    endif()
  else()
    message(STATUS "mknod not permitted here: the character-device case is not run")
  endif()
  strata(2 "is inside the checkpoint directory" ckpt consolidate --checkpoint ${ckpt}
         --out ${ckpt}/shard_00000_of_00003.safetensors)
  strata(2 "is inside the checkpoint directory" ckpt consolidate --checkpoint ${ckpt}/ --out ${ckpt}/../ckpt/new.safetensors)
  file(CREATE_LINK ${ckpt}/shard_00000_of_00003.safetensors ${h}/hard)  # a hard link to an input shard
  strata(2 "--out '${h}/hard' is the checkpoint's own file" ckpt consolidate --checkpoint ${ckpt} --out ${h}/hard)
  file(SHA256 ${ckpt}/shard_00000_of_00003.safetensors shard_after)
  if(NOT shard_before STREQUAL shard_after OR EXISTS ${ckpt}/new.safetensors)
    message(FATAL_ERROR "a refused consolidate changed the input checkpoint")
  endif()

  # Hostile index.json: 100k levels of nesting, and a CRC32 that does not match.
  set(bad ${h}/ckpt)
  file(COPY ${ckpt}/ DESTINATION ${bad})
  file(READ ${ckpt}/index.json index)
  string(REPEAT "[" 100000 open)
  string(REPEAT "]" 100000 close)
  string(REPLACE "\"meta\": {" "\"meta\": {\"deep\": ${open}${close}," deep "${index}")
  file(WRITE ${bad}/index.json "${deep}")
  strata(1 "strata: error: checkpoint '${bad}/index.json': JSON nested deeper than 128 levels \\(recursion limit exceeded\\)"
         ckpt consolidate --checkpoint ${bad} --out ${h}/out.safetensors)
  string(JSON index SET "${index}" checksums shard_00001_of_00003.safetensors crc32 "\"00000000\"")
  file(WRITE ${bad}/index.json "${index}")
  strata(1 "strata: error: checkpoint '${bad}/shard_00001_of_00003.safetensors': CRC32 mismatch"
         ckpt consolidate --checkpoint ${bad} --out ${h}/out.safetensors)
  if(EXISTS ${h}/out.safetensors)
    message(FATAL_ERROR "a failed consolidate left ${h}/out.safetensors behind")
  endif()
elseif(CASE STREQUAL "nonfinite")
  file(REMOVE_RECURSE ${WORK})
  file(MAKE_DIRECTORY ${WORK})
  strata(0 "" train --config ${CONFIG} --set run.dir=${WORK}/run --set train.max_steps=2 --set train.eval_every=0)
  file(GLOB shard ${WORK}/run/checkpoints/step_*/shard_00000_of_00001.safetensors)
  get_filename_component(ck ${shard} DIRECTORY)
  # NaN (f32 0x7fc00000) over the first element of the last model tensor (the output
  # layer's bias, so the logits and the loss are NaN: ReLU would swallow a NaN weight).
  safetensors_header(${shard} n header)
  file(READ ${ck}/index.json index)
  string(JSON last LENGTH "${index}" meta model_tensors)
  math(EXPR last "${last} - 1")
  string(JSON victim GET "${index}" meta model_tensors ${last})
  write_nan(${shard} ${n} "${header}" ${victim})
  strata(1 "strata: error: checkpoint '${shard}': CRC32 mismatch" eval --checkpoint ${WORK}/run)
  string(JSON index REMOVE "${index}" checksums)
  file(WRITE ${ck}/index.json "${index}")
  strata(1 "strata: error: checkpoint '${shard}': tensor '${victim}' .*is not finite .*STRATA_ALLOW_NONFINITE=1"
         eval --checkpoint ${WORK}/run)
  set(ENV{STRATA_ALLOW_NONFINITE} 1)
  strata(1 "strata: error: checkpoint '${ck}': the [a-z]+ loss is not finite" eval --checkpoint ${WORK}/run)
elseif(CASE STREQUAL "one_rank_nonfinite")
  file(REMOVE_RECURSE ${WORK})
  file(MAKE_DIRECTORY ${WORK})
  set(mpirun ${MPIEXEC} -np 2 --oversubscribe --allow-run-as-root)
  set(sets --set run.dir=${WORK}/run --set data.path=${CORPUS} --set train.max_steps=2
           --set train.checkpoint_every=2 --set train.eval_every=0 --set model.dropout=0 --set ${LAYOUT})
  execute_process(COMMAND ${mpirun} ${STRATA} train --config ${CONFIG} ${sets}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "training the checkpoint failed (${rc}):\n${out}${err}")
  endif()
  set(shard ${WORK}/run/checkpoints/step_00000002/shard_00001_of_00002.safetensors)
  if(NOT EXISTS ${shard})
    message(FATAL_ERROR "no ${shard}")
  endif()
  # NaN (f32 0x7fc00000) over the first element of the first model tensor piece in rank
  # 1's shard file; the checksums go, so only the non-finite check can find it.
  safetensors_header(${shard} n header)
  string(JSON count LENGTH "${header}")
  set(victim "")
  math(EXPR last "${count} - 1")
  foreach(i RANGE ${last})
    string(JSON key MEMBER "${header}" ${i})
    # Model pieces are keyed by the parameter name; optimizer state has a prefix.
    if(key MATCHES "^h\\.0\\." OR key MATCHES "^wte")
      string(JSON dtype GET "${header}" ${key} dtype)
      if(dtype STREQUAL "F32")
        set(victim ${key})
        break()
      endif()
    endif()
  endforeach()
  if(NOT victim)
    message(FATAL_ERROR "no f32 model piece in ${shard}: ${header}")
  endif()
  write_nan(${shard} ${n} "${header}" ${victim})
  set(ck ${WORK}/run/checkpoints/step_00000002)
  file(READ ${ck}/index.json index)
  string(JSON index REMOVE "${index}" checksums)
  file(WRITE ${ck}/index.json "${index}")
  file(SHA256 ${shard} shard_before)

  string(TIMESTAMP t0 "%s")
  execute_process(COMMAND ${mpirun} --tag-output ${STRATA} train --config ${CONFIG} ${sets} --set train.max_steps=4
                          --set comm.timeout_s=300 --resume auto
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(TIMESTAMP t1 "%s")
  math(EXPR took "${t1} - ${t0}")
  set(all "${out}${err}")
  if(NOT rc EQUAL 1)
    message(FATAL_ERROR "resume with a NaN in rank 1's piece: mpirun exit ${rc}, expected 1\n${all}")
  endif()
  if(took GREATER 60)
    message(FATAL_ERROR "the job took ${took} s to end (comm.timeout_s is 300): a rank waited for the other\n${all}")
  endif()
  # --tag-output prefixes each line with [jobid,rank]<stream>.
  string(REGEX MATCH ",1\\]<stderr>:strata: error: checkpoint '${shard}': tensor '[^']*' [^\n]*is not finite" own "${all}")
  string(REGEX MATCH ",0\\]<stderr>:strata: error: rank 1: checkpoint '${shard}': tensor '[^']*' [^\n]*is not finite"
         told "${all}")
  if(NOT own OR NOT told)
    message(FATAL_ERROR "expected rank 1's error naming ${shard} and the tensor, and rank 0 repeating it\n${all}")
  endif()
  if(all MATCHES "never joined|timed out")
    message(FATAL_ERROR "the job ended by a timeout, not by the agreed error\n${all}")
  endif()
  file(SHA256 ${shard} shard_after)
  file(READ ${WORK}/run/checkpoints/LATEST latest)
  if(NOT shard_after STREQUAL shard_before OR NOT latest MATCHES "step_00000002")
    message(FATAL_ERROR "the failed resume changed the checkpoint (LATEST: ${latest})")
  endif()
  message(STATUS "ended in ${took} s:\n${all}")
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
