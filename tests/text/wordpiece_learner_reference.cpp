// Literal transcription of TF Text's Python WordPiece learner (see the header).
#include "wordpiece_learner_reference.h"

#include "text/utf8.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace fp8kit::text::reference {

namespace {

using Str = std::u32string;
using Counts = std::vector<std::pair<Str, int64_t>>;

Str decode(const std::string& s) {
  Str out;
  for (size_t pos = 0; pos < s.size();) {
    char32_t c;
    pos += utf8_decode(s, pos, &c);
    out.push_back(c);
  }
  return out;
}

std::string encode(const Str& s) {
  std::string out;
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

struct Params {
  int num_iterations, max_token_length;
  int64_t vocab_size;
  double slack_ratio;
  Str joiner;
  std::vector<Str> reserved;
};

std::map<Str, int64_t> ensure_all_tokens_exist(const std::set<Str>& input, std::map<Str, int64_t> output,
                                              const Str& joiner) {
  for (const Str& token : input) {
    if (!output.count(token)) output[token] = 1;
    if (!output.count(joiner + token)) output[joiner + token] = 1;
  }
  return output;
}

std::optional<std::vector<size_t>> get_split_indices(const Str& word, const std::map<Str, int64_t>& curr,
                                                     const Str& joiner) {
  std::vector<size_t> indices;
  size_t start = 0;
  while (start < word.size()) {
    size_t end = word.size();
    while (end > start) {
      Str sub = word.substr(start, end - start);
      if (start > 0) sub = joiner + sub;
      if (curr.count(sub)) {
        indices.push_back(end);
        break;
      }
      --end;
    }
    if (end == start) return std::nullopt;
    start = end;
  }
  return indices;
}

std::vector<Str> learn_with_thresh(const Counts& word_counts, int64_t thresh, const Params& params) {
  std::set<Str> char_tokens;
  for (const auto& [word, count] : word_counts) {
    for (char32_t c : word) char_tokens.insert(Str(1, c));
  }
  std::map<Str, int64_t> curr = ensure_all_tokens_exist(char_tokens, {}, params.joiner);
  for (int iteration = 0; iteration < params.num_iterations; ++iteration) {
    std::vector<std::map<Str, int64_t>> subtokens(params.max_token_length + 1);
    for (const auto& [word, count] : word_counts) {
      std::vector<size_t> split_indices;
      if (iteration == 0) {
        for (size_t i = 1; i <= word.size(); ++i) split_indices.push_back(i);
      } else {
        auto found = get_split_indices(word, curr, params.joiner);
        if (!found || found->empty()) continue;
        split_indices = *found;
      }
      size_t start = 0;
      for (size_t index : split_indices) {
        for (size_t end = start + 1; end <= word.size(); ++end) {
          Str sub = word.substr(start, end - start);
          const size_t length = sub.size();
          if (start > 0) sub = params.joiner + sub;
          subtokens[length][sub] += count;
        }
        start = index;
      }
    }
    std::map<Str, int64_t> next;
    const size_t joiner_len = params.joiner.size();
    for (int length = params.max_token_length; length > 0; --length) {
      for (const auto& [token, count] : subtokens[length]) {
        if (count >= thresh) next[token] = count;
        if (token.size() > static_cast<size_t>(length)) {
          for (size_t i = 1 + joiner_len; i < length + joiner_len; ++i) {
            auto& shorter = subtokens[i - joiner_len];
            auto it = shorter.find(token.substr(0, i));
            if (it != shorter.end()) it->second -= count;
          }
        } else {
          for (int i = 1; i < length; ++i) {
            auto it = subtokens[i].find(token.substr(0, i));
            if (it != subtokens[i].end()) it->second -= count;
          }
        }
      }
    }
    curr = ensure_all_tokens_exist(char_tokens, next, params.joiner);
  }
  // generate_final_vocabulary
  std::vector<Str> all = params.reserved;
  all.insert(all.end(), char_tokens.begin(), char_tokens.end());
  std::vector<std::pair<Str, int64_t>> sorted(curr.begin(), curr.end());  // alphabetical already
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [token, count] : sorted) all.push_back(token);
  std::vector<Str> vocab;
  std::set<Str> seen;
  for (const Str& token : all) {
    if (seen.insert(token).second) vocab.push_back(token);
  }
  return vocab;
}

std::vector<Str> learn_binary_search(const Counts& word_counts, int64_t lower, int64_t upper, const Params& params) {
  const int64_t thresh = (upper + lower) / 2;
  std::vector<Str> vocab = learn_with_thresh(word_counts, thresh, params);
  const auto size = static_cast<int64_t>(vocab.size());
  double slack = params.slack_ratio * static_cast<double>(params.vocab_size);
  if (slack < 0) slack = 0;
  const bool within = size <= params.vocab_size && static_cast<double>(params.vocab_size - size) <= slack;
  if (within || lower >= upper || thresh <= 1) return vocab;
  if (size > params.vocab_size) return learn_binary_search(word_counts, thresh + 1, upper, params);
  return learn_binary_search(word_counts, lower, thresh - 1, params);
}

}  // namespace

std::vector<std::string> learn(const WordCounts& word_counts_utf8, const WordPieceLearnerOptions& options) {
  Params params{options.num_iterations, options.max_token_length, options.vocab_size, options.slack_ratio,
                decode(options.joiner), {}};
  for (const auto& r : options.reserved_tokens) params.reserved.push_back(decode(r));
  Counts word_counts;
  for (const auto& [w, c] : word_counts_utf8) word_counts.emplace_back(decode(w), c);

  int64_t max_count = 0, min_count = INT64_MAX;
  for (const auto& [w, c] : word_counts) max_count = std::max(max_count, c), min_count = std::min(min_count, c);
  const int64_t upper = max_count < options.upper_thresh ? max_count : options.upper_thresh;
  const int64_t lower = min_count > options.lower_thresh ? min_count : options.lower_thresh;

  Counts all_counts;  // get_input_words
  for (const auto& [w, c] : word_counts) {
    if (static_cast<int>(w.size()) > options.max_token_length) continue;
    if (std::find(params.reserved.begin(), params.reserved.end(), w) != params.reserved.end()) continue;
    all_counts.emplace_back(w, c);
  }
  std::map<char32_t, int64_t> char_counts;  // get_allowed_chars
  for (const auto& [w, c] : all_counts) {
    for (char32_t ch : w) char_counts[ch] += c;
  }
  std::vector<std::pair<char32_t, int64_t>> sorted_chars(char_counts.begin(), char_counts.end());
  std::stable_sort(sorted_chars.begin(), sorted_chars.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::set<char32_t> allowed;
  for (size_t i = 0; i < std::min<size_t>(sorted_chars.size(), options.max_unique_chars); ++i) allowed.insert(sorted_chars[i].first);
  std::stable_sort(all_counts.begin(), all_counts.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  Counts filtered;  // filter_input_words
  for (const auto& [w, c] : all_counts) {
    if (options.max_input_tokens != -1 && static_cast<int64_t>(filtered.size()) >= options.max_input_tokens) break;
    if (std::all_of(w.begin(), w.end(), [&](char32_t ch) { return allowed.count(ch) > 0; })) filtered.emplace_back(w, c);
  }
  std::vector<std::string> vocab;
  for (const Str& token : learn_binary_search(filtered, lower, upper, params)) vocab.push_back(encode(token));
  // KerasHub's compute_word_piece_vocabulary truncates to the requested size.
  if (static_cast<int64_t>(vocab.size()) > options.vocab_size) vocab.resize(options.vocab_size);
  return vocab;
}

}  // namespace fp8kit::text::reference
