#!/usr/bin/env bash
# tests/examples/check_ports.sh BIN_DIR PROGRAM — one port of pytorch/examples' C++
# programs (examples/mnist.cpp, custom_dataset.cpp, dcgan.cpp, distributed.cpp) trains
# for a few seconds on synthetic data this script generates (make_example_data.py), and
# does what it should:
#   mnist           the test accuracy after 2 epochs is at least 0.6 (chance: 0.1) and the
#                   last logged training loss is below the first;
#   custom_dataset  it reads every listed image, the test loss falls below 0.8 times the
#                   first epoch's, and the last test accuracy is at least 0.6 (chance: 1/3);
#   dcgan           every loss is finite, the checkpoints and the sample files are
#                   written, and --restore continues from them;
#   distributed     2 ranks under lockstep-run (lines prefixed "[rank R] "), with DDP and with the original's allreduce
#                   loop: both ranks end with the same weights (the same checksum), and
#                   rank 0's test accuracy is at least 60%;
#   autograd        (no training) every check line the program prints is ok: backward's
#                   values, a gradient penalty through autograd::grad(create_graph), and
#                   two custom functions against the built-in ops;
#   word_language_model  on a synthetic corpus (tools/make_word_corpus.py), 20 epochs of a
#                   small LSTM: the dictionary numbers every word, the validation loss falls
#                   below a unigram model's, the best model is saved and reloaded for the
#                   test; a tied GRU runs too.
# CTest runs it once per program (tests/CMakeLists.txt).
# Read before: tests/examples/make_example_data.py. Read next: tests/examples/check_cli.sh.
set -euo pipefail
bin=$(cd "$1" && pwd)
prog="$2"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; [ -f "$work/log" ] && cat "$work/log"; exit 1; }

case "$prog" in
  mnist)
    python3 "$here/make_example_data.py" idx "$work/idx" 1280 320
    "$bin/mnist" --root "$work/idx" --epochs 2 --lr 0.05 --log-interval 5 > "$work/log" 2>&1 \
      || fail "mnist exited with $?"
    first=$(awk '/^Train Epoch/ {print $NF; exit}' "$work/log")
    last=$(awk '/^Train Epoch/ {v = $NF} END {print v}' "$work/log")
    acc=$(awk '/^final test_accuracy/ {print $3}' "$work/log")
    echo "mnist: first loss $first, last loss $last, test accuracy $acc"
    [ -n "$acc" ] || fail "no final accuracy line"
    awk -v a="$acc" 'BEGIN { exit !(a >= 0.6) }' || fail "test accuracy $acc < 0.6"
    awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f) }' || fail "the loss did not decrease ($first -> $last)"
    ;;
  custom_dataset)
    python3 "$here/make_example_data.py" folder "$work/folder" 16 8
    # AlexNet's eight layers with PyTorch's default init start with near-zero logits and need
    # some steps to leave ln(3): lr 0.2 and 10 epochs of 6 batches.
    "$bin/custom_dataset" --dataset "$work/folder" --info "$work/folder/info.txt" --iterations 10 \
      --lr 0.2 --batch 8 --log-interval 2 > "$work/log" 2>&1 || fail "custom_dataset exited with $?"
    grep -q "^48 training and 24 test images of 3 classes" "$work/log" || fail "not every listed image was read"
    first=$(awk '/^Test Loss/ {print $3; exit}' "$work/log")
    last=$(awk '/^Test Loss/ {v = $3} END {print v}' "$work/log")
    acc=$(awk '/^Test Loss/ {v = $NF} END {print v}' "$work/log")
    echo "custom_dataset: test loss $first -> $last, last test accuracy $acc"
    [ -n "$acc" ] || fail "no test line"
    awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.8 * f) }' || fail "the test loss fell too little ($first -> $last)"
    awk -v a="$acc" 'BEGIN { exit !(a >= 0.6) }' || fail "test accuracy $acc < 0.6"
    # A broken info line is named.
    echo "red/image_0000.ppm zero train" >> "$work/folder/info.txt"
    if "$bin/custom_dataset" --dataset "$work/folder" --info "$work/folder/info.txt" > "$work/log" 2>&1; then
      fail "a malformed info line was accepted"
    fi
    grep -q "info.txt:73: expected 'path label train|test'" "$work/log" || fail "the malformed line is not named"
    ;;
  dcgan)
    python3 "$here/make_example_data.py" idx "$work/idx" 96 10
    mkdir "$work/out"
    "$bin/dcgan" --root "$work/idx" --out "$work/out" --epochs 2 --batch 16 --checkpoint-every 3 \
      --log-interval 1 --samples 4 --workers 1 > "$work/log" 2>&1 || fail "dcgan exited with $?"
    grep -q "Training complete!" "$work/log" || fail "no 'Training complete!'"
    steps=$(grep -c "D_loss: [0-9.]* | G_loss: [0-9.]*$" "$work/log" || true)
    [ "$steps" -eq 12 ] || fail "$steps of 12 steps logged finite losses"
    for f in generator-checkpoint generator-optimizer-checkpoint discriminator-checkpoint \
             discriminator-optimizer-checkpoint dcgan-sample-1 dcgan-sample-4; do
      [ -s "$work/out/$f.safetensors" ] || fail "$f.safetensors not written"
    done
    head -c 2 "$work/out/dcgan-sample-4.pgm" | grep -q P5 || fail "dcgan-sample-4.pgm is not a PGM"
    # 4 samples side by side: 112 x 28 pixels after a 14-byte header.
    [ "$(stat -c %s "$work/out/dcgan-sample-4.pgm")" -eq $((14 + 112 * 28)) ] || fail "dcgan-sample-4.pgm has the wrong size"
    "$bin/dcgan" --root "$work/idx" --out "$work/out" --epochs 1 --batch 16 --checkpoint-every 100 \
      --log-interval 1 --workers 0 --restore > "$work/log" 2>&1 || fail "dcgan --restore exited with $?"
    grep -q "Training complete!" "$work/log" || fail "no 'Training complete!' after --restore"
    echo "dcgan: 12 finite steps, checkpoints and samples written, --restore continued"
    ;;
  distributed)
    python3 "$here/make_example_data.py" idx "$work/idx" 1280 320
    for sync in ddp allreduce; do
      "$bin/lockstep-run" --nproc-per-node 2 -- "$bin/distributed" --root "$work/idx" --epochs 2 \
        --lr 0.05 --sync "$sync" > "$work/log" 2>&1 || fail "distributed --sync $sync exited with $?"
      c0=$(awk '/param checksum rank 0:/ {print $NF}' "$work/log")
      c1=$(awk '/param checksum rank 1:/ {print $NF}' "$work/log")
      acc=$(awk '/Test Accuracy/ {print $NF}' "$work/log")
      echo "distributed --sync $sync: checksums $c0 $c1, test accuracy $acc%"
      [ -n "$c0" ] && [ "$c0" = "$c1" ] || fail "--sync $sync: the ranks' weights differ ($c0 vs $c1)"
      grep -q "Accuracy in rank 1 in epoch 2" "$work/log" || fail "--sync $sync: rank 1 did not train"
      awk -v a="$acc" 'BEGIN { exit !(a >= 60) }' || fail "--sync $sync: test accuracy $acc% < 60%"
    done
    ;;
  word_language_model)
    # A corpus of 300 lines (~4000 words) of 2 topics over at most 60 words: about 50 batches an epoch.
    python3 "$here/../../tools/make_word_corpus.py" "$work/corpus" --train-lines 300 --valid-lines 40 \
      --test-lines 40 --vocab 60 --topics 2
    "$bin/word_language_model" --data "$work/corpus" --epochs 20 --emsize 32 --nhid 32 --batch-size 8 \
      --bptt 10 --log-interval 10 --save "$work/lm.safetensors" > "$work/log" 2>&1 \
      || fail "word_language_model exited with $?"
    ntokens=$(awk '/ words, / {print $1; exit}' "$work/log")
    first=$(awk '$1 == "epoch" && $3 == "valid_loss" {print $4; exit}' "$work/log")
    best=$(awk '$1 == "final" {print $3}' "$work/log")
    test_loss=$(awk '$1 == "final" {print $5}' "$work/log")
    echo "word_language_model: $ntokens words, valid loss $first after epoch 1, best $best, test $test_loss"
    words=$(cat "$work/corpus"/train.txt "$work/corpus"/valid.txt "$work/corpus"/test.txt | tr -s ' ' '\n' | sort -u | grep -c .)
    [ "$ntokens" = $((words + 1)) ] || fail "the files hold $words words and <eos>, the dictionary has '$ntokens'"
    [ -n "$test_loss" ] || fail "no final line"
    [ -s "$work/lm.safetensors" ] || fail "the best model was not saved"
    # On this corpus uniform guessing costs ln(53) = 3.97 nats a word, word frequencies alone
    # (a unigram model) 2.90, the previous word (a bigram model) 1.64.
    # It stays near the unigram's loss for about 10 epochs, then learns the context.
    awk -v b="$best" 'BEGIN { exit !(b < 2.5) }' || fail "the best validation loss $best is not below 2.5"
    grep -q "^epoch [0-9]* valid_loss [0-9.]* lr 5 " "$work/log" || fail "the learning rate was never annealed to 20 / 4"
    awk -v f="$first" -v b="$best" 'BEGIN { exit !(b < f) }' || fail "the validation loss did not fall ($first -> $best)"
    awk -v t="$test_loss" -v b="$best" 'BEGIN { exit !(t < b + 0.5) }' || fail "the reloaded model tests at $test_loss"
    # A GRU, one batch an epoch (--dry-run), untied and with the decoder tied to the embedding:
    # the tied weight (ntokens x 16) is counted once.
    for tied in "" --tied; do
      "$bin/word_language_model" --data "$work/corpus" --epochs 1 --model GRU $tied --emsize 16 --nhid 16 \
        --dry-run --save "$work/gru.safetensors" > "$work/log$tied" 2>&1 || fail "word_language_model --model GRU $tied exited with $?"
      grep -q "^final best_valid_loss [0-9.]* test_loss [0-9.]*$" "$work/log$tied" || fail "--model GRU $tied: no finite final line"
    done
    untied=$(awk '/^model: GRU, / {print $3}' "$work/log")
    tied=$(awk '/^model: GRU \(tied\), / {print $4}' "$work/log--tied")
    echo "word_language_model: GRU $untied parameters, tied $tied"
    [ -n "$untied" ] && [ "$tied" = $((untied - ntokens * 16)) ] || fail "tying should remove $ntokens x 16 parameters ($untied -> $tied)"
    ;;
  autograd)
    "$bin/autograd" --seed 3 > "$work/log" 2>&1 || fail "autograd exited with $?"
    # Every part prints its checks; all eight must be there and ok.
    n=$(grep -c "^check .*: ok$" "$work/log" || true)
    ! grep -q "^check .*: FAILED" "$work/log" || fail "a check failed"
    [ "$n" -eq 8 ] || fail "$n of 8 checks printed ok"
    grep -q "^LinearFunctionBackward$" "$work/log" || fail "the custom function's grad_fn is not named"
    echo "autograd: 8 of 8 checks ok (basic ops, gradient penalty with create_graph, custom functions)"
    ;;
  *)
    echo "check_ports.sh: no case for program '$prog'"
    exit 1
    ;;
esac
echo "$prog: every check passed"
