// Byte-level BPE tokenizer (GPT-2, Llama 3): split the text with a pattern (text/split_pattern.h),
// write each piece's bytes as byte-level tokens, then apply the merges by rank, as Hugging Face
// tokenizers does. Any byte string encodes, and decodes back to itself. Reads and writes Hugging
// Face tokenizer.json files.
#pragma once

#include "text/split_pattern.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fp8kit::text {

// A token matched in the text before splitting (when asked for), never produced by merges, such
// as "<|endoftext|>"; tokenizer.json's added_tokens.
struct BpeAddedToken {
  int32_t id = 0;
  bool special = true;
};

// Everything a BPE tokenizer is made of, as tokenizer.json holds it.
struct BpeModel {
  std::vector<std::string> tokens;                  // id -> the token's bytes (an added token: its content)
  std::vector<std::pair<int32_t, int32_t>> merges;  // by rank: the ids of the two tokens merged
  std::vector<BpeAddedToken> added_tokens;
  SplitPattern pattern = SplitPattern::kGpt2;
  bool ignore_merges = false;  // a piece that is a token is that token, merges or not (Llama 3)
  // Ids the post-processor puts before a text (TemplateProcessing: Llama 3's <|begin_of_text|>);
  // encode does not add them: a model's inputs begin with them (bos_ids()).
  std::vector<int32_t> prefix;
};

// Whether encode reads special added tokens' text as those tokens (as Hugging Face does by default)
// or as plain text (safe for untrusted text: "<|endoftext|>" in a review stays ordinary tokens).
// Added tokens that are not special are matched either way, as Hugging Face matches them with
// encode_special_tokens (transformers' split_special_tokens).
enum class SpecialTokens { kAsText, kParse };

// Memo of piece -> token ids for repeated encode calls from one thread (a piece's ids never
// change, and real text repeats its words). It grows with the distinct pieces seen (those up to
// 64 bytes); a new one starts empty.
class BpeWordCache {
 private:
  friend class BpeTokenizer;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // piece -> (offset, count) of its ids in ids_
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, Hash, std::equal_to<>> entries_;
  std::vector<int32_t> ids_;
};

class BpeTokenizer {
 public:
  // Checks `model` (every field as tokenizer.json names it in the errors): ids 0..n-1 each name a
  // token, ordinary tokens are distinct and include all 256 single bytes, each merge joins two
  // ordinary tokens into an ordinary token.
  explicit BpeTokenizer(BpeModel model);

  // Reads a Hugging Face tokenizer.json with a byte-level BPE model (GPT-2's and Llama 3's shapes).
  // Anything else (another model type, a normalizer, a pre-tokenizer other than ByteLevel or
  // Split(GPT-2's or Llama 3's regex) + ByteLevel, ...) is an error naming the file and the field.
  static BpeTokenizer load(const std::filesystem::path& tokenizer_json);

  // Writes tokenizer.json (atomically: a temporary file renamed into place) that load and Hugging
  // Face tokenizers read back to the same encodings.
  void save(const std::filesystem::path& tokenizer_json) const;

  // Token ids of any bytes (invalid UTF-8 included); adds no BOS/EOS.
  std::vector<int32_t> encode(std::string_view text, SpecialTokens special = SpecialTokens::kAsText) const;

  // Appends the ids of `text` to `ids`, memoizing pieces in `cache`.
  void encode(std::string_view text, std::vector<int32_t>& ids, BpeWordCache& cache,
              SpecialTokens special = SpecialTokens::kAsText) const;

  // Ids of each text, in parallel over texts (OpenMP, a cache per thread).
  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string> texts) const;

  // The bytes of the tokens (an added token's content included); an id outside the vocabulary is an error.
  std::string decode(std::span<const int32_t> ids) const;

  int32_t vocab_size() const { return static_cast<int32_t>(model_.tokens.size()); }

  // Id of an added token with this content, else of the ordinary token with these bytes.
  std::optional<int32_t> token_id(std::string_view token) const;

  // The bytes of token `id` (an error outside the vocabulary).
  const std::string& token_bytes(int32_t id) const;

  // The end-of-text token: the added token "<|endoftext|>" (GPT-2) or "<|end_of_text|>" (Llama 3).
  std::optional<int32_t> eos_id() const;

  // What Hugging Face's tokenizer puts before a text (model().prefix): a BOS for Llama 3, none for GPT-2.
  std::span<const int32_t> bos_ids() const { return model_.prefix; }

  const BpeModel& model() const { return model_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // of the merged token
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Appends the ids of one piece.
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids) const;
  // Appends the ids of text holding no added token to parse.
  void encode_plain(std::string_view text, std::vector<int32_t>& ids, BpeWordCache& cache) const;

  BpeModel model_;
  std::vector<bool> is_added_;                         // [tokens]
  std::unordered_map<std::string, int32_t> ordinary_;  // bytes -> id
  std::unordered_map<std::string, int32_t> added_;     // content -> id
  std::unordered_map<std::string, int32_t> non_special_added_;  // the same, of those not special
  int32_t byte_ids_[256];
  std::unordered_map<uint64_t, Merge> merges_;  // pair_key(left, right) -> merge
};

}  // namespace fp8kit::text
