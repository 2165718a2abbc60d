// The pre-tokenizers of byte-level BPE: GPT-2's regex and Llama 3's (GPT-4's cl100k) regex,
// matched by hand with utf8proc's Unicode categories, so no regex library is needed.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace fp8kit::text {

enum class SplitPattern {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
};

// The pattern's regex as a tokenizer.json writes it.
std::string_view split_pattern_regex(SplitPattern pattern);

// The pattern whose regex is exactly `regex`, or nullopt.
std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex);

// "gpt2" or "llama3" (the CLI's names), and back.
std::string_view split_pattern_name(SplitPattern pattern);
std::optional<SplitPattern> split_pattern_from_name(std::string_view name);

// Appends to `pieces` the matches of `pattern` in `text`, in order, as views into `text`; they
// cover `text` exactly. \s is Unicode's White_Space, \p{L} and \p{N} are the L* and N* general
// categories; a byte that does not start well-formed UTF-8 is one character of none of these
// classes (like punctuation), so any byte string splits and concatenates back to itself.
void split_pieces(std::string_view text, SplitPattern pattern, std::vector<std::string_view>& pieces);

// The same, returned.
std::vector<std::string_view> split_pieces(std::string_view text, SplitPattern pattern);

}  // namespace fp8kit::text
