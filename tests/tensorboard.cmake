# run.tensorboard end to end (label e2e): a tiny MLP run writes <run.dir>/tb/events.out.
# tfevents.*; where the tensorboard Python package is installed (a cross-check tool, not a
# dependency), its own reader must see every train loss and eval accuracy that
# metrics.jsonl holds, at the same steps.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  find_program(strata_tb_python NAMES python3)
  add_test(NAME e2e_tensorboard
           COMMAND ${CMAKE_COMMAND} -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                   -DPYTHON=${strata_tb_python} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/e2e/tensorboard
                   -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(e2e_tensorboard PROPERTIES LABELS e2e TIMEOUT 120)
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
  message(STATUS "no python3: the tensorboard reader cross-check is skipped")
  return()
endif()
execute_process(COMMAND ${PYTHON} ${SRC}/tests/tb_crosscheck.py ${WORK}/run RESULT_VARIABLE rc OUTPUT_VARIABLE OUT
                ERROR_VARIABLE ERR)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tb_crosscheck.py: exit ${rc}\n${OUT}${ERR}")
endif()
message(STATUS "${OUT}")
