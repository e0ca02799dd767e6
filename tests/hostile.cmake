# Hostile inputs through the built `strata` binary (ctest label e2e): each is
# one error naming the key path (config, exit 2) or the file (data, exit 1), never a hang
# (FIFOs), a crash or a partial run. Two roles as in e2e.cmake: included, it registers one
# ctest entry per case; run with -DCASE=<name> -P, it executes that case.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  set(strata_hostile_script ${CMAKE_CURRENT_LIST_FILE})
  set(strata_hostile_cases
      config_directory config_fifo config_duplicate_key config_second_document config_misspelt_required
      config_deep_nesting config_huge_number text_path_fifo idx_file_fifo idx_file_device
      output_special_files checkpoint_broken_config soak_earlier_run)
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

# Every file-writing command (plot -o, trace merge -o, ckpt consolidate --out, tokenize -o,
# tokenizer train -o) refuses to replace anything but a regular file: a FIFO, a symlink, a directory and a character
# device stay what they were (exit 2 naming --out); a missing directory is named too.
if(CASE STREQUAL "output_special_files")
  run(0 train --config ${tiny_mlp} --set run.dir=r --set train.max_steps=2 --set run.trace.start_step=0
      --set run.trace.steps=1)
  mkfifo(${WORK}/out.fifo)
  file(WRITE ${WORK}/target.txt "keep")
  file(CREATE_LINK target.txt ${WORK}/out.link SYMBOLIC)
  file(MAKE_DIRECTORY ${WORK}/out.dir)
  set(targets out.fifo out.link out.dir)
  set(kinds "a FIFO" "a symbolic link" "a directory")
  # A character device (as /dev/null is) where the host allows mknod.
  execute_process(COMMAND mknod ${WORK}/out.dev c 1 3 RESULT_VARIABLE mknod_rc ERROR_QUIET)
  if(mknod_rc EQUAL 0)
    list(APPEND targets out.dev)
    list(APPEND kinds "a character device")
  else()
    message("mknod not permitted here: the character-device case is skipped")
  endif()
  set(bpe ${SRC}/configs/tokenizers/fortunes_bpe.json)
  set(corpus ${SRC}/tests/data_files/tiny_corpus.txt)
  # "<option>|<command words>" for every command that writes one file.
  foreach(spec "--out|plot;r" "--out|trace;merge;r" "--out|ckpt;consolidate;--checkpoint;r"
               "--output|tokenize;--tokenizer;${bpe};${corpus}" "--output|tokenizer;train;--vocab-size;300;${corpus}")
    string(FIND "${spec}" "|" bar)
    string(SUBSTRING "${spec}" 0 ${bar} option)
    math(EXPR bar "${bar} + 1")
    string(SUBSTRING "${spec}" ${bar} -1 cmd)
    foreach(t k IN ZIP_LISTS targets kinds)
      run(2 ${cmd} -o ${t})
      expect(ERR "${option} '${t}' is ${k}: refusing to replace it")
    endforeach()
    run(2 ${cmd} -o missing/x.out)
    expect(ERR "${option} 'missing/x.out': the directory 'missing' does not exist")
  endforeach()
  execute_process(COMMAND test -p ${WORK}/out.fifo RESULT_VARIABLE fifo_rc)
  file(READ ${WORK}/target.txt kept)
  if(NOT fifo_rc EQUAL 0 OR NOT IS_SYMLINK ${WORK}/out.link OR NOT kept STREQUAL "keep"
     OR NOT IS_DIRECTORY ${WORK}/out.dir)
    message(FATAL_ERROR "a refused --out target was changed")
  endif()
  if(mknod_rc EQUAL 0)
    execute_process(COMMAND test -c ${WORK}/out.dev RESULT_VARIABLE dev_rc)
    if(NOT dev_rc EQUAL 0)
      message(FATAL_ERROR "the character device was replaced")
    endif()
  endif()
  # A new path and an existing regular file are written, and nothing temporary is left.
  file(WRITE ${WORK}/old.svg "old")
  run(0 plot r -o old.svg)
  run(0 plot r -o new.svg)
  run(0 trace merge r -o merged.json)
  run(0 ckpt consolidate --checkpoint r -o whole.safetensors)
  run(0 tokenize --tokenizer ${bpe} ${corpus} -o tokens.bin -q)
  run(0 tokenizer train --vocab-size 300 ${corpus} -o bpe.json -q)
  file(READ ${WORK}/old.svg svg)
  string(FIND "${svg}" "<svg" svg_at)
  file(GLOB leftovers ${WORK}/*.tmp*)
  if(NOT svg_at EQUAL 0 OR leftovers)
    message(FATAL_ERROR "old.svg not replaced by the plot, or temporaries left: ${leftovers}")
  endif()
# A checkpoint whose stored config is not YAML: exit 1 naming the checkpoint's index, not
# a bare "yaml-cpp: error at line N".
elseif(CASE STREQUAL "checkpoint_broken_config")
  run(0 train --config ${tiny_mlp} --set run.dir=r --set train.max_steps=1 --set train.save_final=true)
  set(index ${WORK}/r/checkpoints/step_00000001/index.json)
  file(READ ${index} j)
  string(JSON j SET "${j}" meta training_state config "\"run: {dir: [\"")
  file(WRITE ${index} "${j}")
  run(1 eval --checkpoint r)
  expect(ERR "checkpoint 'r/checkpoints/step_00000001/index.json': the config it stores"
         "is not valid YAML")
# `strata bench soak` into a run.dir holding an earlier run: refused (its checkpoints would
# be rotated away) unless --overwrite; the earlier checkpoint stays.
elseif(CASE STREQUAL "soak_earlier_run")
  run(0 train --config ${tiny_mlp} --set run.dir=r --set train.max_steps=1 --set train.save_final=true)
  run(2 bench soak -c ${tiny_mlp} --dir r --steps 4 --checkpoint-every 2 --probe 2 --backend local --ranks 1)
  expect(ERR "run.dir: 'r' holds an earlier run" "--overwrite")
  if(NOT EXISTS ${WORK}/r/checkpoints/step_00000001/index.json)
    message(FATAL_ERROR "the refused soak removed the earlier checkpoint")
  endif()
elseif(CASE STREQUAL "config_directory")
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
