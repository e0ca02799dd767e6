# End-to-end tests of the built `strata` binary (ctest label e2e). This file has two
# roles: included by tests/CMakeLists.txt it registers one ctest entry per case;
# run as `cmake -DCASE=<name> -DSTRATA=<binary> -DSRC=<source dir> -DWORK=<dir> -P e2e.cmake`
# it executes that case (exit codes, stderr messages, metrics.jsonl contents).

if(NOT CMAKE_SCRIPT_MODE_FILE)
  set(strata_e2e_script ${CMAKE_CURRENT_LIST_FILE})
  set(strata_e2e_cases
      bad_config_unknown_key bad_config_type bad_config_range bad_config_parallel missing_config_file
      missing_checkpoint corrupt_checkpoint mismatched_checkpoint tiny_run resume_bit_exact sample_gpt info
      device_and_precision run_dir_guard)
  foreach(case ${strata_e2e_cases})
    add_test(NAME e2e_${case}
             COMMAND ${CMAKE_COMMAND} -DCASE=${case} -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                     -DWORK=${CMAKE_CURRENT_BINARY_DIR}/e2e/${case} -P ${strata_e2e_script})
    set_tests_properties(e2e_${case} PROPERTIES LABELS e2e TIMEOUT 120)
  endforeach()
  # Multi-process DDP under mpirun (label dist).
  find_program(strata_mpirun NAMES mpirun mpiexec)
  if(strata_mpirun)
    # e2e_<name> runs CASE <case>: DDP against one process; ZeRO-1/2/3 against DDP; HSDP
    # (parallel.dp_shard) against one process; parallel: auto under mpirun -np 2 (a budget that DDP does not fit and ZeRO does), the
    # layout it chose against one process, and a budget nothing fits; MoE with expert
    # parallelism against one process.
    foreach(spec "ddp_matches_single_process|ddp_matches_single_process|60" "zero_matches_ddp|zero_matches_ddp|120"
                 "hsdp_matches_single_process|hsdp_matches_single_process|300" "auto_layout_matches_single_process|auto_layout|120"
                 "moe_matches_single_process|moe_matches_single_process|300")
      string(REPLACE "|" ";" spec "${spec}")
      list(GET spec 0 name)
      list(GET spec 1 case)
      list(GET spec 2 timeout)
      add_test(NAME e2e_${name}
               COMMAND ${CMAKE_COMMAND} -DCASE=${case} -DSTRATA=$<TARGET_FILE:strata_cli>
                       -DSRC=${PROJECT_SOURCE_DIR} -DMPIRUN=${strata_mpirun}
                       -DCOMPARE=$<TARGET_FILE:strata_compare_checkpoints>
                       -DWORK=${CMAKE_CURRENT_BINARY_DIR}/e2e/${case} -P ${strata_e2e_script})
      set_tests_properties(e2e_${name} PROPERTIES LABELS "e2e;dist" TIMEOUT ${timeout} PROCESSORS 2
                           ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
    endforeach()
  endif()
  return()
endif()

# ---------------------------------------------------------------- script mode
include(${CMAKE_CURRENT_LIST_DIR}/cmake/script_helpers.cmake)

set(tiny_mlp ${SRC}/tests/data_files/tiny_mlp.yaml)
set(tiny_gpt ${SRC}/tests/data_files/tiny_gpt.yaml)
set(corpus ${SRC}/tests/data_files/tiny_corpus.txt)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})




if(CASE STREQUAL "bad_config_unknown_key")
  run(2 train --config ${tiny_mlp} --set train.lerning_rate=0.1)
  expect(ERR "strata: error: train.lerning_rate: unknown key")
elseif(CASE STREQUAL "bad_config_type")
  run(2 train --config ${tiny_mlp} --set optim.lr=abc)
  expect(ERR "strata: error: optim.lr: expected a number, got 'abc'")
elseif(CASE STREQUAL "bad_config_range")
  file(WRITE ${WORK}/bad.yaml "run: {dir: run}\nmodel:\n  type: mlp\n  dropout: 1.5\noptim: {lr: 0.1}\n")
  run(2 train --config bad.yaml)
  expect(ERR "model.dropout: expected a value in [0, 1), got 1.5 (line 4)")
elseif(CASE STREQUAL "bad_config_parallel")
  run(2 train --config ${tiny_mlp} --set parallel.mode=ddp)
  expect(ERR "parallel.mode: was removed ('ddp'): DDP is the default under mpirun")
  run(2 train --config ${tiny_mlp} --set parallel.tp=2)
  expect(ERR "parallel.dp: is auto but the world of 1 rank(s) is not divisible by tp x pp = 2")
  run(2 train --config ${tiny_mlp} --set parallel.dp=2)
  expect(ERR "but the world has 1 (start with mpirun -np 2")
  run(2 train --config ${tiny_mlp} --set comm.algorithm=star)
  expect(ERR "comm.algorithm: expected one of")
elseif(CASE STREQUAL "device_and_precision")
  # run.device cuda: trains on a GPU machine; elsewhere exit 2 naming run.device and why.
  run(0 info)
  set(gpu_run train --config ${tiny_mlp} --set run.dir=gpu --set run.device=cuda --set train.max_steps=3)
  if(OUT MATCHES "\n    cuda:0 ")
    run(0 ${gpu_run})
    expect(OUT "device: cuda:0 | precision: f32" "accuracy: ")
  elseif(OUT MATCHES "cuda: yes")
    run(2 ${gpu_run})
    expect(ERR "strata: error: run.device: 'cuda': no CUDA device is visible (")
  else()
    run(2 ${gpu_run})
    expect(ERR "strata: error: run.device: 'cuda' needs a CUDA build of strata")
  endif()
  run(0 train --config ${tiny_mlp} --set run.dir=bf16 --set run.precision=bf16 --set train.max_steps=3)
  expect(OUT "device: cpu | precision: bf16 (autocast)" "accuracy: ")
  run(0 train --config ${tiny_mlp} --set run.dir=f16 --set run.precision=f16 --set train.max_steps=3)
  expect(OUT "device: cpu | precision: f16 (autocast, dynamic loss scaling)")
  file(READ ${WORK}/f16/metrics.jsonl metrics)
  expect(metrics "\"loss_scale\":65536" "\"skipped_steps\":0")
  run(2 train --config ${tiny_mlp} --set run.precision=f8)
  expect(ERR "run.precision: expected one of f32|bf16|f16")
elseif(CASE STREQUAL "missing_config_file")
  run(2 train --config ${WORK}/nope.yaml)
  expect(ERR "nope.yaml")
elseif(CASE STREQUAL "missing_checkpoint")
  run(1 eval --checkpoint ${WORK}/no_such_ckpt)
  expect(ERR "strata: error:" "${WORK}/no_such_ckpt")
elseif(CASE STREQUAL "corrupt_checkpoint")
  run(0 train --config ${tiny_mlp} --set run.dir=run --set train.max_steps=3)
  set(model_file run/checkpoints/step_00000003/shard_00000_of_00001.safetensors)
  execute_process(COMMAND truncate -s -10 ${WORK}/${model_file} RESULT_VARIABLE trc)
  if(NOT trc EQUAL 0)
    message(FATAL_ERROR "truncate failed")
  endif()
  run(1 eval --checkpoint run)
  expect(ERR "strata: error:" "${model_file}" "tensor '" "truncated")
  run(1 train --config ${tiny_mlp} --set run.dir=run2 --set train.resume=run)
  expect(ERR "${model_file}")
elseif(CASE STREQUAL "mismatched_checkpoint")
  run(0 train --config ${tiny_mlp} --set run.dir=run --set train.max_steps=2)
  run(1 eval --checkpoint run --config ${tiny_mlp} --set "model.hidden=[48]")
  expect(ERR "strata: error:" "shard_00000_of_00001.safetensors" "'net.1.weight' is f32(32,16) but the model expects f32(48,16)")
elseif(CASE STREQUAL "tiny_run")
  run(0 train --config ${tiny_mlp} --set run.dir=run)
  expect(OUT "final val accuracy: ")
  losses(${WORK}/run/metrics.jsonl l)
  list(LENGTH l n)
  if(NOT n EQUAL 20)
    message(FATAL_ERROR "expected 20 train records in metrics.jsonl, got ${n}: ${l}")
  endif()
  file(STRINGS ${WORK}/run/metrics.jsonl evals REGEX "\"type\":\"eval\"")
  list(LENGTH evals ne)
  if(NOT ne EQUAL 2)
    message(FATAL_ERROR "expected 2 eval records (step 10 and final), got ${ne}")
  endif()
  expect(evals "\"accuracy\":" "\"step\":20")
  if(NOT EXISTS ${WORK}/run/checkpoints/step_00000020/index.json)
    message(FATAL_ERROR "final checkpoint missing")
  endif()
  run(0 eval --checkpoint run)
  expect(OUT "val accuracy: ")
elseif(CASE STREQUAL "resume_bit_exact")
  # 2k steps straight vs k steps, checkpoint, resume for k more: identical losses
  # (compared as written, i.e. bit for bit through %.17g). Dropout, Adam, a step LR
  # schedule, grad accumulation and epoch boundaries (15 steps per epoch) all involved.
  set(common --config ${tiny_mlp} --set train.grad_accum_steps=2 --set schedule.name=step
             --set schedule.step_size=7 --set schedule.gamma=0.7 --set train.eval_every=5)
  run(0 train ${common} --set run.dir=a --set train.max_steps=40)
  run(0 train ${common} --set run.dir=b --set train.max_steps=20)
  run(0 train ${common} --set run.dir=c --set train.max_steps=40 --resume b)
  expect(OUT "resumed from")
  losses(${WORK}/a/metrics.jsonl la)
  losses(${WORK}/c/metrics.jsonl lc)
  list(SUBLIST la 20 20 la_tail)
  list(LENGTH lc nc)
  if(NOT nc EQUAL 20 OR NOT "${la_tail}" STREQUAL "${lc}")
    message(FATAL_ERROR "resumed losses differ\nstraight: ${la_tail}\nresumed:  ${lc}")
  endif()
elseif(CASE STREQUAL "sample_gpt")
  run(0 train --config ${tiny_gpt} --set data.path=${corpus} --set run.dir=gpt --set train.save_final=true)
  expect(OUT "bigram entropy")
  run(0 sample --checkpoint gpt --prompt "The river" --tokens 40 --seed 3 --threads 1)
  set(first "${OUT}")
  expect(first "The river")
  string(LENGTH "${first}" len)
  if(len LESS 45)
    message(FATAL_ERROR "sample too short: '${first}'")
  endif()
  run(0 sample --checkpoint gpt --prompt "The river" --tokens 40 --seed 3 --threads 1)
  if(NOT "${OUT}" STREQUAL "${first}")
    message(FATAL_ERROR "same seed gave different samples:\n${first}\n${OUT}")
  endif()
  run(2 sample --checkpoint gpt --tokens -3)
elseif(CASE STREQUAL "run_dir_guard")
  # A run dir holding an earlier run is refused (exit 2 naming run.dir) unless the run
  # resumes it (--resume auto continues from its LATEST) or --overwrite starts over;
  # elapsed_s keeps counting across a resume. A misspelt command gets a suggestion.
  set(args train --config ${tiny_mlp} --set run.dir=r --set train.eval_every=0 --set train.checkpoint_every=2)
  run(0 ${args} --set train.max_steps=2)
  run(2 ${args} --set train.max_steps=4)
  expect(ERR "run.dir: 'r' holds an earlier run" "--resume r (or --resume auto)" "--overwrite")
  run(0 ${args} --set train.max_steps=4 --resume auto)
  expect(OUT "resumed from r/checkpoints/step_00000002 at step 2")
  file(STRINGS ${WORK}/r/metrics.jsonl recs REGEX "\"type\":\"train\"")
  list(LENGTH recs n)
  if(NOT n EQUAL 4)
    message(FATAL_ERROR "expected 4 train records after the resume, got ${n}:\n${recs}")
  endif()
  list(GET recs 1 before)
  list(GET recs 2 after)
  string(REGEX MATCH "\"elapsed_s\":([0-9.e+-]+)" _ "${before}")
  set(t_before ${CMAKE_MATCH_1})
  string(REGEX MATCH "\"elapsed_s\":([0-9.e+-]+)" _ "${after}")
  execute_process(COMMAND awk "BEGIN { exit !(${CMAKE_MATCH_1} >= ${t_before}) }" RESULT_VARIABLE later)
  if(NOT later EQUAL 0)
    message(FATAL_ERROR "elapsed_s went back across the resume: ${t_before} then ${CMAKE_MATCH_1}")
  endif()
  run(0 ${args} --set train.max_steps=1 --set train.checkpoint_every=1 --overwrite)
  file(STRINGS ${WORK}/r/metrics.jsonl recs REGEX "\"type\":\"train\"")
  list(LENGTH recs n)
  file(GLOB ckpts RELATIVE ${WORK}/r/checkpoints ${WORK}/r/checkpoints/step_*)
  if(NOT n EQUAL 1 OR NOT "${ckpts}" STREQUAL "step_00000001")
    message(FATAL_ERROR "--overwrite left the earlier run: ${n} train records, checkpoints ${ckpts}")
  endif()
  run(2 trian --config ${tiny_mlp})
  expect(ERR "unknown command 'trian'; did you mean 'train'?")
elseif(CASE STREQUAL "auto_layout")
  set(common --config ${tiny_gpt} --set data.path=${corpus} --set model.dropout=0 --set train.max_steps=6
             --set train.eval_every=0 --set train.save_final=true)
  # The tiny GPT's DDP ranks hold 16 bytes per parameter (34,688: 555 KB) plus activations;
  # ZeRO-2 holds 4 + 12 / 2 and fits the 1.35 MiB budget that DDP (1.45 MiB) does not.
  # auto_run(<expected exit> <memory_per_rank> <run dir>): mpirun -np 2 with parallel: auto.
  macro(auto_run want budget dir)
    execute_process(COMMAND ${MPIRUN} --oversubscribe --allow-run-as-root -np 2 ${STRATA} train ${common}
                            --set parallel=auto --set run.memory_per_rank=${budget} --set run.dir=${dir}
                    WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR TIMEOUT 60)
    if(NOT "${rc}" STREQUAL "${want}")
      message(FATAL_ERROR "mpirun -np 2 strata train parallel=auto within ${budget}: exit ${rc}, expected ${want}\n"
                          "stdout:\n${OUT}\nstderr:\n${ERR}")
    endif()
  endmacro()
  auto_run(0 1.35M auto)
  string(REGEX MATCH "parallel: auto chose dp 2 x tp 1 x pp 1, zero_stage [23] of [0-9]+ layouts of 2 rank\\(s\\)" chose "${OUT}")
  if(NOT chose)
    message(FATAL_ERROR "parallel: auto did not choose ZeRO-2/3 at 2 ranks within 1.35 MiB:\n${OUT}")
  endif()
  string(REGEX MATCH "zero_stage ([23])" _ "${chose}")
  expect(OUT "layout: dp 2 x tp 1 x pp 1, zero_stage ${CMAKE_MATCH_1} | ZeRO-${CMAKE_MATCH_1} over 2 dp rank(s)")
  run(0 train ${common} --set run.dir=single)
  losses(${WORK}/auto/metrics.jsonl la)
  losses(${WORK}/single/metrics.jsonl ls)
  same_losses("${la}" "${ls}" "parallel: auto vs single process")
  # The GPT clips its gradients (grad_clip 1.0), so Adam's updates carry the reduction's
  # rounding: its small biases differ by up to ~1e-4 of their size (as under DDP).
  same_parameters(auto single 5e-4 "parallel: auto vs single process parameters")
  # Nothing fits: exit 2, naming the setting and the layouts that come closest.
  auto_run(2 100K none)
  expect(ERR "strata: error: parallel: auto: none of the" "layouts of 2 rank(s) fits run.memory_per_rank (100.00 KiB)"
         "the closest: dp " " needs " "raise run.memory_per_rank")
  run(2 train ${common} --set parallel=mesh --set run.dir=bad)
  expect(ERR "parallel: expected a mapping of layout keys or 'auto', got 'mesh'")
elseif(CASE STREQUAL "ddp_matches_single_process")
  # 2 ranks x 8 samples (mpirun, parallel.dp auto) against 1 process x 16 samples: the
  # logged losses (world average) must agree to 1e-5 relative at every step, and the
  # rank-0 checkpoint must load in a single-process eval. No dropout (its masks are
  # per-rank); grad accumulation exercises no_sync.
  set(common --config ${tiny_mlp} --set model.dropout=0 --set train.max_steps=8 --set train.grad_accum_steps=2
             --set train.eval_every=0)
  execute_process(COMMAND ${MPIRUN} --oversubscribe --allow-run-as-root -np 2 ${STRATA} train ${common}
                          --set run.dir=ddp
                  WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR TIMEOUT 40)
  if(NOT "${rc}" STREQUAL "0")
    message(FATAL_ERROR "mpirun -np 2 strata train: exit code ${rc}\nstdout:\n${OUT}\nstderr:\n${ERR}")
  endif()
  expect(OUT "layout: dp 2 x tp 1 x pp 1, zero_stage 0 | DDP over 2 dp rank(s) (mpi backend" "final val accuracy: ")
  run(0 train ${common} --set run.dir=single)
  losses(${WORK}/ddp/metrics.jsonl ld)
  losses(${WORK}/single/metrics.jsonl ls)
  list(LENGTH ld nd)
  if(NOT nd EQUAL 8)
    message(FATAL_ERROR "expected 8 train records (rank 0 only writes)\nddp: ${ld}")
  endif()
  same_losses("${ld}" "${ls}" "ddp vs single process")
  # The last step's update shows in no train loss: the final evaluation and the saved
  # parameters (evaluated again from the checkpoints) must agree too.
  same_evals(${WORK}/ddp/metrics.jsonl ${WORK}/single/metrics.jsonl "ddp vs single process")
  same_checkpoint_eval(ddp single "ddp vs single process checkpoints")
  same_parameters(ddp single 1e-5 "ddp vs single process parameters")
  # Resume under mpirun: 4 steps, checkpoint, 4 more == 8 straight, bit for bit
  # (constant LR, so the schedule does not depend on max_steps).
  macro(ddp_run dir steps)
    execute_process(COMMAND ${MPIRUN} --oversubscribe --allow-run-as-root -np 2 ${STRATA} train ${common}
                            --set schedule.name=constant --set run.dir=${dir}
                            --set train.max_steps=${steps} ${ARGN}
                    WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR TIMEOUT 40)
    if(NOT "${rc}" STREQUAL "0")
      message(FATAL_ERROR "mpirun -np 2 strata train (${dir}): exit code ${rc}\n${OUT}\n${ERR}")
    endif()
  endmacro()
  ddp_run(straight 8)
  ddp_run(half 4)
  ddp_run(resumed 8 --resume half)
  expect(OUT "resumed from")
  losses(${WORK}/straight/metrics.jsonl la)
  losses(${WORK}/resumed/metrics.jsonl lc)
  list(SUBLIST la 4 4 la_tail)
  if(NOT "${la_tail}" STREQUAL "${lc}")
    message(FATAL_ERROR "ddp resumed losses differ\nstraight: ${la_tail}\nresumed:  ${lc}")
  endif()
elseif(CASE STREQUAL "hsdp_matches_single_process")
  # HSDP under mpirun -np 4 (parallel.dp_shard 2: ZeRO within 2 shard groups of 2 ranks,
  # the gradient slices averaged over the 2 replicas) logs the losses one process logs
  # (tiny GPT, accumulation and clipping on) at ZeRO-3 and ZeRO-1, and ends with the
  # parameters of DDP over the same 4 ranks (to 1e-5; both differ from one process's by
  # 6.5e-5 in the attention bias, whose tiny gradients Adam scales up). The HSDP checkpoint (replica 0's slices only) resumes in one process as the
  # one process's own does, and the one process's checkpoint resumes under HSDP.
  set(common --config ${SRC}/tests/data_files/tiny_gpt.yaml --set data.path=${corpus} --set model.dropout=0
             --set train.max_steps=6 --set train.grad_accum_steps=2 --set train.save_final=true)
  macro(hsdp_run dir stage)
    mpi_run(4 train ${ARGN} --set run.dir=${dir} --set parallel.zero_stage=${stage} --set parallel.dp_shard=2)
    expect(OUT "layout: dp 4 x tp 1 x pp 1, zero_stage ${stage}, dp_shard 2 x dp_replicate 2 | HSDP ZeRO-${stage} over 4 dp rank(s) in 2 replicas of 2-rank shard groups")
  endmacro()
  # A shard group or a replica count that does not divide dp: exit 2 naming the key.
  run(2 train ${common} --set run.dir=bad --set parallel.zero_stage=3 --set parallel.dp=1 --set parallel.dp_shard=3)
  expect(ERR "parallel.dp_shard: is 3 but does not divide parallel.dp = 1")
  run(2 train ${common} --set run.dir=bad --set parallel.zero_stage=1 --set parallel.dp_replicate=2)
  expect(ERR "parallel.dp_replicate: is 2 but does not divide parallel.dp = 1")
  run(0 train ${common} --set run.dir=single)
  losses(${WORK}/single/metrics.jsonl ls)
  mpi_run(4 train ${common} --set run.dir=ddp4)
  foreach(stage 3 1)
    hsdp_run(h${stage} ${stage} ${common})
    losses(${WORK}/h${stage}/metrics.jsonl lh${stage})
    same_losses("${ls}" "${lh${stage}}" "HSDP ZeRO-${stage} vs one process")
    same_parameters(ddp4 h${stage} 1e-5 "HSDP ZeRO-${stage} vs DDP parameters")
  endforeach()
  # HSDP x cp: dp 2 x cp 2 at ZeRO-3 with dp_shard 1: each shard group is one dp rank's 2 cp
  # ranks, the 2 replicas average; one process's losses.
  mpi_run(4 train ${common} --set run.dir=hcp --set parallel.zero_stage=3 --set parallel.cp=2 --set parallel.dp_shard=1)
  expect(OUT "HSDP ZeRO-3 over 4 dp x cp rank(s) in 2 replicas of 2-rank shard groups")
  losses(${WORK}/hcp/metrics.jsonl lhcp)
  same_losses("${ls}" "${lhcp}" "HSDP ZeRO-3 x cp 2 vs one process")
  # 16-bit model states under HSDP: one bf16 process's losses to bf16's noise.
  run(0 train ${common} --set run.dir=single_bf16 --set run.precision=bf16_params)
  losses(${WORK}/single_bf16/metrics.jsonl lsb)
  hsdp_run(hbf 1 ${common} --set run.precision=bf16_params)
  losses(${WORK}/hbf/metrics.jsonl lhbf)
  same_losses("${lsb}" "${lhbf}" "HSDP ZeRO-1 bf16_params vs one bf16 process" 1e-3)
  set(resume --config ${SRC}/tests/data_files/tiny_gpt.yaml --set data.path=${corpus} --set model.dropout=0
             --set train.max_steps=8 --set train.grad_accum_steps=2)
  run(0 train ${resume} --set run.dir=rs --resume single)
  run(0 train ${resume} --set run.dir=rh --resume h3)
  hsdp_run(hr 3 ${resume} --resume single)
  losses(${WORK}/rs/metrics.jsonl lrs)
  losses(${WORK}/rh/metrics.jsonl lrh)
  losses(${WORK}/hr/metrics.jsonl lhr)
  same_losses("${lrs}" "${lrh}" "one-process resume of the HSDP vs the one-process checkpoint")
  same_losses("${lrs}" "${lhr}" "HSDP resume vs one-process resume of the one-process checkpoint")
elseif(CASE STREQUAL "moe_matches_single_process")
  # A tiny MoE GPT (4 experts, top-2, on both blocks; capacity off) under mpirun -np 4 with
  # expert parallelism (ep 4: one expert per rank; ep 2 with ZeRO-1 over the rest) logs one
  # process's losses and routes every step's tokens to the same experts (metrics.jsonl's
  # moe records equal), and ends with one process's parameters. Its checkpoint (experts as
  # boxes of the global tensors) resumes in one process and at ep 2 as one process's own.
  set(moe --set model.moe.experts=4 --set model.moe.top_k=2 --set model.moe.z_loss_coef=0.001)
  set(common --config ${SRC}/tests/data_files/tiny_gpt.yaml --set data.path=${corpus} --set model.dropout=0
             --set train.max_steps=6 --set train.save_final=true ${moe})
  # the moe records of a run, one "step=tokens|dropped" per train record
  function(routing file out)
    file(STRINGS ${file} lines REGEX "\"type\":\"train\"")
    set(result "")
    foreach(line ${lines})
      string(JSON step GET "${line}" step)
      string(JSON tokens GET "${line}" moe tokens)
      string(JSON dropped GET "${line}" moe dropped)
      string(REGEX REPLACE "[ \n]" "" tokens "${tokens}")
      string(REGEX REPLACE "[ \n]" "" dropped "${dropped}")
      list(APPEND result "${step}=${tokens}|${dropped}")
    endforeach()
    set(${out} "${result}" PARENT_SCOPE)
  endfunction()
  run(2 train ${common} --set run.dir=bad --set parallel.ep=3)
  expect(ERR "parallel.ep: is 3 but does not divide parallel.dp = 1")
  run(0 train ${common} --set run.dir=single)
  losses(${WORK}/single/metrics.jsonl ls)
  routing(${WORK}/single/metrics.jsonl rs)
  mpi_run(4 train --set run.dir=ep4 ${common} --set parallel.ep=4)
  expect(OUT "zero_stage 0, ep 4 | DDP over 4 dp rank(s)" "expert parallel over 4 ep rank(s)")
  mpi_run(4 train --set run.dir=ep2z1 ${common} --set parallel.ep=2 --set parallel.zero_stage=1)
  foreach(r ep4 ep2z1)
    losses(${WORK}/${r}/metrics.jsonl l)
    routing(${WORK}/${r}/metrics.jsonl rr)
    same_losses("${ls}" "${l}" "${r} vs one process")
    if(NOT "${rr}" STREQUAL "${rs}")
      message(FATAL_ERROR "${r}: the tokens per expert differ from one process's\n${rr}\nvs\n${rs}")
    endif()
    same_parameters(single ${r} 1e-3 "${r} vs one-process parameters")
  endforeach()
  # ep x cp: every sequence split over 2 cp ranks (the balance loss counts each sequence
  # over them), the experts over 2 ep ranks: one process's losses and routing.
  mpi_run(4 train --set run.dir=cp2 ${common} --set parallel.ep=2 --set parallel.cp=2)
  expect(OUT "dp 2 x cp 2 x tp 1 x pp 1, zero_stage 0, ep 2" "context parallel over 2 cp rank(s)")
  losses(${WORK}/cp2/metrics.jsonl l)
  routing(${WORK}/cp2/metrics.jsonl rr)
  same_losses("${ls}" "${l}" "ep 2 x cp 2 vs one process")
  if(NOT "${rr}" STREQUAL "${rs}")
    message(FATAL_ERROR "ep 2 x cp 2: the tokens per expert differ from one process's\n${rr}\nvs\n${rs}")
  endif()
  # 16-bit model states (bf16 parameters, activations and gradients, f32 masters): ep 2
  # logs one bf16 process's losses to bf16's own noise (1e-3; the same as DDP without ep).
  run(0 train ${common} --set run.dir=bf1 --set run.precision=bf16_params)
  mpi_run(2 train --set run.dir=bf2 ${common} --set parallel.ep=2 --set run.precision=bf16_params)
  losses(${WORK}/bf1/metrics.jsonl l1)
  losses(${WORK}/bf2/metrics.jsonl l2)
  same_losses("${l1}" "${l2}" "bf16_params ep 2 vs one process" 1e-3)
  # Hugging Face export is of dense models: an MoE checkpoint is refused, naming it.
  run(1 ckpt export --checkpoint ep4 --out hf --format hf)
  expect(ERR "holds a mixture-of-experts model (model.moe)")
  set(resume --config ${SRC}/tests/data_files/tiny_gpt.yaml --set data.path=${corpus} --set model.dropout=0
             --set train.max_steps=9 ${moe})
  run(0 train ${resume} --set run.dir=rs --resume single)
  run(0 train ${resume} --set run.dir=r1 --resume ep4)
  mpi_run(2 train --set run.dir=r2 ${resume} --set parallel.ep=2 --resume ep4)
  losses(${WORK}/rs/metrics.jsonl lrs)
  foreach(r r1 r2)
    losses(${WORK}/${r}/metrics.jsonl l)
    same_losses("${lrs}" "${l}" "resume of the ep 4 checkpoint (${r}) vs of one process's")
  endforeach()
elseif(CASE STREQUAL "zero_matches_ddp")
  # ZeRO-1/2/3 under mpirun -np 2 log the same losses as DDP (tiny GPT, grad accumulation
  # and clipping on); the stage-3 sharded checkpoint evaluates single-process, resumes on
  # 1 process exactly like the DDP checkpoint does, and consolidates to one file.
  set(common --config ${SRC}/tests/data_files/tiny_gpt.yaml --set data.path=${corpus} --set model.dropout=0
             --set train.max_steps=6 --set train.grad_accum_steps=2 --set train.save_final=true)
  foreach(stage 0 1 2 3)
    execute_process(COMMAND ${MPIRUN} --oversubscribe --allow-run-as-root -np 2 ${STRATA} train ${common}
                            --set run.dir=z${stage} --set parallel.zero_stage=${stage} --memory-report
                    WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR TIMEOUT 60)
    if(NOT "${rc}" STREQUAL "0")
      message(FATAL_ERROR "mpirun -np 2 strata train zero_stage ${stage}: exit code ${rc}\n${OUT}\n${ERR}")
    endif()
    losses(${WORK}/z${stage}/metrics.jsonl l${stage})
    if(stage GREATER 0)
      expect(OUT "ZeRO-${stage} over 2 dp rank(s)" "ZeRO-${stage} at 2 rank(s), zero_stage ${stage}")
      same_losses("${l0}" "${l${stage}}" "zero_stage ${stage} vs DDP")
      same_evals(${WORK}/z0/metrics.jsonl ${WORK}/z${stage}/metrics.jsonl "zero_stage ${stage} vs DDP")
      same_checkpoint_eval(z0 z${stage} "zero_stage ${stage} vs DDP checkpoints")
      same_parameters(z0 z${stage} 1e-5 "zero_stage ${stage} vs DDP parameters")
    endif()
  endforeach()
  if(NOT EXISTS ${WORK}/z3/checkpoints/step_00000006/index.json)
    message(FATAL_ERROR "zero_stage 3 wrote no sharded checkpoint")
  endif()
  set(resume --config ${SRC}/tests/data_files/tiny_gpt.yaml --set data.path=${corpus} --set model.dropout=0
             --set train.max_steps=8 --set train.grad_accum_steps=2)
  run(0 train ${resume} --set run.dir=r3 --resume z3)
  run(0 train ${resume} --set run.dir=r0 --resume z0)
  losses(${WORK}/r3/metrics.jsonl lr3)
  losses(${WORK}/r0/metrics.jsonl lr0)
  same_losses("${lr0}" "${lr3}" "single-process resume of the ZeRO-3 vs the DDP checkpoint")
  run(0 ckpt consolidate --checkpoint z3/checkpoints/step_00000006 --out z3.safetensors)
  if(NOT EXISTS ${WORK}/z3.safetensors)
    message(FATAL_ERROR "ckpt consolidate wrote nothing")
  endif()
elseif(CASE STREQUAL "info")
  run(0 info)
  expect(OUT "strata " "blas: " "cpu kernels: " "threads: " "cpu: yes" "mpi: yes" "cuda: ")
  run(2 bogus_subcommand)
else()
  message(FATAL_ERROR "unknown e2e case '${CASE}'")
endif()
