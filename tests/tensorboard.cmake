# run.tensorboard end to end (label e2e): a tiny MLP run writes <run.dir>/tb/events.out.
# tfevents.*, and TensorBoard's own reader must see every train loss and eval accuracy
# that metrics.jsonl holds, at the same steps. Without python3 or the tensorboard package
# (a cross-check tool, not a dependency) the test is reported skipped, with the reason: a
# file that exists says nothing about what a reader sees in it.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  find_program(strata_tb_python NAMES python3)
  add_test(NAME e2e_tensorboard
           COMMAND ${CMAKE_COMMAND} -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                   -DPYTHON=${strata_tb_python} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/e2e/tensorboard
                   -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(e2e_tensorboard PROPERTIES LABELS e2e TIMEOUT 120
                       SKIP_REGULAR_EXPRESSION "TensorBoard's reader is unavailable")
  return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/cmake/script_helpers.cmake)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
run(0 train --config ${SRC}/tests/data_files/tiny_mlp.yaml --set run.dir=run --set run.threads=1
    --set train.max_steps=20 --set train.log_every=5 --set train.eval_every=10 --set run.tensorboard=true)
file(GLOB events ${WORK}/run/tb/events.out.tfevents.*)
list(LENGTH events n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one event file in run/tb, found: ${events}")
endif()
if(NOT PYTHON)
  message("TensorBoard's reader is unavailable: no python3")
  return()
endif()
execute_process(COMMAND ${PYTHON} ${SRC}/tests/tb_crosscheck.py ${WORK}/run RESULT_VARIABLE rc OUTPUT_VARIABLE OUT
                ERROR_VARIABLE ERR)
if(rc EQUAL 77)  # tb_crosscheck.py could not import the reader
  message("TensorBoard's reader is unavailable: ${OUT}${ERR}")
  return()
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tb_crosscheck.py: exit ${rc}\n${OUT}${ERR}")
endif()
message(STATUS "${OUT}")
