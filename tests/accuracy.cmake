# Accuracy in CI (ctest label accuracy): the shipped configs still reach their targets on
# real data. Included by tests/CMakeLists.txt it registers the cases; run as
# `cmake -DCASE=<name> -DSTRATA=<binary> -DSRC=<source dir> -DWORK=<dir> -P accuracy.cmake`
# it trains one and checks the final eval record of metrics.jsonl (not stdout).
#   fashion_mlp: configs/fashion_mlp.yaml unchanged (15 epochs), test accuracy >= 0.88
#                (the published 256-128-100 MLP: 0.8833).
#   gpt_char:    configs/gpt_char.yaml cut from 800 to 200 steps, val loss below the
#                bigram entropy of the same split, which the run writes beside it.
# One thread each (ctest runs two at once on the 2 cores); times in docs/reliability.md.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  foreach(case fashion_mlp gpt_char)
    add_test(NAME accuracy_${case}
             COMMAND ${CMAKE_COMMAND} -DCASE=${case} -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                     -DWORK=${CMAKE_CURRENT_BINARY_DIR}/accuracy/${case} -P ${CMAKE_CURRENT_LIST_FILE})
    set_tests_properties(accuracy_${case} PROPERTIES LABELS accuracy TIMEOUT 600)
  endforeach()
  return()
endif()

# ---------------------------------------------------------------- script mode
include(${CMAKE_CURRENT_LIST_DIR}/cmake/script_helpers.cmake)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# final_eval(<metrics.jsonl> <out var>): the last eval record, which must be at the last
# logged training step (the end-of-run evaluation, not an intermediate one).
function(final_eval file out)
  file(STRINGS ${file} evals REGEX "\"type\":\"eval\"")
  file(STRINGS ${file} trains REGEX "\"type\":\"train\"")
  if(NOT evals OR NOT trains)
    message(FATAL_ERROR "${file}: no eval or no train records")
  endif()
  list(GET evals -1 last)
  list(GET trains -1 last_train)
  string(JSON step GET "${last}" step)
  string(JSON train_step GET "${last_train}" step)
  if(NOT step EQUAL train_step)
    message(FATAL_ERROR "${file}: the last eval record is at step ${step}, training ended at ${train_step}")
  endif()
  set(${out} "${last}" PARENT_SCOPE)
endfunction()

# number(<record> <key> <out var>): the record's field, which must be a JSON number (a NaN
# is written as null, and an empty string compares false with LESS).
function(number rec key out)
  string(JSON type ERROR_VARIABLE err TYPE "${rec}" ${key})
  if(err)
    message(FATAL_ERROR "${CASE}: no '${key}' (${err})\n${rec}")
  elseif(NOT type STREQUAL "NUMBER")
    message(FATAL_ERROR "${CASE}: '${key}' is ${type}, not a number\n${rec}")
  endif()
  string(JSON v GET "${rec}" ${key})
  set(${out} "${v}" PARENT_SCOPE)
endfunction()

string(TIMESTAMP t0 "%s")
if(CASE STREQUAL "fashion_mlp")
  run(0 train --config ${SRC}/configs/fashion_mlp.yaml --set run.dir=run --set run.threads=1)
  final_eval(${WORK}/run/metrics.jsonl rec)
  string(JSON split GET "${rec}" split)
  number("${rec}" accuracy acc)
  number("${rec}" samples samples)
  # Fashion-MNIST's test split: 10,000 images, every one of them scored.
  if(NOT split STREQUAL "test" OR NOT samples EQUAL 10000 OR NOT acc GREATER_EQUAL 0.88 OR acc GREATER 1)
    message(FATAL_ERROR "fashion_mlp: ${split} accuracy ${acc} over ${samples} samples, expected >= 0.88 over the "
                        "10000 of the test split\n${rec}")
  endif()
  set(result "test accuracy ${acc} over ${samples} samples (target >= 0.88)")
elseif(CASE STREQUAL "gpt_char")
  run(0 train --config ${SRC}/configs/gpt_char.yaml --set run.dir=run --set run.threads=1 --set train.max_steps=200
      --set schedule.warmup_steps=40 --set train.eval_every=0 --set train.checkpoint_every=0)
  final_eval(${WORK}/run/metrics.jsonl rec)
  string(JSON split GET "${rec}" split)
  number("${rec}" loss loss)
  number("${rec}" bigram_entropy bigram)
  if(NOT split STREQUAL "val" OR NOT loss LESS bigram)
    message(FATAL_ERROR "gpt_char: ${split} loss ${loss}, expected below the bigram entropy ${bigram}\n${rec}")
  endif()
  set(result "val loss ${loss} (bigram entropy ${bigram})")
else()
  message(FATAL_ERROR "unknown accuracy case '${CASE}'")
endif()
string(TIMESTAMP t1 "%s")
math(EXPR secs "${t1} - ${t0}")
message("${CASE}: ${result} in ${secs} s")
