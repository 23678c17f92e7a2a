#!/usr/bin/env python3
"""tools/make_word_corpus.py — a small synthetic word-level corpus in the layout of
pytorch/examples' word_language_model data (data/wikitext-2): DIR/train.txt, DIR/valid.txt and
DIR/test.txt, one sentence a line, words separated by spaces. The word-level language model
(examples/word_language_model.cpp) and its PyTorch twin (bench/torch/word_language_model.py)
read it when WikiText-2 cannot be downloaded; its tests and bench/compare_examples.sh use it.

    tools/make_word_corpus.py DIR [--train-lines 5000] [--valid-lines 500] [--test-lines 500]
                                  [--vocab 1000] [--topics 8] [--seed 1]

The language: VOCAB pseudo-words ("kalo", "mitesu", ...) with Zipf frequencies, and TOPICS
topics, each with its own successor table (every word is followed by one of 4 words, with
probabilities 0.5, 0.25, 0.15, 0.1). A sentence picks a topic, opens with one of the topic's 3
opening words, then walks the topic's table for 5 to 17 more words. A bigram model cannot tell
the topics apart; a recurrent model that remembers the opening word can, so an LSTM's
validation loss falls well below a bigram's: the corpus has something to learn at every scale.
Deterministic (the same files for the same arguments, on every Python 3); standard library only.
Read before: examples/word_corpus.h. Read next: examples/word_language_model.cpp.
"""
import argparse
import os
import random

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]  # 70 syllables
SUCCESSOR_PROBS = [0.5, 0.25, 0.15, 0.1]
OPENERS_PER_TOPIC = 3


def make_words(rng, count):
    """count distinct pseudo-words of 2 or 3 syllables."""
    words, seen = [], set()
    while len(words) < count:
        w = "".join(rng.choice(SYLLABLES) for _ in range(rng.choice((2, 2, 3))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


class Language:
    def __init__(self, rng, vocab, topics):
        if vocab < topics * OPENERS_PER_TOPIC + len(SUCCESSOR_PROBS):
            raise SystemExit(f"make_word_corpus: --vocab {vocab} is too small for --topics {topics}")
        self.words = make_words(rng, vocab)
        zipf = [1.0 / (i + 1) for i in range(vocab)]
        self.openers = [list(range(t * OPENERS_PER_TOPIC, (t + 1) * OPENERS_PER_TOPIC))
                        for t in range(topics)]
        # successors[t][w]: the 4 words that may follow word w in topic t.
        self.successors = [[rng.choices(range(vocab), weights=zipf, k=len(SUCCESSOR_PROBS))
                            for _ in range(vocab)] for _ in range(topics)]

    def sentence(self, rng):
        t = rng.randrange(len(self.openers))
        w = rng.choice(self.openers[t])
        out = [w]
        for _ in range(rng.randint(5, 17)):
            w = rng.choices(self.successors[t][w], weights=SUCCESSOR_PROBS)[0]
            out.append(w)
        return " ".join(self.words[i] for i in out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--train-lines", type=int, default=5000)
    p.add_argument("--valid-lines", type=int, default=500)
    p.add_argument("--test-lines", type=int, default=500)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--topics", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    for name in ("train_lines", "valid_lines", "test_lines", "vocab", "topics"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    rng = random.Random(a.seed)
    language = Language(rng, a.vocab, a.topics)
    os.makedirs(a.dir, exist_ok=True)
    for split, lines in (("train", a.train_lines), ("valid", a.valid_lines), ("test", a.test_lines)):
        with open(os.path.join(a.dir, f"{split}.txt"), "w", encoding="utf8") as f:
            for _ in range(lines):
                f.write(language.sentence(rng) + "\n")


if __name__ == "__main__":
    main()
