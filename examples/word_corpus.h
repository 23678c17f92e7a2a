// examples/word_corpus.h — the data side of the word-level language model
// (examples/word_language_model.cpp), as data.py of pytorch/examples'
// word_language_model: a Dictionary of words and a Corpus of three token streams.
//
// Corpus(dir) reads dir/train.txt, dir/valid.txt and dir/test.txt (WikiText-2's
// layout, or the synthetic corpus of tools/make_word_corpus.py). Each line is
// split at whitespace and ends with the word "<eos>"; every new word gets the next
// index, in the order first seen (train, then valid, then test), so two programs
// that read the same files number the words alike. Each split becomes one int64
// tensor (N) of word indices.
// Read before: docs/api.md ("Tensors"). Read next: examples/word_lm_model.h.
#pragma once

#include <lockstep.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace examples {

class Dictionary {
 public:
  // The index of `word`, adding it when new.
  int64_t add_word(const std::string& word) {
    auto [it, added] = word2idx_.try_emplace(word, static_cast<int64_t>(idx2word_.size()));
    if (added) idx2word_.push_back(word);
    return it->second;
  }
  int64_t size() const { return static_cast<int64_t>(idx2word_.size()); }
  const std::string& word(int64_t index) const { return idx2word_.at(static_cast<size_t>(index)); }

 private:
  std::unordered_map<std::string, int64_t> word2idx_;
  std::vector<std::string> idx2word_;
};

class Corpus {
 public:
  explicit Corpus(const std::string& dir) {
    LS_CHECK(std::filesystem::is_directory(dir), "Corpus: directory '", dir, "' does not exist; "
             "give --data a directory with train.txt, valid.txt and test.txt (WikiText-2's layout), "
             "or write a synthetic one with tools/make_word_corpus.py DIR");
    train = tokenize(dir + "/train.txt");
    valid = tokenize(dir + "/valid.txt");
    test = tokenize(dir + "/test.txt");
  }

  Dictionary dictionary;
  lockstep::Tensor train, valid, test;  // (N) int64 word indices each

 private:
  // The words of `path`, each line followed by "<eos>", as indices (N).
  lockstep::Tensor tokenize(const std::string& path) {
    std::ifstream in(path);
    LS_CHECK(in.is_open(), "Corpus: cannot open '", path, "'");
    std::vector<int64_t> ids;
    std::string line, word;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      while (words >> word) ids.push_back(dictionary.add_word(word));
      ids.push_back(dictionary.add_word("<eos>"));
    }
    LS_CHECK(!in.bad(), "Corpus: error while reading '", path, "'");
    LS_CHECK(ids.size() >= 2, "Corpus: '", path, "' holds no words; a split needs at least one line");
    return lockstep::tensor(ids);
  }
};

}  // namespace examples
