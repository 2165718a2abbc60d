// WordPiece encoding (greedy longest-match-first) and detokenization.
#include "text/wordpiece_tokenizer.h"

#include "base/error.h"
#include "text/pre_tokenizer.h"
#include "text/utf8.h"

#include <algorithm>

namespace fp8kit::text {

namespace {

// Length of the UTF-8 sequence that starts with `byte` (1 for ASCII and for invalid lead bytes).
int lead_length(unsigned char byte) {
  if (byte < 0xC0) return 1;
  if (byte < 0xE0) return 2;
  if (byte < 0xF0) return 3;
  return 4;
}

}  // namespace

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> vocab, WordPieceTokenizerOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  FP8KIT_CHECK(!vocab_.empty(), "the WordPiece vocabulary is empty");
  FP8KIT_CHECK(vocab_.size() < static_cast<size_t>(INT32_MAX), "the vocabulary has too many tokens ({})", vocab_.size());
  FP8KIT_CHECK(!options_.joiner.empty(), "the suffix indicator (joiner) must not be empty");
  FP8KIT_CHECK(options_.max_bytes_per_word > 0 && options_.max_bytes_per_word <= 126,
               "max_bytes_per_word must be in [1, 126], got {}", options_.max_bytes_per_word);
  const std::string_view joiner = options_.joiner;
  for (size_t id = 0; id < vocab_.size(); ++id) {
    const std::string& token = vocab_[id];
    FP8KIT_CHECK(!token.empty(), "vocabulary token {} is empty", id);
    const auto i = static_cast<int32_t>(id);
    // The first occurrence of a duplicated token wins, as in TF Text.
    if (token.size() > joiner.size() && std::string_view(token).starts_with(joiner)) {
      const std::string piece = token.substr(joiner.size());
      if (continuation_.try_emplace(piece, i).second) max_continuation_bytes_ = std::max(max_continuation_bytes_, piece.size());
    } else if (initial_.try_emplace(token, i).second) {
      max_initial_bytes_ = std::max(max_initial_bytes_, token.size());
    }
  }
  unknown_id_ = token_to_id(options_.unknown_token);
  FP8KIT_CHECK(unknown_id_ >= 0, "the unknown token \"{}\" is not in the vocabulary; add it (usually as id 1)",
               options_.unknown_token);
  FP8KIT_CHECK(options_.pad_id >= 0 && options_.pad_id < static_cast<int32_t>(vocab_.size()),
               "pad id {} is outside the vocabulary of {} tokens", options_.pad_id, vocab_.size());
}

int32_t WordPieceTokenizer::token_to_id(std::string_view token) const {
  const std::string_view joiner = options_.joiner;
  if (token.size() > joiner.size() && token.starts_with(joiner)) {
    const auto it = continuation_.find(token.substr(joiner.size()));
    return it == continuation_.end() ? -1 : it->second;
  }
  const auto it = initial_.find(token);
  return it == initial_.end() ? -1 : it->second;
}

const std::string& WordPieceTokenizer::id_to_token(int32_t id) const {
  FP8KIT_CHECK(id >= 0 && id < static_cast<int32_t>(vocab_.size()), "token id {} is outside the vocabulary of {} tokens",
               id, vocab_.size());
  return vocab_[id];
}

void WordPieceTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() > static_cast<size_t>(options_.max_bytes_per_word)) {
    out.push_back(unknown_id_);
    return;
  }
  // Character boundaries (byte offsets) of the word, so pieces never split a character.
  uint8_t bounds[128];  // at most max_bytes_per_word + 1 entries (checked in the constructor)
  int num_bounds = 0;
  for (size_t pos = 0; pos < word.size(); pos += lead_length(static_cast<unsigned char>(word[pos]))) {
    bounds[num_bounds++] = static_cast<uint8_t>(pos);
  }
  bounds[num_bounds] = static_cast<uint8_t>(word.size());  // the end, possibly inside a bad sequence

  const size_t mark = out.size();
  for (int b = 0; b < num_bounds;) {
    const size_t start = bounds[b];
    const auto& map = start == 0 ? initial_ : continuation_;
    const size_t max_bytes = start == 0 ? max_initial_bytes_ : max_continuation_bytes_;
    int e = num_bounds;  // longest candidate first
    int32_t found = -1;
    for (; e > b; --e) {
      const size_t length = std::min<size_t>(bounds[e], word.size()) - start;
      if (length > max_bytes) continue;
      const auto it = map.find(word.substr(start, length));
      if (it != map.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {  // not segmentable: the whole word is unknown
      out.resize(mark);
      out.push_back(unknown_id_);
      return;
    }
    out.push_back(found);
    b = e;
  }
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  pre_tokenize_each(text, [&](std::string_view word) { encode_word(word, ids); });
  return ids;
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view text, int64_t sequence_length) const {
  FP8KIT_CHECK(sequence_length > 0, "sequence length must be positive, got {}", sequence_length);
  std::vector<int32_t> ids = encode(text);
  ids.resize(sequence_length, options_.pad_id);
  return ids;
}

std::vector<int32_t> WordPieceTokenizer::encode_batch(std::span<const std::string> texts, int64_t sequence_length) const {
  FP8KIT_CHECK(sequence_length > 0, "sequence length must be positive, got {}", sequence_length);
  const auto n = static_cast<int64_t>(texts.size());
  std::vector<int32_t> out(n * sequence_length, options_.pad_id);  // [n, sequence_length]
#pragma omp parallel
  {
    std::vector<int32_t> ids;
#pragma omp for schedule(dynamic, 64)
    for (int64_t i = 0; i < n; ++i) {
      ids.clear();
      pre_tokenize_each(texts[i], [&](std::string_view word) {
        if (static_cast<int64_t>(ids.size()) < sequence_length) encode_word(word, ids);
      });
      const auto kept = std::min<int64_t>(static_cast<int64_t>(ids.size()), sequence_length);
      std::copy_n(ids.begin(), kept, out.begin() + i * sequence_length);
    }
  }
  return out;
}

std::string WordPieceTokenizer::detokenize(std::span<const int32_t> ids) const {
  std::string text;
  const std::string_view joiner = options_.joiner;
  for (int32_t id : ids) {
    const std::string_view token = id_to_token(id);
    if (token.size() > joiner.size() && token.starts_with(joiner)) {
      text += token.substr(joiner.size());
    } else {
      if (!text.empty()) text += ' ';
      text += token;
    }
  }
  return text;
}

}  // namespace fp8kit::text
