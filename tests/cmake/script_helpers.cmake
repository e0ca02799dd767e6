# Helpers for the script-mode test cases (`cmake -DCASE=... -P tests/<file>.cmake`) that
# drive the `strata` binary: run it, check its output, compare logged losses. Expects
# STRATA (the binary) and WORK (its working directory) to be set by the caller.

# run(<expected exit code> args...): runs strata in WORK, fails unless the exit code
# matches; leaves OUT and ERR for further checks.
macro(run expected)
  execute_process(COMMAND ${STRATA} ${ARGN} WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT
                  ERROR_VARIABLE ERR)
  if(NOT "${rc}" STREQUAL "${expected}")
    message(FATAL_ERROR "strata ${ARGN}\nexit code ${rc}, expected ${expected}\nstdout:\n${OUT}\nstderr:\n${ERR}")
  endif()
endmacro()

# expect(<var> <text>...): each text must occur literally in the variable.
macro(expect var)
  foreach(needle ${ARGN})
    string(FIND "${${var}}" "${needle}" pos)
    if(pos EQUAL -1)
      message(FATAL_ERROR "expected '${needle}' in ${var}:\n${${var}}")
    endif()
  endforeach()
endmacro()
# expect_not(<var> <text>...): the texts must not occur.
macro(expect_not var)
  foreach(needle ${ARGN})
    string(FIND "${${var}}" "${needle}" pos)
    if(NOT pos EQUAL -1)
      message(FATAL_ERROR "did not expect '${needle}' in ${var}:\n${${var}}")
    endif()
  endforeach()
endmacro()

# mpi_run(<np> <args...>): `mpirun -np <np> strata <args>` in WORK (MPIRUN, STRATA), exit 0
# expected (else FATAL_ERROR with its output); OUT and ERR are left for expect().
macro(mpi_run np)
  execute_process(COMMAND ${MPIRUN} --oversubscribe --allow-run-as-root -np ${np} ${STRATA} ${ARGN}
                  WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR TIMEOUT 120)
  if(NOT "${rc}" STREQUAL "0")
    message(FATAL_ERROR "mpirun -np ${np} strata ${ARGN}: exit code ${rc}\n${OUT}\n${ERR}")
  endif()
endmacro()

# losses(<metrics.jsonl> <out list var> [record type]): "step=loss" for each record of the
# type (default train; eval for the evaluations), loss as written.
function(losses file out)
  set(type train)
  if(ARGC GREATER 2)
    set(type ${ARGV2})
  endif()
  file(STRINGS ${file} lines REGEX "\"type\":\"${type}\"")
  set(result "")
  foreach(line ${lines})
    string(REGEX MATCH "\"loss\":([^,}]+)" _ "${line}")
    set(loss ${CMAKE_MATCH_1})
    string(REGEX MATCH "\"step\":([0-9]+)" _ "${line}")
    list(APPEND result "${CMAKE_MATCH_1}=${loss}")
  endforeach()
  set(${out} ${result} PARENT_SCOPE)
endfunction()

# same_losses(<list a> <list b> <what> [relative tolerance]): "step=loss" lists of equal
# length, record for record at the same step, losses equal to the tolerance (default 1e-5).
function(same_losses la lb what)
  set(tol 1e-5)
  if(ARGC GREATER 3)
    set(tol ${ARGV3})
  endif()
  list(LENGTH la na)
  list(LENGTH lb nb)
  if(na EQUAL 0 OR NOT na EQUAL nb)
    message(FATAL_ERROR "${what}: ${na} vs ${nb} records\na: ${la}\nb: ${lb}")
  endif()
  math(EXPR last "${na} - 1")
  foreach(i RANGE ${last})
    list(GET la ${i} a)
    list(GET lb ${i} b)
    string(REGEX REPLACE "=.*" "" sa "${a}")
    string(REGEX REPLACE "=.*" "" sb "${b}")
    if(NOT sa STREQUAL sb)
      message(FATAL_ERROR "${what}: record ${i} is at step ${sa} in a, ${sb} in b\na: ${la}\nb: ${lb}")
    endif()
    string(REGEX REPLACE ".*=" "" a "${a}")
    string(REGEX REPLACE ".*=" "" b "${b}")
    if(NOT a MATCHES "^-?[0-9]" OR NOT b MATCHES "^-?[0-9]")  # a NaN is written as null
      message(FATAL_ERROR "${what}: step ${sa}: loss ${a} vs ${b}, not both numbers\na: ${la}\nb: ${lb}")
    endif()
    execute_process(COMMAND awk "BEGIN { d = ${a} - ${b}; if (d < 0) d = -d; exit (d <= ${tol} * (${b} < 0 ? -${b} : ${b})) ? 0 : 1 }"
                    RESULT_VARIABLE cmp)
    if(NOT cmp EQUAL 0)
      message(FATAL_ERROR "${what}: step ${sa}: loss ${a} vs ${b} differ by more than ${tol} relative\na: ${la}\nb: ${lb}")
    endif()
  endforeach()
endfunction()


# loss_falls(<list> <fraction> <what>): the last "step=loss" of the list is below its first
# by more than the fraction of the first (more than a few steps' batch-to-batch noise).
function(loss_falls l fraction what)
  list(GET l 0 first)
  list(GET l -1 last)
  string(REGEX REPLACE ".*=" "" a "${first}")
  string(REGEX REPLACE ".*=" "" b "${last}")
  if(NOT a MATCHES "^-?[0-9]" OR NOT b MATCHES "^-?[0-9]")  # a NaN is written as null
    message(FATAL_ERROR "${what}: losses that are not numbers: ${l}")
  endif()
  execute_process(COMMAND awk "BEGIN { exit (${b} < ${a} * (1 - ${fraction})) ? 0 : 1 }" RESULT_VARIABLE cmp)
  if(NOT cmp EQUAL 0)
    message(FATAL_ERROR "${what}: the loss did not fall by more than ${fraction} of the first (first ${first}, "
                        "last ${last}): ${l}")
  endif()
endfunction()

# same_evals(<metrics.jsonl a> <metrics.jsonl b> <what>): the eval records of both runs at
# the same steps and splits, losses equal to 1e-5 relative and accuracies (where logged)
# equal.
function(same_evals fa fb what)
  foreach(x a b)
    file(STRINGS ${f${x}} lines REGEX "\"type\":\"eval\"")
    set(l${x} "")
    set(acc${x} "")
    foreach(line ${lines})
      string(JSON step GET "${line}" step)
      string(JSON split GET "${line}" split)
      string(JSON loss GET "${line}" loss)
      string(JSON acc ERROR_VARIABLE no_acc GET "${line}" accuracy)
      if(no_acc)
        set(acc "-")
      endif()
      list(APPEND l${x} "${step}:${split}=${loss}")
      list(APPEND acc${x} "${step}:${split}=${acc}")
    endforeach()
  endforeach()
  same_losses("${la}" "${lb}" "${what}: eval losses")
  if(NOT "${acca}" STREQUAL "${accb}")
    message(FATAL_ERROR "${what}: eval accuracies differ\na: ${acca}\nb: ${accb}")
  endif()
endfunction()

# same_parameters(<checkpoint a> <checkpoint b> <tolerance> <what>): every model tensor of
# the two checkpoints (any layouts) agrees within the relative tolerance (COMPARE: the
# tests/tools/compare_checkpoints program).
function(same_parameters a b tol what)
  execute_process(COMMAND ${COMPARE} ${a} ${b} ${tol} WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what}: the parameters differ (tolerance ${tol}): ${out}${err}")
  endif()
  message("${what}: ${out}")
endfunction()

# same_checkpoint_eval(<checkpoint a> <checkpoint b> <what>): `strata eval` of both (one
# process, the config's eval split) prints the same loss and accuracy: the two runs end
# with the same parameters, to the printed 4 decimals.
function(same_checkpoint_eval a b what)
  foreach(x a b)
    run(0 eval --checkpoint ${${x}})
    string(REGEX MATCHALL "[a-z]+ (loss|accuracy): [0-9.]+" r${x} "${OUT}")
  endforeach()
  if(NOT ra MATCHES "loss: " OR NOT "${ra}" STREQUAL "${rb}")
    message(FATAL_ERROR "${what}: strata eval of ${a}: '${ra}', of ${b}: '${rb}'")
  endif()
endfunction()
