# 3D parallelism (dp x tp x pp) under mpirun, 8 ranks, one compute thread each (label dist):
#   parallel_mpi_np8_3d  the ThreeDMpi gtests of the mpi test binary (they skip at the 2-4
#                        ranks of parallel_mpi_np*);
#   threed_cli           `mpirun -np 8 strata train --config configs/gpt_char_3d.yaml` for a
#                        few steps logs the single-process run's losses and eval loss (1e-5
#                        relative), from rank 0 only, into one metrics.jsonl;
#   threed_cli_reshard   `strata train --resume` across layouts: 3 steps at dp 2 x tp 2 x pp 2
#                        resumed in one process and at dp 4 x tp 2 ZeRO-3, and 3 steps of one
#                        process resumed at dp 2 x tp 2 x pp 2, each continuing as the straight
#                        single-process run; `strata ckpt consolidate` of the 3D checkpoint;
#   threed_multihost     the same run on 2 network-namespace hosts x 4 ranks (tp inside a
#                        host, pp across; tests/multihost_3d.sh, label multihost): the same
#                        losses again. Skipped without root / network namespaces.
# Run as `cmake -DCASE=cli -DSTRATA=... -DMPIRUN=... -DSRC=... -DWORK=... -P threed.cmake`.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  if(TARGET strata_test_parallel_mpi)
    add_test(NAME parallel_mpi_np8_3d
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 8 --oversubscribe --allow-run-as-root
              ${MPIEXEC_PREFLAGS} $<TARGET_FILE:strata_test_parallel_mpi> ${MPIEXEC_POSTFLAGS} --gtest_filter=ThreeDMpi.*)
    set_tests_properties(parallel_mpi_np8_3d PROPERTIES LABELS dist TIMEOUT 300 PROCESSORS 2
      ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
  endif()
  find_program(strata_3d_mpirun NAMES mpirun mpiexec)
  if(NOT strata_3d_mpirun)
    return()
  endif()
  add_test(NAME threed_cli
           COMMAND ${CMAKE_COMMAND} -DCASE=cli -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                   -DMPIRUN=${strata_3d_mpirun} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/threed/cli -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(threed_cli PROPERTIES LABELS "e2e;dist" TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  add_test(NAME threed_cli_reshard
           COMMAND ${CMAKE_COMMAND} -DCASE=reshard -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                   -DMPIRUN=${strata_3d_mpirun} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/threed/reshard -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(threed_cli_reshard PROPERTIES LABELS "e2e;dist" TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  add_test(NAME threed_multihost
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/multihost_3d.sh $<TARGET_FILE:strata_cli> ${strata_3d_mpirun}
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/threed/multihost)
  set_tests_properties(threed_multihost PROPERTIES LABELS "e2e;dist;multihost" TIMEOUT 300 PROCESSORS 2
                       SKIP_REGULAR_EXPRESSION "SKIPPED:" FAIL_REGULAR_EXPRESSION "FAIL:"
                       RESOURCE_LOCK netns_hosts)
  return()
endif()

# ---------------------------------------------------------------- script mode
include(${CMAKE_CURRENT_LIST_DIR}/cmake/script_helpers.cmake)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

if(CASE STREQUAL "cli")
  # 6 steps, every step logged, an eval at step 3 and the final one (2 batches each).
  set(common --config ${SRC}/configs/gpt_char_3d.yaml --set train.max_steps=6 --set train.log_every=1
             --set train.eval_every=3 --set train.eval_batches=2 --set train.checkpoint_every=0)
  execute_process(COMMAND ${MPIRUN} --oversubscribe --allow-run-as-root -np 8 ${STRATA} train ${common}
                          --set run.dir=3d
                  WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR TIMEOUT 240)
  if(NOT "${rc}" STREQUAL "0")
    message(FATAL_ERROR "mpirun -np 8 strata train: exit code ${rc}\nstdout:\n${OUT}\nstderr:\n${ERR}")
  endif()
  expect(OUT "layout: dp 2 x tp 2 x pp 2, zero_stage 1 | ZeRO-1 over 2 dp rank(s)" "pipeline over 2 pp rank(s) (1f1b"
         "tensor parallel over 2 tp rank(s)")
  # Only rank 0 prints the banner and writes the metrics.
  string(REGEX MATCHALL "layout: dp 2" banners "${OUT}")
  list(LENGTH banners nb)
  if(NOT nb EQUAL 1)
    message(FATAL_ERROR "expected one layout line (rank 0 only), got ${nb}:\n${OUT}")
  endif()
  file(GLOB_RECURSE metrics ${WORK}/3d/*metrics*.jsonl)
  list(LENGTH metrics nm)
  if(NOT nm EQUAL 1)
    message(FATAL_ERROR "expected one metrics.jsonl, got: ${metrics}")
  endif()
  run(0 train ${common} --set run.dir=one --set parallel.dp=1 --set parallel.tp=1 --set parallel.pp=1
      --set parallel.zero_stage=0)
  losses(${WORK}/3d/metrics.jsonl l3)
  losses(${WORK}/one/metrics.jsonl l1)
  list(LENGTH l3 n3)
  if(NOT n3 EQUAL 6)
    message(FATAL_ERROR "expected 6 train records (rank 0 only writes), got ${n3}: ${l3}")
  endif()
  same_losses("${l3}" "${l1}" "dp 2 x tp 2 x pp 2 (mpirun -np 8) vs one process")
  losses(${WORK}/3d/metrics.jsonl e3 eval)
  losses(${WORK}/one/metrics.jsonl e1 eval)
  same_losses("${e3}" "${e1}" "eval loss: dp 2 x tp 2 x pp 2 vs one process")
  message("3d: ${l3}\none: ${l1}\neval 3d: ${e3}\neval one: ${e1}")
elseif(CASE STREQUAL "reshard")
  # Constant LR: the schedule does not depend on max_steps.
  set(common --config ${SRC}/configs/gpt_char_3d.yaml --set train.log_every=1 --set train.eval_every=0
             --set train.eval_batches=2 --set train.checkpoint_every=0 --set schedule.name=constant)
  set(one --set parallel.dp=1 --set parallel.tp=1 --set parallel.pp=1 --set parallel.zero_stage=0)
  macro(run8 dir)
    execute_process(COMMAND ${MPIRUN} --oversubscribe --allow-run-as-root -np 8 ${STRATA} train ${common}
                            --set run.dir=${dir} ${ARGN}
                    WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR TIMEOUT 240)
    if(NOT "${rc}" STREQUAL "0")
      message(FATAL_ERROR "mpirun -np 8 strata train (${dir}): exit code ${rc}\nstdout:\n${OUT}\nstderr:\n${ERR}")
    endif()
  endmacro()
  run(0 train ${common} ${one} --set train.max_steps=6 --set run.dir=straight)
  losses(${WORK}/straight/metrics.jsonl ls)
  list(SUBLIST ls 3 3 tail)
  run8(half3d --set train.max_steps=3 --set train.save_final=true)
  run(0 train ${common} ${one} --set train.max_steps=6 --set run.dir=to_one --resume half3d)
  expect(OUT "resumed from")
  losses(${WORK}/to_one/metrics.jsonl l)
  same_losses("${l}" "${tail}" "(2,2,2,z1) resumed at (1,1,1,-)")
  run8(to_z3 --set train.max_steps=6 --resume half3d --set parallel.dp=4 --set parallel.pp=1 --set parallel.zero_stage=3)
  expect(OUT "resumed from" "layout: dp 4 x tp 2 x pp 1, zero_stage 3")
  losses(${WORK}/to_z3/metrics.jsonl l)
  same_losses("${l}" "${tail}" "(2,2,2,z1) resumed at (4,2,1,z3)")
  run(0 train ${common} ${one} --set train.max_steps=3 --set train.save_final=true --set run.dir=half1)
  run8(to_3d --set train.max_steps=6 --resume half1)
  expect(OUT "resumed from" "layout: dp 2 x tp 2 x pp 2, zero_stage 1")
  losses(${WORK}/to_3d/metrics.jsonl l)
  same_losses("${l}" "${tail}" "(1,1,1,-) resumed at (2,2,2,z1)")
  run(0 ckpt consolidate --checkpoint half3d --out half3d.safetensors)
  expect(OUT "from 8 shard files (zero stage 1)")
else()
  message(FATAL_ERROR "unknown threed case '${CASE}'")
endif()
