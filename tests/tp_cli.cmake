# The issue-14 CLI proof (labels accuracy, dist, long), and a smoke test of `strata bench tp`: `mpirun -np 2 strata train --config
# configs/gpt_char_tp.yaml` (and with parallel.sequence_parallel) reaches the validation
# loss of the single-process configs/gpt_char.yaml run within 1e-3 after the full 800
# steps, and `strata sample` reads its checkpoint in one process. Two 800-step runs take
# ~6 minutes of the 2-core CI host, more than the suite's budget, so the cases are
# registered only with -DSTRATA_LONG_TESTS=ON (./test.sh never runs them); the figures of
# the last run are in docs/tensor_parallel.md.
#   cmake -B build -DSTRATA_LONG_TESTS=ON && ctest --test-dir build -L long
# Run as `cmake -DCASE=<tp_cli|tp_cli_sp> -DSTRATA=... -DMPIRUN=... -DSRC=... -DWORK=... -P tp_cli.cmake`
# (-DSTEPS=N shortens both runs for a smoke test of the script; ctest runs the full 800).

if(NOT CMAKE_SCRIPT_MODE_FILE)
  # Always: `strata bench tp` runs every layout, prints its table and exits 0 (a smoke
  # test, tests/cmake/bench_smoke.cmake; the figures are in docs/benchmarks.md).
  add_test(NAME tp_bench_smoke
           COMMAND ${CMAKE_COMMAND} -DCASE=tp -DSTRATA=$<TARGET_FILE:strata_cli>
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/bench_smoke.cmake)
  set_tests_properties(tp_bench_smoke PROPERTIES LABELS unit TIMEOUT 120)
  option(STRATA_LONG_TESTS "Register the long end-to-end tests (tests/tp_cli.cmake)" OFF)
  find_program(strata_tp_mpirun NAMES mpirun mpiexec)
  if(NOT STRATA_LONG_TESTS OR NOT strata_tp_mpirun)
    return()
  endif()
  foreach(case tp_cli tp_cli_sp)
    add_test(NAME accuracy_${case}
             COMMAND ${CMAKE_COMMAND} -DCASE=${case} -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                     -DMPIRUN=${strata_tp_mpirun} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/long/${case}
                     -P ${CMAKE_CURRENT_LIST_FILE})
    set_tests_properties(accuracy_${case} PROPERTIES LABELS "accuracy;dist;long" TIMEOUT 1500 PROCESSORS 2
                         ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endforeach()
  return()
endif()

# ---------------------------------------------------------------- script mode
include(${CMAKE_CURRENT_LIST_DIR}/cmake/script_helpers.cmake)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# The final eval record's loss (the end-of-run evaluation on the val split).
function(final_val_loss file out)
  file(STRINGS ${file} evals REGEX "\"type\":\"eval\"")
  if(NOT evals)
    message(FATAL_ERROR "${file}: no eval records")
  endif()
  list(GET evals -1 last)
  string(JSON split GET "${last}" split)
  string(JSON step GET "${last}" step)
  if(NOT split STREQUAL "val" OR NOT step EQUAL STEPS)
    message(FATAL_ERROR "${file}: the last eval is on ${split} at step ${step}, expected val at ${STEPS}")
  endif()
  string(JSON loss GET "${last}" loss)
  set(${out} ${loss} PARENT_SCOPE)
endfunction()

if(NOT STEPS)
  set(STEPS 800)
endif()
set(common --set train.max_steps=${STEPS} --set train.save_final=true)
set(extra ${common})
if(CASE STREQUAL "tp_cli_sp")
  list(APPEND extra --set parallel.sequence_parallel=true)
elseif(NOT CASE STREQUAL "tp_cli")
  message(FATAL_ERROR "unknown case '${CASE}'")
endif()
string(TIMESTAMP t0 "%s")
run(0 train --config ${SRC}/configs/gpt_char.yaml --set run.dir=one --set run.threads=1 ${common})
string(TIMESTAMP t1 "%s")
execute_process(COMMAND ${MPIRUN} -np 2 --oversubscribe ${STRATA} train --config ${SRC}/configs/gpt_char_tp.yaml
                        --set run.dir=tp ${extra}
                WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpirun -np 2 strata train: exit ${rc}\n${OUT}\n${ERR}")
endif()
string(TIMESTAMP t2 "%s")
final_val_loss(${WORK}/one/metrics.jsonl one)
final_val_loss(${WORK}/tp/metrics.jsonl tp)
math(EXPR one_s "${t1} - ${t0}")
math(EXPR tp_s "${t2} - ${t1}")
# |tp - one| < 1e-3, in CMake's integer arithmetic on 1e-6 units (the losses are written
# as plain decimals such as 1.95662).
function(micro x out)
  if(NOT x MATCHES "^([0-9]+)\\.?([0-9]*)$")
    message(FATAL_ERROR "loss '${x}' is not a plain decimal")
  endif()
  set(int "${CMAKE_MATCH_1}")
  set(frac "${CMAKE_MATCH_2}000000")
  string(SUBSTRING "${frac}" 0 6 frac)
  string(REGEX REPLACE "^0+([0-9])" "\\1" frac "${frac}")
  math(EXPR v "${int} * 1000000 + ${frac}")
  set(${out} ${v} PARENT_SCOPE)
endfunction()
micro(${one} one_u)
micro(${tp} tp_u)
math(EXPR diff "${tp_u} - ${one_u}")
if(diff LESS 0)
  math(EXPR diff "0 - ${diff}")
endif()
if(NOT diff LESS 1000)
  message(FATAL_ERROR "${CASE}: val loss at step 800 ${tp} (mpirun -np 2, tp 2) vs ${one} (one process): "
                      "differs by ${diff}e-6, more than 1e-3")
endif()
# The tp-2 run's checkpoint samples in one process.
run(0 sample --checkpoint tp --prompt "The " --tokens 60 --seed 1 --threads 1)
expect(OUT "The ")
string(LENGTH "${OUT}" len)
if(len LESS 60)
  message(FATAL_ERROR "sample too short: '${OUT}'")
endif()
message("${CASE}: val loss ${tp} (tp 2, ${tp_s} s) vs ${one} (one process, ${one_s} s)")
