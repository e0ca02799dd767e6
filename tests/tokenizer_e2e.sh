#!/usr/bin/env bash
# The tokenizer through the strata binary (ctest e2e_tokenizer_*):
#   tokenizer_e2e.sh STRATA SRC WORK CASE
# text_matches_tokens: training on the text corpus with data.tokenizer gives the same
#   losses as training on the token file `strata tokenize` wrote with that tokenizer;
#   `strata sample` then prints decoded text; a tokenizer with add_prefix_space tokenized in
#   small chunks gives the ids of encoding the file whole.
# errors: a missing data.tokenizer exits 2 naming the key, a malformed one exits 1 naming
#   the file; tokenize refuses a device as output (exit 2) and writes nothing partial.
set -euo pipefail
strata=$1 src=$2 work=$3 case=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work"
tok=$src/configs/tokenizers/fortunes_bpe.json
fail() { echo "FAIL: $*" >&2; exit 1; }
common=(--set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set train.max_steps=12
        --set train.eval_every=6 --set train.eval_batches=2 --set train.log_every=3 --set train.checkpoint_every=0
        --set run.threads=1 --set data.stride=64 --set data.val_fraction=0.1)

case $case in
text_matches_tokens)
  "$strata" tokenize /usr/share/games/fortunes -t "$tok" -o fortunes.bin --threads 2 -q
  "$strata" train -c "$src/configs/gpt_char.yaml" "${common[@]}" --set run.dir=text \
    --set data.tokenizer="$tok" >text.log
  "$strata" train -c "$src/configs/gpt_char.yaml" "${common[@]}" --set run.dir=tokens --set data.dataset=tokens \
    --set data.path="$work/fortunes.bin" --set data.tokenizer="$tok" >tokens.log
  losses() { grep -o '"loss":[^,}]*' "$1/metrics.jsonl"; }
  [[ -n "$(losses text)" ]] || fail "no losses in text/metrics.jsonl"
  [[ "$(losses text)" == "$(losses tokens)" ]] || fail "losses differ: text $(losses text | tr '\n' ' ') vs tokens $(losses tokens | tr '\n' ' ')"
  grep -q 'final val loss' text.log || fail "no final val loss"
  out=$("$strata" sample --checkpoint text --prompt "The " --tokens 10 --seed 1)
  [[ "$out" == "The "* && ${#out} -gt 6 ]] || fail "sample printed '$out'"
  "$strata" tokenizer train /usr/share/games/fortunes/science --vocab-size 600 -o gpt2.json -q
  sed '0,/"add_prefix_space": false/s//"add_prefix_space": true/' gpt2.json >prefix.json
  grep -q '"add_prefix_space": true' prefix.json || fail "no add_prefix_space in prefix.json"
  f=/usr/share/games/fortunes/science
  "$strata" tokenize "$f" -t prefix.json -o prefix.bin --chunk-bytes 4096 --threads 2 -q
  whole=$("$strata" tokenizer encode -t prefix.json --file "$f")
  chunked=$(od -An -tu2 -v -j1024 prefix.bin | tr -s ' \n' '  ' | sed 's/^ //; s/ $//')
  [[ -n "$whole" && "$whole" == "$chunked" ]] || fail "chunked ids differ from whole-file ids with add_prefix_space"
  ;;
errors)
  set +e
  msg=$("$strata" train -c "$src/configs/gpt_char.yaml" --set data.tokenizer=missing.json 2>&1); rc=$?
  [[ $rc == 2 && "$msg" == *"data.tokenizer"*"missing.json"* ]] || fail "missing tokenizer: rc $rc, '$msg'"
  printf '{"model": {"type": "Unigram"}}' >bad.json
  msg=$("$strata" train -c "$src/configs/gpt_char.yaml" "${common[@]}" --set run.dir=bad --set data.tokenizer=bad.json 2>&1); rc=$?
  [[ $rc == 1 && "$msg" == *"bad.json: model.type: 'Unigram' is not supported"* ]] || fail "malformed tokenizer: rc $rc, '$msg'"
  msg=$("$strata" tokenize /usr/share/games/fortunes -t bad.json -o x.bin 2>&1); rc=$?
  [[ $rc == 1 && "$msg" == *"bad.json"* && ! -e x.bin ]] || fail "tokenize with a malformed tokenizer: rc $rc, '$msg'"
  msg=$("$strata" tokenize /usr/share/games/fortunes -t "$tok" -o /dev/null 2>&1); rc=$?
  [[ $rc == 2 && "$msg" == *"--output '/dev/null' is a character device"* ]] || fail "tokenize to /dev/null: rc $rc, '$msg'"
  msg=$("$strata" tokenizer train /usr/share/games/fortunes --vocab-size 2048 -o /dev/null 2>&1); rc=$?
  [[ $rc == 2 ]] || fail "tokenizer train to /dev/null: rc $rc, '$msg'"
  msg=$("$strata" tokenize missing_dir -t "$tok" -o y.bin 2>&1); rc=$?
  [[ $rc == 1 && "$msg" == *"missing_dir"* && ! -e y.bin ]] || fail "missing input: rc $rc, '$msg'"
  ls | grep -q '\.tmp\.' && fail "a temporary file was left behind: $(ls)"
  ;;
*) fail "unknown case $case" ;;
esac
echo "ok: $case"
