# End-to-end test of run.trace (ctest labels e2e;dist): 2 mpirun ranks train 3 steps with
# tracing on; each rank's file must be trace-event JSON with forward, backward, all_reduce
# and optimizer slices; `strata trace merge`, `trace summary` and `plot --trace` then run.
# Included by tests/CMakeLists.txt it registers the test; run with -P it executes it.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  find_program(strata_trace_mpirun NAMES mpirun mpiexec)
  if(strata_trace_mpirun)
    add_test(NAME e2e_trace_two_ranks
             COMMAND ${CMAKE_COMMAND} -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                     -DMPIRUN=${strata_trace_mpirun} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/e2e/trace_two_ranks
                     -P ${CMAKE_CURRENT_LIST_FILE})
    set_tests_properties(e2e_trace_two_ranks PROPERTIES LABELS "e2e;dist" TIMEOUT 120 PROCESSORS 2
                         ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endif()
  return()
endif()

cmake_policy(VERSION 3.25)  # quoted strings are not variable names in if()
include(${CMAKE_CURRENT_LIST_DIR}/cmake/script_helpers.cmake)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

execute_process(COMMAND ${MPIRUN} --oversubscribe --allow-run-as-root -np 2 ${STRATA} train
                        --config ${SRC}/tests/data_files/tiny_mlp.yaml --set run.dir=run --set run.threads=1
                        --set train.max_steps=3 --set train.eval_every=0 --set run.trace.start_step=0
                        --set run.trace.steps=3
                WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR TIMEOUT 60)
if(NOT "${rc}" STREQUAL "0")
  message(FATAL_ERROR "mpirun -np 2 strata train (traced): exit code ${rc}\nstdout:\n${OUT}\nstderr:\n${ERR}")
endif()

string(REGEX MATCH "model: [a-z]+, ([0-9]+) parameters" _ "${OUT}")
set(params "${CMAKE_MATCH_1}")
if(NOT params)
  message(FATAL_ERROR "no parameter count in the run's output:\n${OUT}")
endif()

# check_rank_file(<rank>): rank<R>.json parses and holds the slices of 3 traced steps.
function(check_rank_file rank)
  set(file ${WORK}/run/trace/rank${rank}.json)
  if(NOT EXISTS ${file})
    message(FATAL_ERROR "no trace file ${file}")
  endif()
  file(READ ${file} text)
  string(JSON n ERROR_VARIABLE err LENGTH "${text}" traceEvents)  # parses the whole file
  if(err)
    message(FATAL_ERROR "${file} is not trace-event JSON: ${err}")
  endif()
  set(steps 0)
  set(forward 0)
  set(backward 0)
  set(all_reduce 0)
  set(all_reduce_bytes 0)
  set(optimizer 0)
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    string(JSON ph GET "${text}" traceEvents ${i} ph)
    if(NOT ph STREQUAL "X")
      continue()
    endif()
    string(JSON pid GET "${text}" traceEvents ${i} pid)
    string(JSON name GET "${text}" traceEvents ${i} name)
    string(JSON cat GET "${text}" traceEvents ${i} cat)
    if(NOT pid EQUAL rank)
      message(FATAL_ERROR "${file}: slice '${name}' has pid ${pid}")
    endif()
    string(REGEX REPLACE " .*" "" word "${name}")
    if(word STREQUAL "step" AND cat STREQUAL "step")
      math(EXPR steps "${steps} + 1")
    elseif(word MATCHES "^(forward|backward|optimizer)$" AND cat STREQUAL "compute")
      math(EXPR ${word} "${${word}} + 1")
    elseif(word STREQUAL "all_reduce" AND cat STREQUAL "comm")
      string(JSON bytes GET "${text}" traceEvents ${i} args bytes)
      string(JSON group GET "${text}" traceEvents ${i} args group)
      if(NOT bytes MATCHES "^[0-9]+$" OR bytes EQUAL 0 OR NOT group STREQUAL "world")
        message(FATAL_ERROR "${file}: all_reduce args bytes=${bytes} group=${group}")
      endif()
      math(EXPR all_reduce "${all_reduce} + 1")
      if(bytes GREATER 8)  # not the logged loss (one f64)
        math(EXPR all_reduce_bytes "${all_reduce_bytes} + ${bytes}")
      endif()
    endif()
  endforeach()
  # 3 steps, each with a model forward (and its modules'), a backward, an optimizer step,
  # and at least one bucket all-reduce.
  if(NOT steps EQUAL 3 OR forward LESS 6 OR backward LESS 3 OR NOT optimizer EQUAL 3 OR all_reduce LESS 3)
    message(FATAL_ERROR "rank ${rank}: steps ${steps}, forward ${forward}, backward ${backward}, optimizer "
                        "${optimizer}, all_reduce ${all_reduce} slices")
  endif()
  # DDP all-reduces every f32 gradient once per step: 3 x 4 bytes x the parameter count.
  math(EXPR want "3 * 4 * ${params}")
  if(NOT all_reduce_bytes EQUAL want)
    message(FATAL_ERROR "rank ${rank}: the gradient all_reduce slices carry ${all_reduce_bytes} bytes, expected "
                        "${want} (3 steps x 4 bytes x ${params} parameters)")
  endif()
endfunction()
check_rank_file(0)
check_rank_file(1)

run(0 trace merge run)
expect(OUT "wrote run/trace/merged.json" "from 2 rank(s)")
run(0 trace summary run)
expect(OUT "rank  steps  step ms  compute ms" "\n   0      3 " "\n   1      3 ")
run(0 plot --trace run/trace/merged.json -o gantt.svg)
file(READ ${WORK}/gantt.svg svg)
expect(svg ">rank 0 main</text>" ">rank 1 main</text>" ">comm world</text>" "class=\"compute\"" "class=\"comm\"")
run(1 trace merge missing_dir)
expect(ERR "no rank<R>.json under 'missing_dir/trace'")
# Config errors name the key path.
run(2 train --config ${SRC}/tests/data_files/tiny_mlp.yaml --set run.trace.steps=-1)
expect(ERR "run.trace.steps: expected a value in [0, 1e+06], got -1")
run(2 train --config ${SRC}/tests/data_files/tiny_mlp.yaml --set run.trace.step=2)
expect(ERR "run.trace.step: unknown key")

# Pipeline actions: a traced 1F1B step over 2 stages records F and B slices with their
# micro-batch and stage on both ranks (4 micro-batches each).
execute_process(COMMAND ${MPIRUN} --oversubscribe --allow-run-as-root -np 2 ${STRATA} train
                        --config ${SRC}/configs/gpt_char_pp.yaml --set run.dir=pp --set run.threads=1
                        --set train.max_steps=2 --set train.eval_every=0 --set run.trace.start_step=1
                        --set run.trace.steps=1 --set parallel.microbatches=4
                WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR TIMEOUT 90)
if(NOT "${rc}" STREQUAL "0")
  message(FATAL_ERROR "mpirun -np 2 strata train (pipeline, traced): exit code ${rc}\n${OUT}\n${ERR}")
endif()
foreach(rank 0 1)
  file(READ ${WORK}/pp/trace/rank${rank}.json text)
  foreach(kind F B)
    foreach(mb 0 1 2 3)
      string(FIND "${text}" "\"name\":\"${kind}\",\"cat\":\"pipeline\"" at)
      string(REGEX MATCH "\"name\":\"${kind}\",\"cat\":\"pipeline\"[^}]*\"args\":{\"mb\":${mb},\"stage\":${rank}}" hit "${text}")
      if(at EQUAL -1 OR NOT hit)
        message(FATAL_ERROR "pp/trace/rank${rank}.json: no ${kind} slice for micro-batch ${mb} of stage ${rank}")
      endif()
    endforeach()
  endforeach()
endforeach()
