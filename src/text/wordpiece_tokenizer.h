// WordPiece tokenizer (KerasHub's WordPieceTokenizer over TF Text's FastWordpieceTokenizer, with
// the seed's settings): pre-tokenize, greedy longest-match-first pieces with "##" continuations,
// [UNK] for words that cannot be split, then truncation or right-padding to a sequence length.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fp8kit::text {

struct WordPieceTokenizerOptions {
  std::string unknown_token = "[UNK]";  // must be in the vocabulary
  std::string joiner = "##";
  int max_bytes_per_word = 100;  // longer words become [UNK]
  int32_t pad_id = 0;            // the id used for padding ([PAD] in the seed's vocabulary)
};

// Holds the vocabulary and its token -> id index (the invariant guarded here).
class WordPieceTokenizer {
 public:
  explicit WordPieceTokenizer(std::vector<std::string> vocab, WordPieceTokenizerOptions options = {});

  // Token ids of `text` (valid UTF-8, already lowercased if wanted), neither truncated nor padded.
  std::vector<int32_t> encode(std::string_view text) const;

  // Token ids truncated to the first `sequence_length` or right-padded with pad_id.
  std::vector<int32_t> encode(std::string_view text, int64_t sequence_length) const;

  // Encodes every text into a [texts.size(), sequence_length] row-major matrix (OpenMP over texts).
  std::vector<int32_t> encode_batch(std::span<const std::string> texts, int64_t sequence_length) const;

  // Tokens joined with spaces, "##" pieces glued to the previous token, as TF Text's detokenize
  // (pads are printed as [PAD], as in the seed). Ids outside the vocabulary are an error.
  std::string detokenize(std::span<const int32_t> ids) const;

  // Id of a token, or -1 when it is not in the vocabulary.
  int32_t token_to_id(std::string_view token) const;
  const std::string& id_to_token(int32_t id) const;

  const std::vector<std::string>& vocab() const { return vocab_; }
  int32_t unknown_id() const { return unknown_id_; }

 private:
  // Appends the pieces of one pre-tokenized word to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> vocab_;
  WordPieceTokenizerOptions options_;
  // Word-initial tokens, and continuation tokens stored without the joiner.
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> initial_;
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> continuation_;
  size_t max_initial_bytes_ = 0, max_continuation_bytes_ = 0;
  int32_t unknown_id_ = -1;
};

}  // namespace fp8kit::text
