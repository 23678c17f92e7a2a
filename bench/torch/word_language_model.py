"""bench/torch/word_language_model.py — pytorch/examples' word_language_model (LSTM / GRU) in
PyTorch, reduced to what its lockstep port examples/word_language_model.cpp does, to compare the
two (bench/compare_examples.sh): the same corpus numbering, model, initialisation, truncated BPTT,
clipping, hand-written SGD and learning-rate annealing, with the same options and defaults.

    $TORCH_PY bench/torch/word_language_model.py --data DIR --epochs 3 [--seed 1111] [--threads 1]

DIR holds train.txt, valid.txt and test.txt (tools/make_word_corpus.py writes a synthetic one).
After each epoch it prints "epoch E valid_loss L lr R cpu_seconds C seconds S" (cpu:
time.process_time of the epoch's training and validation), and at the end "final
best_valid_loss B test_loss T" for the best model (kept in memory; the lockstep port saves it to
its --save file after the epoch's timed part, as the original saves it with torch.save).
Read before: examples/word_language_model.cpp. Read next: bench/compare_examples.sh.
"""
import argparse
import copy
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

EVAL_BATCH_SIZE = 10


def read_corpus(path):
    """(train, valid, test) int64 tensors and the vocabulary size: words numbered in the order
    first seen, each line followed by <eos> (examples/word_corpus.h does the same)."""
    index = {}
    splits = []
    for split in ("train", "valid", "test"):
        ids = []
        with open(os.path.join(path, f"{split}.txt"), encoding="utf8") as f:
            for line in f:
                for word in line.split() + ["<eos>"]:
                    ids.append(index.setdefault(word, len(index)))
        splits.append(torch.tensor(ids, dtype=torch.int64))
    return splits, len(index)


class RNNModel(nn.Module):
    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout, tied):
        super().__init__()
        self.ntoken, self.nhid, self.nlayers, self.rnn_type = ntoken, nhid, nlayers, rnn_type
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tied:
            self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, words, hidden):  # words (T, B) -> (T * B, ntoken), state
        output, hidden = self.rnn(self.drop(self.encoder(words)), hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        h = self.encoder.weight.new_zeros(self.nlayers, bsz, self.nhid)
        return (h, h.clone()) if self.rnn_type == "LSTM" else h


def detach(hidden):
    return tuple(h.detach() for h in hidden) if isinstance(hidden, tuple) else hidden.detach()


def batchify(data, bsz):  # (N) -> (N // bsz, bsz), the columns of examples/word_language_model.cpp
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


def evaluate(model, source, bptt):
    model.eval()
    total = 0.0
    hidden = model.init_hidden(EVAL_BATCH_SIZE)
    with torch.no_grad():
        for i in range(0, source.size(0) - 1, bptt):
            data, targets = get_batch(source, i, bptt)
            output, hidden = model(data, hidden)
            total += len(data) * F.nll_loss(output, targets).item()
    return total / (len(source) - 1)


def train_epoch(model, train_data, lr, a):
    model.train()
    hidden = model.init_hidden(a.batch_size)
    for i in range(0, train_data.size(0) - 1, a.bptt):
        data, targets = get_batch(train_data, i, a.bptt)
        hidden = detach(hidden)
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = F.nll_loss(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-lr)
        if not math.isfinite(loss.item()):
            raise SystemExit(f"the loss is not finite at row {i}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--model", default="LSTM", choices=["LSTM", "GRU"])
    p.add_argument("--emsize", type=int, default=200)
    p.add_argument("--nhid", type=int, default=200)
    p.add_argument("--nlayers", type=int, default=2)
    p.add_argument("--lr", type=float, default=20)
    p.add_argument("--clip", type=float, default=0.25)
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--bptt", type=int, default=35)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--seed", type=int, default=1111)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    (train, valid, test), ntokens = read_corpus(a.data)
    train_data = batchify(train, a.batch_size)
    val_data, test_data = batchify(valid, EVAL_BATCH_SIZE), batchify(test, EVAL_BATCH_SIZE)
    model = RNNModel(a.model, ntokens, a.emsize, a.nhid, a.nlayers, a.dropout, a.tied)
    lr, best_val_loss, best_state = a.lr, None, None
    for epoch in range(1, a.epochs + 1):
        start, cpu_start = time.perf_counter(), time.process_time()
        train_epoch(model, train_data, lr, a)
        val_loss = evaluate(model, val_data, a.bptt)
        print(f"epoch {epoch} valid_loss {val_loss:.4f} lr {lr:g} cpu_seconds "
              f"{time.process_time() - cpu_start:.2f} seconds {time.perf_counter() - start:.2f}", flush=True)
        if best_val_loss is None or val_loss < best_val_loss:
            best_val_loss, best_state = val_loss, copy.deepcopy(model.state_dict())
        else:
            lr /= 4.0
    model.load_state_dict(best_state)
    print(f"final best_valid_loss {best_val_loss:.4f} test_loss {evaluate(model, test_data, a.bptt):.4f}")


if __name__ == "__main__":
    main()
