# The Llama through the CLI: `strata train` with model.type llama on the fortunes corpus
# (tests/data_files/tiny_llama.yaml, data.dataset text), its loss falling over 12 steps,
# and a run resumed from its step-6 checkpoint logging an uninterrupted run's losses; the
# run under `mpirun -np 2` at tp 2 with sequence parallelism, at pp 2 and at cp 2 logging
# the one-process losses; `strata plan` counting configs/llama3_8b.yaml (8.03B) and
# listing its layouts, and refusing a tp that splits its key/value heads.
# Run as `cmake -DCASE=<llama_train|llama_plan|llama_tp_mpi> -DSTRATA=... [-DMPIRUN=...]
# -DSRC=... -DWORK=... -P llama_cli.cmake`.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  foreach(case llama_train llama_plan)
    add_test(NAME e2e_${case}
             COMMAND ${CMAKE_COMMAND} -DCASE=${case} -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                     -DWITH_CUDA=${STRATA_WITH_CUDA} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/e2e/${case}
                     -P ${CMAKE_CURRENT_LIST_FILE})
    set_tests_properties(e2e_${case} PROPERTIES LABELS e2e TIMEOUT 120)
  endforeach()
  find_program(strata_llama_mpirun NAMES mpirun mpiexec)
  if(strata_llama_mpirun)
    add_test(NAME e2e_llama_tp_mpi
             COMMAND ${CMAKE_COMMAND} -DCASE=llama_tp_mpi -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                     -DMPIRUN=${strata_llama_mpirun} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/e2e/llama_tp_mpi
                     -P ${CMAKE_CURRENT_LIST_FILE})
    set_tests_properties(e2e_llama_tp_mpi PROPERTIES LABELS "e2e;dist" TIMEOUT 180 PROCESSORS 2
                         ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endif()
  return()
endif()

# ---------------------------------------------------------------- script mode
include(${CMAKE_CURRENT_LIST_DIR}/cmake/script_helpers.cmake)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

set(cfg ${SRC}/tests/data_files/tiny_llama.yaml)
set(fortunes /usr/share/games/fortunes)
set(common --set data.path=${fortunes} --set train.max_steps=12 --set train.log_every=1 --set run.threads=1)

if(CASE STREQUAL "llama_train")
  if(NOT EXISTS ${fortunes})
    message(FATAL_ERROR "${fortunes} is missing (Debian package fortunes)")
  endif()
  run(0 train --config ${cfg} --set run.dir=one ${common} --set train.save_final=true)
  losses(${WORK}/one/metrics.jsonl l)
  list(LENGTH l n)
  if(NOT n EQUAL 12)
    message(FATAL_ERROR "expected 12 train records, got ${n}: ${l}")
  endif()
  loss_falls("${l}" 0.1 "llama on fortunes")
  # 6 steps, a checkpoint, and --resume to 12 log the uninterrupted run's losses (the
  # checkpoint's config brings the llama keys back, rope_scaling included).
  set(exact --set schedule.name=constant --set schedule.warmup_steps=0 --set model.rope_scaling.factor=4
            --set model.rope_scaling.original_max_position_embeddings=16)
  run(0 train --config ${cfg} --set run.dir=full ${common} ${exact})
  run(0 train --config ${cfg} --set run.dir=half ${common} ${exact} --set train.max_steps=6
      --set train.checkpoint_every=6)
  run(0 train --config ${cfg} --set run.dir=half ${common} ${exact} --resume half)
  losses(${WORK}/full/metrics.jsonl lf)
  losses(${WORK}/half/metrics.jsonl lh)
  same_losses("${lf}" "${lh}" "llama resumed at step 6 vs uninterrupted")
  # A config error names its key and exits 2.
  run(2 train --config ${cfg} --set run.dir=bad ${common} --set model.n_kv_head=3)
  expect(ERR "model.n_kv_head")
  run(2 train --config ${cfg} --set run.dir=bad2 ${common} --set model.bias=false)
  expect(ERR "model.bias")
elseif(CASE STREQUAL "llama_plan")
  set(on_cpu)
  if(NOT WITH_CUDA)
    set(on_cpu --set run.device=cpu)
  endif()
  run(0 plan --config ${SRC}/configs/llama3_8b.yaml --ranks 64 --memory-per-rank 80G --gflops 300 --bandwidth 25
      ${on_cpu})
  expect(OUT "model: llama, Ψ = 8030261248 parameters" "choice: dp ")
  # tp 16 would split the 8 key/value heads: refused, naming both keys.
  run(2 plan --config ${SRC}/configs/llama3_8b.yaml --ranks 16 --set parallel.tp=16 --set parallel.dp=1 ${on_cpu})
  expect(ERR "parallel.tp" "model.n_kv_head = 8")
elseif(CASE STREQUAL "llama_tp_mpi")
  run(0 train --config ${cfg} --set run.dir=one ${common})
  losses(${WORK}/one/metrics.jsonl a)
  # tp 2 with sequence parallelism, pp 2 (1F1B), cp 2 (zigzag ring attention), each
  # under mpirun -np 2, log the one-process losses.
  foreach(layout "tp;--set;parallel.tp=2;--set;parallel.sequence_parallel=true"
                 "pp;--set;parallel.pp=2;--set;parallel.microbatches=2"
                 "cp;--set;parallel.cp=2")
    list(POP_FRONT layout name)
    mpi_run(2 train --config ${cfg} --set run.dir=${name} ${common} ${layout})
    losses(${WORK}/${name}/metrics.jsonl b)
    same_losses("${a}" "${b}" "llama ${name} 2 vs one process" 1e-4)
  endforeach()
else()
  message(FATAL_ERROR "unknown case '${CASE}'")
endif()
