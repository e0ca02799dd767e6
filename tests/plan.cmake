# CLI tests of `strata plan` (predicted per-rank memory of DDP / ZeRO-1/2/3), of
# `strata train` with parallel.replicas and its memory report, and of the progress style
# (bar on a terminal, plain lines under mpirun or when STRATA_PROGRESS=lines). Same two
# roles as e2e.cmake: included, it registers the ctest entries; run with -DCASE=<name>
# -P plan.cmake, it executes one case.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  set(strata_plan_script ${CMAKE_CURRENT_LIST_FILE})
  find_program(strata_script_cmd NAMES script)  # util-linux: runs a command on a pty
  find_program(strata_plan_mpirun NAMES mpirun mpiexec)
  set(strata_plan_cases plan_table plan_configured_stage plan_errors plan_layouts train_dp_memory_report progress_env)
  find_program(strata_plan_time NAMES time PATHS /usr/bin NO_DEFAULT_PATH)  # GNU time (Debian `time`): peak RSS
  if(strata_plan_time)
    list(APPEND strata_plan_cases plan_70b_cost)
  else()
    message(STATUS "e2e_plan_70b_cost not registered: GNU time (/usr/bin/time, Debian package time) not found")
  endif()
  if(strata_script_cmd)
    list(APPEND strata_plan_cases progress_pty)
  endif()
  foreach(case ${strata_plan_cases})
    add_test(NAME e2e_${case}
             COMMAND ${CMAKE_COMMAND} -DCASE=${case} -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                     -DSCRIPT=${strata_script_cmd} -DGNU_TIME=${strata_plan_time} -DWITH_CUDA=${STRATA_WITH_CUDA}
                     -DWORK=${CMAKE_CURRENT_BINARY_DIR}/e2e/${case} -P ${strata_plan_script})
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
  # parallel.dp fixes the layout: the single-layout view (the planner's list otherwise).
  run(0 plan --config ${tiny_mlp} --ranks 3 --set train.batch_size=12 --set parallel.dp=3 --gflops 1)
  expect(OUT "layout at 3 rank(s): dp 3 x tp 1 x pp 1, zero_stage 0 | mesh pp=1 x dp=3 x tp=1 | on dp: DDP"
         "4 samples per dp rank per step" "Ψ = 676 parameters x 4 bytes" "optim: adam, 2 state tensor(s) per parameter" "at 3 rank(s)"
         "(20.00Ψ)")
  expect_row(0 13520 configured)
  expect_row(1 7216)
  expect_row(2 5416)
  expect_row(3 3616)
  # SGD with momentum keeps one state tensor, plain SGD none.
  run(0 plan --config ${tiny_mlp} --ranks 4 --set optim.name=sgd --set optim.momentum=0.9 --set parallel.dp=4 --gflops 1)
  expect(OUT "optim: sgd, 1 state tensor(s)")
  expect_row(3 2028)  # (4 + 4 + 4) * ceil(676/4) = 12 * 169
  run(0 plan --config ${tiny_mlp} --ranks 1 --set optim.name=sgd --set parallel.dp=1 --gflops 1)
  expect_row(0 8112 configured)  # 4Ψ + 4Ψ + 4Ψ buckets
  expect_row(3 5408)
elseif(CASE STREQUAL "plan_configured_stage")
  run(0 plan --config ${tiny_mlp} --ranks 2 --set parallel.zero_stage=2
      --set parallel.gradient_as_bucket_view=true --gflops 1)
  expect(OUT "layout at 2 rank(s): dp 2 x tp 1 x pp 1, zero_stage 2 | mesh pp=1 x dp=2 x tp=1 | on dp: ZeRO-2"
         "DDP buckets none (gradient_as_bucket_view)")
  expect_row(0 10816)  # 16Ψ, no buckets
  expect_row(2 6760 configured)  # 2704 + 12 * 338
  # The shipped configs all plan: a fixed layout alone (with the planner's row for it),
  # the others as the planner's list.
  file(GLOB configs ${SRC}/configs/*.yaml)
  foreach(c ${configs})
    set(ranks 4)
    if(c MATCHES "_dp\\.yaml$")  # thread replicas live in one process
      set(ranks 1)
    endif()
    # A build without CUDA refuses run.device cuda (gpt_1p3b.yaml): plan it for the CPU.
    file(READ ${c} text)
    set(on_cpu)
    if(NOT WITH_CUDA AND text MATCHES "device: *cuda")
      set(on_cpu --set run.device=cpu)
    endif()
    run(0 plan --config ${c} --ranks ${ranks} --gflops 10 ${on_cpu})
    # A config fixes its layout with a number of dp ranks, tp, pp, cp or ep above 1, a ZeRO stage
    # or thread replicas.
    if(text MATCHES "\n  (tp|pp|cp|ep): *[2-9]" OR text MATCHES "\n  (zero_stage|replicas|dp): *[0-9]"
       OR text MATCHES "\n  devices:")
      expect(OUT "<- configured")
      expect_not(OUT "choice: ")
    else()
      expect(OUT "layout(s); bytes per rank" "choice: dp ")
      expect_not(OUT "<- configured")
    endif()
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
  run(2 plan --config ${tiny_mlp} --ranks 2 --memory-per-rank 80X)
  expect(ERR "--memory-per-rank: expected a positive size such as 80G")
  run(2 plan --config ${tiny_mlp} --ranks 2 --bandwidth 0)
  expect(ERR "--bandwidth: expected a positive GB/s")
elseif(CASE STREQUAL "plan_layouts")
  # tiny_gpt (2 blocks, 2 heads, vocab 256) at 4 ranks: tp 1|2 (heads), pp 1|2 (blocks),
  # dp | batch 8. dp 4 (4 stages) + dp 2 x tp 2 (4) + dp 2 x pp 2 (4 stages x gpipe|1f1b)
  # + tp 2 x pp 2 (gpipe|1f1b) + tp 4? no (2 heads) + pp 4? no (2 blocks) = 4 + 4 + 8 + 2 = 18,
  # + HSDP at dp 4: ZeRO-1/2/3 in shard groups of 2 (zero column "1/2") = 21.
  set(g ${SRC}/tests/data_files/tiny_gpt.yaml --set data.path=${SRC}/tests/data_files/tiny_corpus.txt)
  run(0 plan --config ${g} --ranks 4 --gflops 5 --bandwidth 2)
  expect(OUT "model: gpt, Ψ = " "step model: 5.0 GFLOP/s per rank (--gflops), 2.00 GB/s per rank"
         "21 layout(s); bytes per rank" "choice: dp "
         "zero a/S: HSDP, ZeRO-a within shard groups of S consecutive dp ranks")
  string(REGEX MATCHALL "\n +[0-9]+  [0-9]+ +[0-9]+ +[0-9]+ +[0-9](/[0-9]+)? " rows "${OUT}")
  list(LENGTH rows n)
  if(NOT n EQUAL 21)
    message(FATAL_ERROR "expected 21 layout rows, got ${n}:\n${OUT}")
  endif()
  string(REGEX MATCHALL "\n +[0-9]+  4 +1 +1 +[123]/2 " hsdp "${OUT}")
  list(LENGTH hsdp n)
  if(NOT n EQUAL 3)
    message(FATAL_ERROR "expected 3 HSDP rows (dp 4, zero 1/2, 2/2, 3/2), got ${n}:\n${OUT}")
  endif()
  # A limit between the smallest and the largest total marks some layouts NO, lists them last.
  run(0 plan --config ${g} --ranks 4 --gflops 5 --memory-per-rank 600KiB)
  expect(OUT "fit 600.00 KiB per rank")
  expect(OUT " NO\n" " yes\n")
  string(FIND "${OUT}" " yes\n" last_yes REVERSE)
  string(FIND "${OUT}" " NO\n" first_no)
  if(last_yes GREATER first_no)
    message(FATAL_ERROR "a fitting layout listed after one that does not fit:\n${OUT}")
  endif()
  run(0 plan --config ${g} --ranks 4 --gflops 5 --top 3)
  expect(OUT "... 18 more (--top 0 lists all)")
  # Without --gflops the step model uses this machine's measured GEMM rate.
  run(0 plan --config ${g} --ranks 2 --top 1)
  expect(OUT "GFLOP/s per rank (measured GEMM)" "... ")
  # pp layouts use one sample per micro-batch unless --microbatches says otherwise.
  run(0 plan --config ${g} --ranks 2 --gflops 5 --microbatches 2)
  expect(OUT "1f1b m2" "gpipe m2")
elseif(CASE STREQUAL "plan_70b_cost")
  # Planning a 70B GPT (86 blocks of 8192, 64 heads, vocab 32000, T 4096) counts it from
  # the config, building nothing: under 100 MB of RSS above the binary's own baseline (the
  # model's parameters alone would be 278 GB). Wall time is reported, not asserted (the
  # host is shared).
  if(NOT GNU_TIME)
    message(FATAL_ERROR "GNU time (/usr/bin/time) not found")
  endif()
  set(big --set model.n_layer=86 --set model.n_embd=8192 --set model.n_head=64 --set model.vocab_size=32000
          --set model.block_size=4096 --set train.batch_size=1024 --set model.dropout=0)
  if(NOT WITH_CUDA)  # gpt_1p3b.yaml says run.device cuda, which a build without CUDA refuses
    list(APPEND big --set run.device=cpu)
  endif()
  # 2 rounds of `strata config show` on the same config (same binary, libraries and config
  # loading: ~225 MB here, nearly all of it the CUDA, MPI and BLAS libraries being loaded)
  # and `strata plan`, interleaved; each one's smallest round counts, and the plan's peak
  # RSS above the baseline's is checked.
  macro(timed prefix)
    execute_process(COMMAND ${GNU_TIME} -f "rss_kb=%M wall_s=%e" ${ARGN}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${ARGN}: exit ${rc}\n${OUT}\n${err}")
    endif()
    string(REGEX MATCH "rss_kb=([0-9]+) wall_s=([0-9]+)\\.([0-9]+)" _ "${err}")
    math(EXPR ms "${CMAKE_MATCH_2} * 1000 + ${CMAKE_MATCH_3} * 10")
    if(${prefix}_ms EQUAL 0 OR ms LESS ${prefix}_ms)
      set(${prefix}_ms ${ms})
    endif()
    if(${prefix}_kb EQUAL 0 OR CMAKE_MATCH_1 LESS ${prefix}_kb)
      set(${prefix}_kb ${CMAKE_MATCH_1})
    endif()
  endmacro()
  foreach(v base_ms base_kb plan_ms plan_kb)
    set(${v} 0)
  endforeach()
  foreach(i 1 2)
    timed(base ${STRATA} config show --config ${SRC}/configs/gpt_1p3b.yaml ${big})
    timed(plan ${STRATA} plan --config ${SRC}/configs/gpt_1p3b.yaml ${big} --ranks 1024 --gflops 400 --bandwidth 50
          --memory-per-rank 80G)
  endforeach()
  math(EXPR added_kb "${plan_kb} - ${base_kb}")
  math(EXPR added_ms "${plan_ms} - ${base_ms}")
  message(STATUS "70B plan: ${plan_ms} ms wall, ${plan_kb} kB peak RSS; strata config show: ${base_ms} ms, ${base_kb} kB; "
                 "the plan adds ${added_ms} ms and ${added_kb} kB")
  expect(OUT "Ψ = 69561221120 parameters")  # 86 (12C² + 13C) + (V + T) C + 2C
  expect(OUT "1595 layout(s), 262 fit 80.00 GiB per rank" "choice: ")  # HSDP rows included
  if(added_kb GREATER 102400)
    message(FATAL_ERROR "planning 70B added ${added_kb} kB of RSS over strata config show (limit 100 MB)")
  endif()
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
