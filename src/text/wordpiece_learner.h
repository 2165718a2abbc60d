// WordPiece vocabulary learning, as TensorFlow Text's wordpiece_tokenizer_learner_lib (the
// algorithm behind KerasHub's compute_word_piece_vocabulary): count pre-tokenized words, filter
// rare characters, then binary-search a count threshold whose vocabulary fits the target size.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace fp8kit::text {

struct WordPieceLearnerOptions {
  int64_t vocab_size = 20000;  // the maximum size, reserved tokens included
  std::vector<std::string> reserved_tokens = {"[PAD]", "[UNK]"};  // ids 0, 1, ...
  int64_t upper_thresh = 10'000'000;  // binary-search bounds on the count threshold
  int64_t lower_thresh = 10;
  int num_iterations = 4;
  int64_t max_input_tokens = 5'000'000;  // most frequent distinct words kept (-1: all)
  int max_token_length = 50;             // in code points; longer words are dropped
  int64_t max_unique_chars = 1000;       // alphabet size; words with other characters are dropped
  double slack_ratio = 0.05;             // accept sizes in [vocab_size * (1 - slack), vocab_size]
  std::string joiner = "##";             // prefix of word-continuation pieces
};

// Distinct words with their counts, in order of first occurrence.
using WordCounts = std::vector<std::pair<std::string, int64_t>>;

// Pre-tokenizes every text (text/pre_tokenizer.h) and counts the words. Texts must be valid
// UTF-8. Parallel over texts (OpenMP); the result does not depend on the thread count.
WordCounts count_words(std::span<const std::string> texts);

// Learns a vocabulary from word counts: reserved tokens, then the alphabet sorted by code point,
// then learned tokens by count (descending) and code point order; truncated to vocab_size.
std::vector<std::string> learn_wordpiece_vocab(const WordCounts& word_counts,
                                               const WordPieceLearnerOptions& options = {});

// count_words + learn_wordpiece_vocab.
std::vector<std::string> learn_wordpiece_vocab(std::span<const std::string> texts,
                                               const WordPieceLearnerOptions& options = {});

}  // namespace fp8kit::text
