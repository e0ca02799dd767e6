# End-to-end tests of training on one's own data (ctest label e2e): token .bin files,
# .npy and IDX images, their splits and their errors, through the built `strata` binary.
# Included by tests/CMakeLists.txt it registers the cases; run as
# `cmake -DCASE=<name> -DSTRATA=<binary> -DSRC=<source dir> -DWORK=<dir> -P data_e2e.cmake`.
# Fixtures: tests/data_files/{tokens,tokens_raw.bin,arrays} (tests/data_files/make_fixtures.py).
# Also: make_tokens (tools/make_tokens.py, when python3 exists) and ddp_matches_single_process
# (mpirun, label dist).

if(NOT CMAKE_SCRIPT_MODE_FILE)
  foreach(case tokens_match_text tokens_errors npy_run idx_run array_errors)
    add_test(NAME e2e_data_${case}
             COMMAND ${CMAKE_COMMAND} -DCASE=${case} -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                     -DWORK=${CMAKE_CURRENT_BINARY_DIR}/e2e_data/${case} -P ${CMAKE_CURRENT_LIST_FILE})
    set_tests_properties(e2e_data_${case} PROPERTIES LABELS e2e TIMEOUT 120)
  endforeach()
  # tools/make_tokens.py still writes what strata reads (needs python3, no packages).
  find_program(strata_data_python NAMES python3)
  if(strata_data_python)
    add_test(NAME e2e_data_make_tokens
             COMMAND ${CMAKE_COMMAND} -DCASE=make_tokens -DSTRATA=$<TARGET_FILE:strata_cli> -DSRC=${PROJECT_SOURCE_DIR}
                     -DPYTHON=${strata_data_python} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/e2e_data/make_tokens
                     -P ${CMAKE_CURRENT_LIST_FILE})
    set_tests_properties(e2e_data_make_tokens PROPERTIES LABELS e2e TIMEOUT 120)
  endif()
  # The own-data splits under mpirun DDP (label dist): same losses as one process.
  find_program(strata_data_mpirun NAMES mpirun mpiexec)
  if(strata_data_mpirun)
    add_test(NAME e2e_data_ddp_matches_single_process
             COMMAND ${CMAKE_COMMAND} -DCASE=ddp_matches_single_process -DSTRATA=$<TARGET_FILE:strata_cli>
                     -DSRC=${PROJECT_SOURCE_DIR} -DMPIRUN=${strata_data_mpirun}
                     -DCOMPARE=$<TARGET_FILE:strata_compare_checkpoints>
                     -DWORK=${CMAKE_CURRENT_BINARY_DIR}/e2e_data/ddp_matches_single_process -P ${CMAKE_CURRENT_LIST_FILE})
    set_tests_properties(e2e_data_ddp_matches_single_process PROPERTIES LABELS "e2e;dist" TIMEOUT 120 PROCESSORS 2
                         ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endif()
  return()
endif()

# ---------------------------------------------------------------- script mode
include(${CMAKE_CURRENT_LIST_DIR}/cmake/script_helpers.cmake)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(files ${SRC}/tests/data_files)
set(arrays ${files}/arrays)
set(tiny_gpt ${files}/tiny_gpt.yaml)

# eval_splits(<metrics.jsonl> <out var>): "step:split" of each eval record, in order.
function(eval_splits file out)
  file(STRINGS ${file} evals REGEX "\"type\":\"eval\"")
  set(result "")
  foreach(e ${evals})
    string(JSON split GET "${e}" split)
    string(JSON step GET "${e}" step)
    list(APPEND result "${step}:${split}")
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# A small classifier over the 3-class 8x8 fixture images; ARGN adds data keys.
function(write_array_config path dataset)
  string(JOIN ", " extra ${ARGN})
  file(WRITE ${path} "run: {dir: run, seed: 1, threads: 1}\nmodel: {type: mlp, hidden: [32]}\n"
                     "data: {dataset: ${dataset}, num_classes: 3, prefetch: 0, ${extra}}\n"
                     "optim: {name: adam, lr: 0.01}\n"
                     "train: {max_steps: 40, batch_size: 16, log_every: 10, eval_every: 20}\n")
endfunction()

if(CASE STREQUAL "tokens_match_text")
  # tokens/{train,val}.bin are tiny_corpus.txt's bytes in llm.c format, split as the text
  # dataset splits it (val_fraction 0.1): with stride 1 both runs see the same windows and
  # must log the same losses, bit for bit.
  run(0 train --config ${tiny_gpt} --set data.path=${files}/tiny_corpus.txt --set run.dir=text)
  run(0 train --config ${tiny_gpt} --set data.dataset=tokens --set data.path=${files}/tokens --set data.stride=1
      --set model.vocab_size=256 --set run.dir=tok)
  expect(OUT "final val loss: ")
  losses(${WORK}/text/metrics.jsonl lt)
  losses(${WORK}/tok/metrics.jsonl lk)
  list(LENGTH lk n)
  if(NOT n EQUAL 10 OR NOT "${lt}" STREQUAL "${lk}")
    message(FATAL_ERROR "tokens vs text losses differ\ntext:   ${lt}\ntokens: ${lk}")
  endif()
  # Raw nanoGPT uint16 with the val tail carved, the default stride (block_size), a
  # larger vocabulary than the data needs (GPT-2's 50257, padded as nanoGPT's 50304).
  run(0 train --config ${tiny_gpt} --set data.dataset=tokens --set data.path=${files}/tokens_raw.bin
      --set data.val_fraction=0.2 --set model.vocab_size=50304 --set run.dir=raw --set train.max_steps=3
      --set train.batch_size=4)
  expect(OUT "final val loss: ")
  # The llm.c files by name, and a checkpoint evaluated by `strata eval`.
  run(0 train --config ${tiny_gpt} --set data.dataset=tokens --set data.path=${files}/tokens/train.bin
      --set data.val_fraction=null --set data.val_path=${files}/tokens/val.bin --set model.vocab_size=256
      --set run.dir=named --set train.max_steps=3 --set train.save_final=true)
  run(0 eval --checkpoint named)
  expect(OUT "val loss: ")
elseif(CASE STREQUAL "tokens_errors")
  set(tok --config ${tiny_gpt} --set data.dataset=tokens --set data.path=${files}/tokens --set run.dir=run)
  # An id the vocabulary cannot hold: exit 1 naming the file, the id and its position.
  run(1 train ${tok} --set model.vocab_size=100)
  expect(ERR "strata: error:" "${files}/tokens/train.bin" "token id 104 at position 1" "vocabulary of 100")
  # No vocabulary: a config error naming the key.
  run(2 train ${tok})
  expect(ERR "strata: error: model.vocab_size:")
  # A val file and a val fraction at once.
  run(2 train ${tok} --set model.vocab_size=256 --set data.val_path=${files}/tokens/val.bin)
  expect(ERR "strata: error: data.val_fraction:")
  # A missing file and a file that is not tokens (an odd number of bytes).
  run(1 train ${tok} --set model.vocab_size=256 --set data.path=${WORK}/nope.bin)
  expect(ERR "${WORK}/nope.bin")
  file(WRITE ${WORK}/odd.bin "abc")
  run(1 train ${tok} --set model.vocab_size=256 --set data.path=${WORK}/odd.bin)
  expect(ERR "${WORK}/odd.bin" "3 bytes is odd")
elseif(CASE STREQUAL "npy_run")
  # val carved from train for evaluation during training; test evaluated once at the end.
  write_array_config(${WORK}/npy.yaml npy "images: ${arrays}/train_x_u8.npy" "labels: ${arrays}/train_y_i64.npy"
                     "test_images: ${arrays}/test_x_u8.npy" "test_labels: ${arrays}/test_y_i64.npy"
                     "val_fraction: 0.2" "seed: 4")
  run(0 train --config npy.yaml --set train.save_final=true)
  expect(OUT "96 train / 24 val samples" "final val accuracy: " "final test accuracy: ")
  eval_splits(${WORK}/run/metrics.jsonl splits)
  if(NOT "${splits}" STREQUAL "20:val;40:val;40:test")
    message(FATAL_ERROR "eval records ${splits}, expected val at 20 and 40, then test at 40")
  endif()
  file(STRINGS ${WORK}/run/metrics.jsonl last REGEX "\"split\":\"test\"")
  string(JSON acc GET "${last}" accuracy)
  string(JSON samples GET "${last}" samples)
  if(acc LESS 0.9 OR NOT samples EQUAL 30)
    message(FATAL_ERROR "test accuracy ${acc} on ${samples} samples, expected >= 0.9 on 30: ${last}")
  endif()
  # The model's input width comes from the file's header, for `strata eval` as well.
  run(0 eval --checkpoint run)
  expect(OUT "val accuracy: ")
  # Without val_fraction the test split is the eval split; float32 vectors, int32 labels.
  write_array_config(${WORK}/f32.yaml npy "images: ${arrays}/train_x_f32.npy" "labels: ${arrays}/train_y_i32.npy"
                     "test_images: ${arrays}/train_x_f32.npy" "test_labels: ${arrays}/train_y_u8.npy")
  run(0 train --config f32.yaml --set run.dir=f32)
  expect(OUT "120 train / 120 test samples" "final test accuracy: ")
  # A CNN takes (N, H, W) uint8 images as (1, H, W).
  run(0 train --config npy.yaml --set run.dir=cnn --set model.type=cnn --set "model.channels=[4]"
      --set model.hidden=16 --set train.max_steps=4)
  expect(OUT "final test accuracy: ")
elseif(CASE STREQUAL "idx_run")
  # IDX images and labels without a test split: val (default 0.1, seeded) is the eval split.
  write_array_config(${WORK}/idx.yaml idx "images: ${arrays}/train-images-idx3-ubyte.gz"
                     "labels: ${arrays}/train-labels-idx1-ubyte.gz")
  run(0 train --config idx.yaml)
  expect(OUT "108 train / 12 val samples" "final val accuracy: ")
  expect_not(OUT "test accuracy")
  eval_splits(${WORK}/run/metrics.jsonl splits)
  if(NOT "${splits}" STREQUAL "20:val;40:val")
    message(FATAL_ERROR "eval records ${splits}, expected val at 20 and 40")
  endif()
  # The same data as IDX and as .npy trains to the same losses.
  write_array_config(${WORK}/npy.yaml npy "images: ${arrays}/train_x_u8.npy" "labels: ${arrays}/train_y_u8.npy")
  run(0 train --config npy.yaml --set run.dir=npy)
  losses(${WORK}/run/metrics.jsonl li)
  losses(${WORK}/npy/metrics.jsonl ln)
  if(NOT "${li}" STREQUAL "${ln}")
    message(FATAL_ERROR "IDX vs .npy losses differ\nidx: ${li}\nnpy: ${ln}")
  endif()
elseif(CASE STREQUAL "array_errors")
  write_array_config(${WORK}/idx.yaml idx "images: ${arrays}/train-images-idx3-ubyte.gz"
                     "labels: ${arrays}/train-labels-idx1-ubyte.gz")
  # Labels past data.num_classes: exit 1 naming the labels file and the sample.
  run(1 train --config idx.yaml --set data.num_classes=2)
  expect(ERR "strata: error:" "train-labels-idx1-ubyte.gz: label 2 of sample")
  # Config errors name the key.
  run(2 train --config idx.yaml --set data.num_classes=null)
  expect(ERR "strata: error: data.num_classes: required key is missing")
  run(2 train --config idx.yaml --set data.test_images=${arrays}/t10k-images-idx3-ubyte.gz)
  expect(ERR "strata: error: data.test_images: data.test_images and data.test_labels go together")
  run(2 train --config idx.yaml --set data.dataset=imagenet)
  expect(ERR "strata: error: data.dataset: expected one of")
  # .npy that numpy writes but strata refuses: Fortran order, named with the file.
  write_array_config(${WORK}/npy.yaml npy "images: ${arrays}/fortran.npy" "labels: ${arrays}/train_y_i64.npy")
  run(1 train --config npy.yaml)
  expect(ERR "${arrays}/fortran.npy" "fortran_order is True")
  # A CNN whose pooling does not divide the 8x8 images.
  write_array_config(${WORK}/cnn.yaml npy "images: ${arrays}/train_x_u8.npy" "labels: ${arrays}/train_y_i64.npy")
  run(2 train --config cnn.yaml --set model.type=cnn --set model.hidden=16 --set "model.channels=[4, 4, 4, 4]")
  expect(ERR "strata: error: model.type: cnn needs square images" "(1,8,8)")
elseif(CASE STREQUAL "make_tokens")
  # Byte-level, llm.c format: byte for byte the committed fixture strata's tests read.
  execute_process(COMMAND ${PYTHON} ${SRC}/tools/make_tokens.py ${files}/tiny_corpus.txt --out-dir llmc
                  WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "make_tokens.py failed (${rc}):\n${OUT}${ERR}")
  endif()
  expect(OUT "bytes (vocab 256): 2362 train / 262 val tokens" "vocab_size: 256")
  foreach(f train.bin val.bin)
    execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/llmc/${f} ${files}/tokens/${f} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "make_tokens.py's ${f} differs from tests/data_files/tokens/${f}")
    endif()
  endforeach()
  # Raw nanoGPT uint16, one file, val carved by strata: trains.
  execute_process(COMMAND ${PYTHON} ${SRC}/tools/make_tokens.py ${files}/tiny_corpus.txt --out-dir raw --format raw
                          --val-fraction 0
                  WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR)
  file(SIZE ${WORK}/raw/train.bin size)
  if(NOT rc EQUAL 0 OR NOT size EQUAL 5248 OR EXISTS ${WORK}/raw/val.bin)
    message(FATAL_ERROR "make_tokens.py --format raw: exit ${rc}, train.bin of ${size} bytes (expected 2624 x 2)")
  endif()
  run(0 train --config ${tiny_gpt} --set data.dataset=tokens --set data.path=raw/train.bin --set model.vocab_size=256
      --set run.dir=run --set train.max_steps=2 --set train.save_final=true)
  expect(OUT "final val loss: ")
  # raw/tokenizer.json says "bytes": `strata sample` reads a text prompt and prints text.
  file(READ ${WORK}/raw/tokenizer.json meta)
  if(NOT meta MATCHES "\"tokenizer\": \"bytes\"")
    message(FATAL_ERROR "make_tokens.py's tokenizer.json: ${meta}")
  endif()
  run(0 sample --checkpoint run --prompt "The quick" --tokens 4 --seed 1 --threads 1)
  if(NOT OUT MATCHES "^The quick")
    message(FATAL_ERROR "sample of a byte-level tokens model does not continue the text:\n${OUT}")
  endif()
  # Without it the ids are printed, a text prompt is refused, and --decode turns ids to text.
  file(REMOVE ${WORK}/raw/tokenizer.json)
  run(2 sample --checkpoint run --prompt "The" --tokens 4 --threads 1)
  expect(ERR "--prompt: this model was trained on token ids" "give --prompt-ids")
  run(0 sample --checkpoint run --prompt-ids "84,104 101" --tokens 4 --seed 1 --threads 1)
  if(NOT OUT MATCHES "^[0-9]+ [0-9]+ [0-9]+ [0-9]+ *\n?$")
    message(FATAL_ERROR "sample --prompt-ids should print 4 ids:\n${OUT}")
  endif()
  run(2 sample --checkpoint run --prompt-ids "84,x" --threads 1)
  expect(ERR "--prompt-ids: 'x' is not a token id")
  execute_process(COMMAND ${PYTHON} ${SRC}/tools/make_tokens.py --decode bytes INPUT_FILE ${files}/decode_ids.txt
                  RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR)
  if(NOT rc EQUAL 0 OR NOT OUT STREQUAL "The river")
    message(FATAL_ERROR "make_tokens.py --decode bytes: exit ${rc}, '${OUT}' ${ERR}")
  endif()
  # A tokenizer that is not installed is named (tiktoken is optional).
  execute_process(COMMAND ${PYTHON} -c "import tiktoken" RESULT_VARIABLE have_tiktoken OUTPUT_QUIET ERROR_QUIET)
  if(NOT have_tiktoken EQUAL 0)
    execute_process(COMMAND ${PYTHON} ${SRC}/tools/make_tokens.py ${files}/tiny_corpus.txt --out-dir tk
                            --tokenizer tiktoken:gpt2
                    WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR)
    if(rc EQUAL 0 OR NOT ERR MATCHES "needs the tiktoken package")
      message(FATAL_ERROR "make_tokens.py without tiktoken: exit ${rc}\n${ERR}")
    endif()
  endif()
elseif(CASE STREQUAL "ddp_matches_single_process")
  # 2 ranks x 8 samples against 1 process x 16: .npy images with a val and a test split
  # (the test evaluation is collective too), and llm.c token files.
  write_array_config(${WORK}/npy.yaml npy "images: ${arrays}/train_x_u8.npy" "labels: ${arrays}/train_y_i64.npy"
                     "test_images: ${arrays}/test_x_u8.npy" "test_labels: ${arrays}/test_y_i64.npy"
                     "val_fraction: 0.2")
  set(gpt --config ${tiny_gpt} --set data.dataset=tokens --set data.path=${files}/tokens --set model.vocab_size=256
          --set model.dropout=0 --set train.max_steps=6 --set train.batch_size=16 --set train.save_final=true)
  foreach(kind npy gpt)
    if(kind STREQUAL "npy")
      set(common --config npy.yaml --set train.max_steps=12)
    else()
      set(common ${gpt})
    endif()
    execute_process(COMMAND ${MPIRUN} --oversubscribe --allow-run-as-root -np 2 ${STRATA} train ${common}
                            --set run.dir=${kind}_ddp
                    WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE OUT ERROR_VARIABLE ERR TIMEOUT 60)
    if(NOT "${rc}" STREQUAL "0")
      message(FATAL_ERROR "mpirun -np 2 strata train (${kind}): exit code ${rc}\nstdout:\n${OUT}\nstderr:\n${ERR}")
    endif()
    expect(OUT "DDP over 2 dp rank(s)" "final val")
    run(0 train ${common} --set run.dir=${kind}_single)
    losses(${WORK}/${kind}_ddp/metrics.jsonl ld)
    losses(${WORK}/${kind}_single/metrics.jsonl ls)
    same_losses("${ld}" "${ls}" "${kind}: ddp vs single process")
    same_evals(${WORK}/${kind}_ddp/metrics.jsonl ${WORK}/${kind}_single/metrics.jsonl "${kind}: ddp vs single process")
    # The GPT clips its gradients (tiny_gpt: grad_clip 1.0), so Adam's updates carry the
    # reduction's rounding: its small biases differ by up to ~1e-4 of their size.
    if(kind STREQUAL "npy")
      same_parameters(${kind}_ddp ${kind}_single 1e-5 "${kind}: ddp vs single process parameters")
    else()
      same_parameters(${kind}_ddp ${kind}_single 5e-4 "${kind}: ddp vs single process parameters")
    endif()
  endforeach()
  eval_splits(${WORK}/npy_ddp/metrics.jsonl splits)
  if(NOT "${splits}" STREQUAL "12:val;12:test")
    message(FATAL_ERROR "npy under DDP: eval records ${splits}, expected val then test at step 12")
  endif()
else()
  message(FATAL_ERROR "unknown data e2e case '${CASE}'")
endif()
