# Hostile inputs through the built `strata` binary (ctest label e2e): each is
# one error naming the key path (config, exit 2) or the file (data, exit 1), never a hang
# (FIFOs), a crash or a partial run. Two roles as in e2e.cmake: included, it registers one
# ctest entry per case; run with -DCASE=<name> -P, it executes that case.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  set(strata_hostile_script ${CMAKE_CURRENT_LIST_FILE})
  set(strata_hostile_cases
      config_directory config_fifo config_duplicate_key config_second_document config_misspelt_required
      config_deep_nesting config_huge_number text_path_fifo idx_file_fifo idx_file_device)
  foreach(case ${strata_hostile_cases})
    add_test(NAME hostile_${case}
             COMMAND ${CMAKE_COMMAND} -DCASE=${case} -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                     -DWORK=${CMAKE_CURRENT_BINARY_DIR}/hostile/${case} -P ${strata_hostile_script})
    # A FIFO opened by mistake blocks forever: the timeout turns that into a failure.
    set_tests_properties(hostile_${case} PROPERTIES LABELS e2e TIMEOUT 30)
  endforeach()
  return()
endif()

# ---------------------------------------------------------------- script mode
include(${CMAKE_CURRENT_LIST_DIR}/cmake/script_helpers.cmake)

set(tiny_mlp ${SRC}/tests/data_files/tiny_mlp.yaml)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# mkfifo(<path>): a named pipe at path.
function(mkfifo path)
  execute_process(COMMAND mkfifo ${path} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mkfifo ${path} failed")
  endif()
endfunction()

# write_fashion_config(): WORK/fm.yaml, a Fashion-MNIST run whose IDX files are in WORK/fm.
function(write_fashion_config)
  file(WRITE ${WORK}/fm.yaml "run: {dir: run, threads: 1}\ndata: {dataset: fashion_mnist, path: fm}\n"
                             "optim: {lr: 0.01}\ntrain: {max_steps: 1}\n")
endfunction()

if(CASE STREQUAL "config_directory")
  file(MAKE_DIRECTORY ${WORK}/cfg.d)
  run(2 train --config cfg.d)
  expect(ERR "strata: error: config file 'cfg.d' is a directory, not a YAML file")
elseif(CASE STREQUAL "config_fifo")
  mkfifo(${WORK}/cfg.fifo)
  run(2 train --config cfg.fifo)
  expect(ERR "config file 'cfg.fifo' is not a regular file")
elseif(CASE STREQUAL "config_duplicate_key")
  file(WRITE ${WORK}/dup.yaml "run: {dir: run}\noptim:\n  lr: 0.002\n  lr: 5.0\n")
  run(2 train --config dup.yaml)
  expect(ERR "strata: error: optim.lr: duplicate key (first at line 3); each key may appear once (line 4)")
elseif(CASE STREQUAL "config_second_document")
  file(WRITE ${WORK}/two.yaml "run: {dir: run}\noptim: {lr: 0.1}\n---\noptim: {lr: 5.0}\n")
  run(2 train --config two.yaml)
  expect(ERR "two.yaml:3: a second YAML document")
elseif(CASE STREQUAL "config_misspelt_required")
  file(WRITE ${WORK}/typo.yaml "run: {dir: run}\noptimm:\n  lr: 0.1\n")
  run(2 train --config typo.yaml)
  expect(ERR "strata: error: optimm: unknown key; did you mean 'optim'? (line 2)")
elseif(CASE STREQUAL "config_deep_nesting")
  string(REPEAT "[" 50000 deep)
  file(WRITE ${WORK}/deep.yaml "run: ${deep}\n")
  run(2 train --config deep.yaml)
  expect(ERR "deep.yaml:" "nested deeper than the parser allows")
elseif(CASE STREQUAL "config_huge_number")
  run(2 train --config ${tiny_mlp} --set train.batch_size=1180591620717411303424)
  expect(ERR "train.batch_size: expected an integer, got '1180591620717411303424' (out of range")
elseif(CASE STREQUAL "text_path_fifo")
  mkfifo(${WORK}/corpus.fifo)
  file(WRITE ${WORK}/text.yaml "run: {dir: run, threads: 1}\nmodel: {type: gpt, block_size: 8, n_layer: 1, n_head: 1, "
                               "n_embd: 8}\ndata: {dataset: text, path: corpus.fifo}\noptim: {lr: 0.01}\n"
                               "train: {max_steps: 1, batch_size: 2}\n")
  run(1 train --config text.yaml)
  expect(ERR "strata: error: [text] corpus.fifo is a FIFO (named pipe), not a regular file")
elseif(CASE STREQUAL "idx_file_fifo")
  file(MAKE_DIRECTORY ${WORK}/fm)
  mkfifo(${WORK}/fm/train-images-idx3-ubyte.gz)
  write_fashion_config()
  run(1 train --config fm.yaml)
  expect(ERR "strata: error: [idx] fm/train-images-idx3-ubyte.gz is a FIFO (named pipe), not a regular file")
elseif(CASE STREQUAL "idx_file_device")
  file(MAKE_DIRECTORY ${WORK}/fm)
  file(CREATE_LINK /dev/zero ${WORK}/fm/train-images-idx3-ubyte.gz SYMBOLIC)
  write_fashion_config()
  run(1 train --config fm.yaml)
  expect(ERR "strata: error: [idx] fm/train-images-idx3-ubyte.gz is a character device, not a regular file")
else()
  message(FATAL_ERROR "unknown case ${CASE}")
endif()
