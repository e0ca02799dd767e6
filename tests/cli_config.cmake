# CLI cases of `strata config` and `strata ckpt consolidate` on plain checkpoints (label
# e2e). Included by tests/CMakeLists.txt it registers one ctest entry per case; run as
# `cmake -DCASE=<name> -DSTRATA=<binary> -DSRC=<source dir> -DWORK=<dir> -P cli_config.cmake`
# it executes that case:
#   config_show            the resolved config holds --set values and defaults, loads back
#                          as a config, and a bad key exits 2 naming it
#   config_reference       `strata config reference` prints docs/config.md exactly
#   help_example           the --set example in `train --help` is a real key
#   consolidate_plain      a single-process checkpoint, its run dir and an already
#                          consolidated file all exit 0, the file saying there is nothing to do
#   help_words_and_finite  `strata help`, `strata help train` and `strata train help` print
#                          help with runnable examples; NaN and inf options exit 2 naming them

if(NOT CMAKE_SCRIPT_MODE_FILE)
  foreach(case config_show config_reference help_example consolidate_plain help_words_and_finite)
    add_test(NAME cli_${case}
             COMMAND ${CMAKE_COMMAND} -DCASE=${case} -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                     -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_config/${case} -P ${CMAKE_CURRENT_LIST_FILE})
    set_tests_properties(cli_${case} PROPERTIES LABELS e2e TIMEOUT 120)
  endforeach()
  return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/cmake/script_helpers.cmake)
set(tiny_mlp ${SRC}/tests/data_files/tiny_mlp.yaml)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

if(CASE STREQUAL "help_words_and_finite")
  run(0 help)
  expect(OUT "Subcommands:" "Examples:" "strata train --config configs/fashion_mlp.yaml")
  run(0 help train)
  expect(OUT "--config" "--resume")
  run(0 train help)
  expect(OUT "--config" "--resume")
  run(0 ckpt consolidate help)
  expect(OUT "--checkpoint")
  run(2 plan --config ${tiny_mlp} --ranks 2 --gflops nan)
  expect(ERR "--gflops" "'nan' is not a finite number")
  run(2 sample --checkpoint missing --temperature inf)
  expect(ERR "--temperature" "'inf' is not a finite number")
  run(2 sample --checkpoint missing --temperature -inf)
  expect(ERR "--temperature" "not a finite number")
  run(2 sample --checkpoint missing --temperature -1)  # an open range reads "to inf", not DBL_MAX's 309 digits
  expect(ERR "--temperature" "not in range 0.000000 to inf")
elseif(CASE STREQUAL "config_show")
  run(0 config show --config ${tiny_mlp} --set optim.lr=0.05)
  expect(OUT "  lr: 0.05\n" "  bucket_cap_mb: 25\n" "  dp: auto\n" "  timeout_s: 300\n")
  file(WRITE ${WORK}/resolved.yaml "${OUT}")
  run(0 config show --config resolved.yaml)
  file(WRITE ${WORK}/again.yaml "${OUT}")
  file(READ ${WORK}/resolved.yaml first)
  string(REPLACE "resolved.yaml" "" a "${first}")
  string(REPLACE "again.yaml" "" b "${OUT}")
  string(REGEX REPLACE "^# [^\n]*\n" "" a "${a}")
  string(REGEX REPLACE "^# [^\n]*\n" "" b "${b}")
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "the resolved config does not resolve to itself:\n${a}\n---\n${b}")
  endif()
  run(2 config show --config ${tiny_mlp} --set optim.lrr=1)
  expect(ERR "optim.lrr: unknown key; did you mean 'optim.lr'?")
elseif(CASE STREQUAL "config_reference")
  run(0 config reference)
  file(READ ${SRC}/docs/config.md doc)
  if(NOT OUT STREQUAL doc)
    message(FATAL_ERROR "docs/config.md differs from `strata config reference`: regenerate it with\n"
                        "  build/strata config reference > docs/config.md")
  endif()
elseif(CASE STREQUAL "help_example")
  run(0 train --help)
  string(REGEX MATCH "--set ([a-z_.]+)=([^ )]+)" example "${OUT}")
  if(NOT example)
    message(FATAL_ERROR "no --set example in train --help:\n${OUT}")
  endif()
  run(0 config show --config ${tiny_mlp} --set ${CMAKE_MATCH_1}=${CMAKE_MATCH_2})
elseif(CASE STREQUAL "consolidate_plain")
  run(0 train --config ${tiny_mlp} --set run.dir=run --set train.max_steps=2 --set train.eval_every=0)
  run(0 ckpt consolidate --checkpoint run/checkpoints/step_00000002 --out a.safetensors)
  expect(OUT "is already one safetensors file of whole tensors" "consolidated ")
  run(0 ckpt consolidate --checkpoint run --out b.safetensors)  # a run dir: its LATEST
  file(SHA256 ${WORK}/a.safetensors ha)
  file(SHA256 ${WORK}/b.safetensors hb)
  if(NOT ha STREQUAL hb)
    message(FATAL_ERROR "consolidating the run dir and its LATEST checkpoint gave different files")
  endif()
  run(0 ckpt consolidate --checkpoint a.safetensors --out c.safetensors)
  expect(OUT "a.safetensors is one safetensors file" "already consolidated, nothing to do")
  if(EXISTS ${WORK}/c.safetensors)
    message(FATAL_ERROR "nothing to do, but c.safetensors was written")
  endif()
  file(WRITE ${WORK}/not.safetensors "hello")
  run(1 ckpt consolidate --checkpoint not.safetensors --out d.safetensors)
  expect(ERR "not.safetensors")
else()
  message(FATAL_ERROR "unknown case ${CASE}")
endif()
