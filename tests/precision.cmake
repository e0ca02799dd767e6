# End-to-end tests of `run.precision: bf16_params` (16-bit model states, docs/precision.md)
# through the `strata` binary (ctest label e2e). Included by tests/CMakeLists.txt it
# registers the cases; run as `cmake -DCASE=<name> -DSTRATA=<binary> -DSRC=<source dir>
# -DWORK=<dir> -P precision.cmake` it executes one.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  foreach(case bf16_params_resume_bit_exact bf16_params_checkpoint_to_f32 bf16_params_config_errors f16_params_trains)
    add_test(NAME e2e_${case}
             COMMAND ${CMAKE_COMMAND} -DCASE=${case} -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                     -DWORK=${CMAKE_CURRENT_BINARY_DIR}/e2e/${case} -P ${CMAKE_CURRENT_LIST_FILE})
    set_tests_properties(e2e_${case} PROPERTIES LABELS e2e TIMEOUT 120)
  endforeach()
  return()
endif()

# ---------------------------------------------------------------- script mode
include(${CMAKE_CURRENT_LIST_DIR}/cmake/script_helpers.cmake)
set(tiny_gpt ${SRC}/tests/data_files/tiny_gpt.yaml)
set(corpus ${SRC}/tests/data_files/tiny_corpus.txt)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(gpt --config ${tiny_gpt} --set data.path=${corpus} --set run.precision=bf16_params)

if(CASE STREQUAL "bf16_params_resume_bit_exact")
  # 12 steps straight vs 6, checkpoint (f32 masters), resume for 6: identical losses as
  # written (%.17g), dropout and AdamW included (a step schedule: cosine depends on max_steps).
  list(APPEND gpt --set schedule.name=step --set schedule.step_size=4 --set schedule.gamma=0.7)
  run(0 train ${gpt} --set run.dir=a --set train.max_steps=12)
  expect(OUT "precision: bf16_params (16-bit model states, f32 master weights)")
  run(0 train ${gpt} --set run.dir=b --set train.max_steps=6 --set train.save_final=true)
  run(0 train ${gpt} --set run.dir=c --set train.max_steps=12 --resume b)
  expect(OUT "resumed from")
  losses(${WORK}/a/metrics.jsonl la)
  losses(${WORK}/c/metrics.jsonl lc)
  list(SUBLIST la 6 6 la_tail)
  if(NOT "${la_tail}" STREQUAL "${lc}")
    message(FATAL_ERROR "resumed losses differ\nstraight: ${la_tail}\nresumed:  ${lc}")
  endif()
elseif(CASE STREQUAL "bf16_params_checkpoint_to_f32")
  # A bf16_params checkpoint resumes in f32 and in autocast runs, and an f32 one in bf16_params.
  run(0 train ${gpt} --set run.dir=h --set train.max_steps=4 --set train.save_final=true)
  run(0 train --config ${tiny_gpt} --set data.path=${corpus} --set run.dir=f --set train.max_steps=6 --resume h)
  expect(OUT "resumed from")
  run(0 train --config ${tiny_gpt} --set data.path=${corpus} --set run.precision=bf16 --set run.dir=ac
      --set train.max_steps=6 --resume h)
  run(0 train --config ${tiny_gpt} --set data.path=${corpus} --set run.dir=f2 --set train.max_steps=4
      --set train.save_final=true)
  run(0 train ${gpt} --set run.dir=h2 --set train.max_steps=6 --resume f2)
  expect(OUT "resumed from")
elseif(CASE STREQUAL "bf16_params_config_errors")
  run(2 train ${gpt} --set parallel.replicas=2)
  expect(ERR "run.precision: bf16_params works with DDP, ZeRO-1/2/3, tensor and pipeline parallelism")
  run(2 train ${gpt} --set run.precision=f16_params --set parallel.tp=2)
  expect(ERR "run.precision: f16_params (dynamic loss scaling) works on one process, with DDP and ZeRO-1/2/3")
  run(0 plan ${gpt} --ranks 4 --set parallel.zero_stage=2)
  expect(OUT "x 2 bytes" "(18.00Ψ)" "(7.00Ψ)" "(5.50Ψ)" "(4.00Ψ)")
elseif(CASE STREQUAL "f16_params_trains")
  # f16 model states with dynamic loss scaling through the trainer; resume restores the scale.
  run(0 train ${gpt} --set run.precision=f16_params --set run.dir=f16 --set train.max_steps=6 --set train.save_final=true)
  expect(OUT "precision: f16_params (16-bit model states, f32 master weights, dynamic loss scaling)")
  run(0 train ${gpt} --set run.precision=f16_params --set run.dir=f16b --set train.max_steps=8 --resume f16)
  expect(OUT "resumed from")
else()
  message(FATAL_ERROR "unknown case ${CASE}")
endif()
