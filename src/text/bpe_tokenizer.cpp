// Byte-level BPE encoding and decoding (tokenizer.json reading and writing: tokenizer_json.cpp).
#include "text/bpe_tokenizer.h"

#include "base/error.h"
#include "text/byte_level.h"

#include <algorithm>
#include <functional>
#include <queue>

namespace fp8kit::text {

namespace {

// Pieces longer than this are encoded every time rather than memoized (they rarely repeat).
constexpr size_t kMaxCachedPieceBytes = 64;

}  // namespace

BpeTokenizer::BpeTokenizer(BpeModel model) : model_(std::move(model)) {
  const auto n = static_cast<int64_t>(model_.tokens.size());
  FP8KIT_CHECK(n > 0, "model.vocab is empty");
  FP8KIT_CHECK(n < INT32_MAX, "model.vocab has {} tokens, more than ids of 32 bits hold", n);
  is_added_.assign(n, false);
  for (const BpeAddedToken& added : model_.added_tokens) {
    FP8KIT_CHECK(added.id >= 0 && added.id < n, "added_tokens: id {} is outside the vocabulary of {} tokens", added.id, n);
    FP8KIT_CHECK(!is_added_[added.id], "added_tokens: id {} appears twice", added.id);
    is_added_[added.id] = true;
    const std::string& content = model_.tokens[added.id];
    FP8KIT_CHECK(!content.empty(), "added_tokens: the content of id {} is empty", added.id);
    const auto [it, inserted] = added_.try_emplace(content, added.id);
    FP8KIT_CHECK(inserted, "added_tokens: \"{}\" appears twice (ids {} and {})", content, it->second, added.id);
    if (!added.special) non_special_added_.emplace(content, added.id);
  }
  for (int32_t id = 0; id < n; ++id) {
    if (is_added_[id]) continue;
    const std::string& bytes = model_.tokens[id];
    FP8KIT_CHECK(!bytes.empty(), "model.vocab: token {} is empty", id);
    const auto [it, inserted] = ordinary_.try_emplace(bytes, id);
    FP8KIT_CHECK(inserted, "model.vocab: ids {} and {} are both \"{}\"", it->second, id, to_byte_level(bytes));
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = ordinary_.find(std::string(1, static_cast<char>(b)));
    FP8KIT_CHECK(it != ordinary_.end(),
                 "model.vocab has no token \"{}\" for the byte 0x{:02X}; a byte-level BPE needs all 256 so that any "
                 "text can be encoded", byte_level_char(static_cast<uint8_t>(b)), b);
    byte_ids_[b] = it->second;
  }
  const auto ordinary_token = [&](int32_t id, size_t rank) -> const std::string& {
    FP8KIT_CHECK(id >= 0 && id < n && !is_added_[id], "model.merges[{}]: token id {} is not an ordinary token of model.vocab",
                 rank, id);
    return model_.tokens[id];
  };
  for (const int32_t id : model_.prefix) {
    FP8KIT_CHECK(id >= 0 && id < n, "post_processor: the template's token id {} is outside the vocabulary of {} tokens",
                 id, n);
  }
  merges_.reserve(model_.merges.size());
  for (size_t rank = 0; rank < model_.merges.size(); ++rank) {
    const auto [left, right] = model_.merges[rank];
    const std::string merged = ordinary_token(left, rank) + ordinary_token(right, rank);
    const auto it = ordinary_.find(merged);
    FP8KIT_CHECK(it != ordinary_.end(), "model.merges[{}]: \"{} {}\" makes \"{}\", which is not in model.vocab", rank,
                 to_byte_level(model_.tokens[left]), to_byte_level(model_.tokens[right]), to_byte_level(merged));
    // A repeated pair keeps its first (lowest) rank, as in Hugging Face tokenizers.
    merges_.try_emplace(pair_key(left, right), Merge{static_cast<int32_t>(rank), it->second});
  }
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.size() == 1) {
    ids.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (model_.ignore_merges) {
    if (const auto it = ordinary_.find(std::string(piece)); it != ordinary_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  // The piece's bytes as a linked list of symbols; the pair of lowest rank (leftmost on ties) is
  // merged first, from a heap of (rank, left symbol) entries checked when popped.
  struct Symbol {
    int32_t id, prev, next;
  };
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) symbols[i] = {byte_ids_[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  using Entry = std::pair<int32_t, int32_t>;  // (rank, left symbol)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  const auto push = [&](int32_t i) {
    const int32_t j = symbols[i].next;
    if (j < 0) return;
    if (const auto it = merges_.find(pair_key(symbols[i].id, symbols[j].id)); it != merges_.end()) {
      heap.push({it->second.rank, i});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [rank, i] = heap.top();
    heap.pop();
    if (symbols[i].id < 0 || symbols[i].next < 0) continue;
    const int32_t j = symbols[i].next;
    const auto it = merges_.find(pair_key(symbols[i].id, symbols[j].id));
    if (it == merges_.end() || it->second.rank != rank) continue;  // stale: a neighbour was merged since
    symbols[i].id = it->second.id;
    symbols[j].id = -1;
    symbols[i].next = symbols[j].next;
    if (symbols[i].next >= 0) symbols[symbols[i].next].prev = i;
    if (symbols[i].prev >= 0) push(symbols[i].prev);
    push(i);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

void BpeTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& ids, BpeWordCache& cache) const {
  std::vector<std::string_view> pieces;
  split_pieces(text, model_.pattern, pieces);
  for (const std::string_view piece : pieces) {
    if (piece.size() > kMaxCachedPieceBytes) {
      encode_piece(piece, ids);
      continue;
    }
    auto it = cache.entries_.find(piece);
    if (it == cache.entries_.end()) {
      const size_t start = cache.ids_.size();
      encode_piece(piece, cache.ids_);
      it = cache.entries_.emplace(piece, std::pair(static_cast<uint32_t>(start), static_cast<uint32_t>(cache.ids_.size() - start))).first;
    }
    const auto [offset, count] = it->second;
    ids.insert(ids.end(), cache.ids_.begin() + offset, cache.ids_.begin() + offset + count);
  }
}

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& ids, BpeWordCache& cache,
                          SpecialTokens special) const {
  const auto& matched = special == SpecialTokens::kParse ? added_ : non_special_added_;
  if (matched.empty()) return encode_plain(text, ids, cache);
  for (size_t pos = 0; pos < text.size();) {
    // The earliest added token, the longest where several start there.
    size_t at = std::string_view::npos, length = 0;
    int32_t id = -1;
    for (const auto& [content, added_id] : matched) {
      const size_t found = text.find(content, pos);
      if (found < at || (found == at && found != std::string_view::npos && content.size() > length)) {
        at = found, length = content.size(), id = added_id;
      }
    }
    encode_plain(text.substr(pos, at == std::string_view::npos ? std::string_view::npos : at - pos), ids, cache);
    if (at == std::string_view::npos) break;
    ids.push_back(id);
    pos = at + length;
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, SpecialTokens special) const {
  BpeWordCache cache;
  std::vector<int32_t> ids;
  encode(text, ids, cache, special);
  return ids;
}

std::vector<std::vector<int32_t>> BpeTokenizer::encode_batch(std::span<const std::string> texts) const {
  const auto n = static_cast<int64_t>(texts.size());
  std::vector<std::vector<int32_t>> out(n);
#pragma omp parallel
  {
    BpeWordCache cache;
#pragma omp for schedule(dynamic, 64)
    for (int64_t i = 0; i < n; ++i) encode(texts[i], out[i], cache);
  }
  return out;
}

const std::string& BpeTokenizer::token_bytes(int32_t id) const {
  FP8KIT_CHECK(id >= 0 && id < vocab_size(), "token id {} is outside the vocabulary of {} tokens", id, vocab_size());
  return model_.tokens[id];
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (const int32_t id : ids) text += token_bytes(id);
  return text;
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view token) const {
  if (const auto it = added_.find(std::string(token)); it != added_.end()) return it->second;
  if (const auto it = ordinary_.find(std::string(token)); it != ordinary_.end()) return it->second;
  return std::nullopt;
}

std::optional<int32_t> BpeTokenizer::eos_id() const {
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>"}) {
    if (const auto it = added_.find(name); it != added_.end()) return it->second;
  }
  return std::nullopt;
}

}  // namespace fp8kit::text
