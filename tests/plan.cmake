# CLI tests of `strata plan` (predicted per-rank memory of DDP / ZeRO-1/2/3), of
# `strata train` with parallel.replicas and its memory report, and of the progress style
# (bar on a terminal, plain lines under mpirun or when STRATA_PROGRESS=lines). Same two
# roles as e2e.cmake: included, it registers the ctest entries; run with -DCASE=<name>
# -P plan.cmake, it executes one case.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  set(strata_plan_script ${CMAKE_CURRENT_LIST_FILE})
  find_program(strata_script_cmd NAMES script)  # util-linux: runs a command on a pty
  find_program(strata_plan_mpirun NAMES mpirun mpiexec)
  set(strata_plan_cases plan_table plan_configured_stage plan_errors train_dp_memory_report progress_env)
  if(strata_script_cmd)
    list(APPEND strata_plan_cases progress_pty)
  endif()
  foreach(case ${strata_plan_cases})
    add_test(NAME e2e_${case}
             COMMAND ${CMAKE_COMMAND} -DCASE=${case} -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                     -DSCRIPT=${strata_script_cmd} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/e2e/${case}
                     -P ${strata_plan_script})
    set_tests_properties(e2e_${case} PROPERTIES LABELS e2e TIMEOUT 120)
  endforeach()
  if(strata_script_cmd AND strata_plan_mpirun)
    add_test(NAME e2e_progress_mpirun_pty
             COMMAND ${CMAKE_COMMAND} -DCASE=progress_mpirun_pty -DSTRATA=$<TARGET_FILE:strata_cli>
                     -DSRC=${PROJECT_SOURCE_DIR} -DSCRIPT=${strata_script_cmd} -DMPIRUN=${strata_plan_mpirun}
                     -DWORK=${CMAKE_CURRENT_BINARY_DIR}/e2e/progress_mpirun_pty -P ${strata_plan_script})
    set_tests_properties(e2e_progress_mpirun_pty PROPERTIES LABELS "e2e;dist" TIMEOUT 60 PROCESSORS 2
                         ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endif()
  return()
endif()

# ---------------------------------------------------------------- script mode
include(${CMAKE_CURRENT_LIST_DIR}/cmake/script_helpers.cmake)
set(tiny_mlp ${SRC}/tests/data_files/tiny_mlp.yaml)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# expect_row(<stage> <total bytes> [configured]): the plan table row of that stage ends
# in that exact byte total (and the "<- configured" mark, or not).
macro(expect_row stage bytes)
  string(REGEX MATCH "\n${stage} +[A-Z][^\n]*" row "${OUT}")
  if(NOT row)
    message(FATAL_ERROR "no row for stage ${stage} in:\n${OUT}")
  endif()
  if("${ARGN}" STREQUAL "configured")
    set(tail " ${bytes}  <- configured")
  else()
    set(tail " ${bytes}")
  endif()
  string(LENGTH "${row}" rl)
  string(LENGTH "${tail}" tl)
  math(EXPR start "${rl} - ${tl}")
  string(SUBSTRING "${row}" ${start} -1 end)
  if(NOT "${end}" STREQUAL "${tail}")
    message(FATAL_ERROR "stage ${stage}: expected the row to end in '${tail}':\n${row}")
  endif()
endmacro()

if(CASE STREQUAL "plan_table")
  # tiny_mlp: 16-32-4 MLP, Ψ = 16*32+32 + 32*4+4 = 676 f32, Adam (2 states). At 3 ranks a
  # shard holds ceil(676/3) = 226 elements:
  #   DDP    4Ψ + 4Ψ + 8Ψ + 4Ψ buckets      = 5 * 2704        = 13520 bytes
  #   ZeRO-1 4Ψ + 4Ψ + 8*226                = 2704*2 + 1808   = 7216
  #   ZeRO-2 4Ψ + 4*226 + 8*226             = 2704 + 904 + 1808 = 5416
  #   ZeRO-3 (4 + 4 + 8) * 226              = 3616
  run(0 plan --config ${tiny_mlp} --ranks 3 --set train.batch_size=12)
  expect(OUT "layout at 3 rank(s): dp 3 x tp 1 x pp 1, zero_stage 0 | mesh pp=1 x dp=3 x tp=1 | on dp: DDP"
         "4 samples per dp rank per step" "Ψ = 676 parameters x 4 bytes" "optim: adam, 2 state tensor(s) per parameter" "at 3 rank(s)"
         "(20.00Ψ)")
  expect_row(0 13520 configured)
  expect_row(1 7216)
  expect_row(2 5416)
  expect_row(3 3616)
  # SGD with momentum keeps one state tensor, plain SGD none.
  run(0 plan --config ${tiny_mlp} --ranks 4 --set optim.name=sgd --set optim.momentum=0.9)
  expect(OUT "optim: sgd, 1 state tensor(s)")
  expect_row(3 2028)  # (4 + 4 + 4) * ceil(676/4) = 12 * 169
  run(0 plan --config ${tiny_mlp} --ranks 1 --set optim.name=sgd)
  expect_row(0 8112 configured)  # 4Ψ + 4Ψ + 4Ψ buckets
  expect_row(3 5408)
elseif(CASE STREQUAL "plan_configured_stage")
  run(0 plan --config ${tiny_mlp} --ranks 2 --set parallel.zero_stage=2
      --set parallel.gradient_as_bucket_view=true)
  expect(OUT "layout at 2 rank(s): dp 2 x tp 1 x pp 1, zero_stage 2 | mesh pp=1 x dp=2 x tp=1 | on dp: ZeRO-2"
         "DDP buckets none (gradient_as_bucket_view)")
  expect_row(0 10816)  # 16Ψ, no buckets
  expect_row(2 6760 configured)  # 2704 + 12 * 338
  # The shipped configs all plan.
  file(GLOB configs ${SRC}/configs/*.yaml)
  foreach(c ${configs})
    set(ranks 4)
    if(c MATCHES "_dp\\.yaml$")  # thread replicas live in one process
      set(ranks 1)
    endif()
    run(0 plan --config ${c} --ranks ${ranks})
    expect(OUT "<- configured")
  endforeach()
elseif(CASE STREQUAL "plan_errors")
  run(2 plan --config ${tiny_mlp} --ranks 0)
  expect(ERR "--ranks: expected a world size")
  run(2 plan --config ${tiny_mlp} --ranks 2 --set parallel.zero_stage=1 --set parallel.replicas=2)
  expect(ERR "parallel.zero_stage: is 1 but parallel.replicas runs thread replicas")
  run(2 plan --config ${tiny_mlp} --ranks 3 --set parallel.dp=2)
  expect(ERR "parallel: dp x tp x pp = 2 x 1 x 1 = 2 rank(s), but the world has 3")
  run(2 plan --config ${tiny_mlp} --ranks 2 --set parallel.zero_stage=5)
  expect(ERR "parallel.zero_stage: expected a value in [0, 3], got 5")
  run(2 plan --config ${tiny_mlp})
  expect(ERR "--ranks is required")
elseif(CASE STREQUAL "train_dp_memory_report")
  run(0 train --config ${tiny_mlp} --set run.dir=dp --set parallel.replicas=2 --memory-report
      --set run.threads=2 --set train.max_steps=6)
  expect(OUT "dp: 2 replicas (threads in this process) x 1 intra-op thread(s)"
         "memory (rank 0): allocator bytes vs plan for DataParallel at 1 rank(s)"
         "replica 0 holds" "final val accuracy: ")
  # params: the two replicas hold 4Ψ each, predicted 4Ψ for the one module.
  string(REGEX MATCH "\nparams +[^\n]*" row "${OUT}")
  expect(row "(8.00Ψ)" "(4.00Ψ)")
  run(0 eval --checkpoint dp)
  expect(OUT "val accuracy: ")
  # ZeRO's end report names the stage (ZeRO at 1 rank shards trivially); with thread
  # replicas zero_stage is a config error.
  run(0 train --config ${tiny_mlp} --set run.dir=z --set parallel.zero_stage=1
      --set train.max_steps=4 --memory-report)
  expect(OUT "memory (rank 0): allocator bytes vs plan for ZeRO-1 at 1 rank(s), zero_stage 1")
  run(2 train --config ${tiny_mlp} --set run.dir=z --set parallel.zero_stage=1 --set parallel.replicas=2)
  expect(ERR "parallel.zero_stage")
elseif(CASE STREQUAL "progress_env")
  # stdout is a pipe here: plain lines by default and with lines; the bar when forced.
  set(args train --config ${tiny_mlp} --set run.dir=r --set train.max_steps=3 --set train.save_final=false --overwrite)
  run(0 ${args})
  expect(OUT "\nstep 3/3 | epoch")
  expect_not(OUT "\r[")
  execute_process(COMMAND ${CMAKE_COMMAND} -E env STRATA_PROGRESS=bar ${STRATA} ${args} WORKING_DIRECTORY ${WORK}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR)
  expect(OUT "\r[========================] step 3/3")
  expect_not(OUT "\nstep 3/3 | epoch")
  execute_process(COMMAND ${CMAKE_COMMAND} -E env STRATA_PROGRESS=fancy ${STRATA} ${args} WORKING_DIRECTORY ${WORK}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "STRATA_PROGRESS=fancy: exit code ${rc}, expected 2\n${ERR}")
  endif()
  expect(ERR "STRATA_PROGRESS: expected bar or lines, got 'fancy'")
elseif(CASE STREQUAL "progress_pty")
  # On a terminal (script(1) gives the command a pty) the bar is drawn; a launcher's
  # environment (OMPI_COMM_WORLD_SIZE) or STRATA_PROGRESS=lines switch to plain lines.
  set(cmd "${STRATA} train --config ${tiny_mlp} --set run.dir=r --set train.max_steps=3 --set train.save_final=false --overwrite")
  execute_process(COMMAND ${SCRIPT} -qec "${cmd}" /dev/null WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "script -c strata train: exit code ${rc}\n${OUT}\n${ERR}")
  endif()
  expect(OUT "\r[========================] step 3/3")
  foreach(env "OMPI_COMM_WORLD_SIZE=1" "PMI_SIZE=1" "STRATA_PROGRESS=lines")
    execute_process(COMMAND ${SCRIPT} -qec "env ${env} ${cmd}" /dev/null WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc
                    OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${env} strata train on a pty: exit code ${rc}\n${OUT}\n${ERR}")
    endif()
    expect(OUT "\nstep 3/3 | epoch")
    expect_not(OUT "\r[")
  endforeach()
elseif(CASE STREQUAL "progress_mpirun_pty")
  # The real case: mpirun on a terminal gives rank 0 a pty; the log must get lines.
  set(cmd "${MPIRUN} --oversubscribe --allow-run-as-root -np 2 ${STRATA} train --config ${tiny_mlp} --set run.dir=r "
          "--set train.max_steps=4 --set train.save_final=false")
  string(REPLACE ";" "" cmd "${cmd}")
  execute_process(COMMAND ${SCRIPT} -qec "${cmd}" /dev/null WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR TIMEOUT 50)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "script -c mpirun strata train: exit code ${rc}\n${OUT}\n${ERR}")
  endif()
  expect(OUT "layout: dp 2 x tp 1 x pp 1, zero_stage 0 | DDP over 2 dp rank(s) (mpi backend" "\nstep 4/4 | epoch")
  expect_not(OUT "\r[")
else()
  message(FATAL_ERROR "unknown plan/progress case '${CASE}'")
endif()
