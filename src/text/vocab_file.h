// WordPiece vocabulary files in the BERT / Hugging Face `vocab.txt` format: one token per line,
// UTF-8, the line number (from 0) is the token id.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace fp8kit::text {

// Bounds of a vocab.txt, far above real ones (BERT's 30,522 tokens take 226 KB; WordPiece tokens
// are words of at most 100 bytes), so that reading the wrong file fails at once.
inline constexpr size_t kMaxVocabFileBytes = size_t{64} << 20;
inline constexpr size_t kMaxVocabTokenBytes = 1024;

// Why `token` cannot be a line of a vocab.txt ("is empty", "is not valid UTF-8", ...), or "" when it can.
std::string vocab_token_problem(std::string_view token);

// Reads a vocab.txt: strips a trailing "\n" or "\r\n" from each line; rejects what is not a regular
// file or is larger than kMaxVocabFileBytes, empty files, and tokens that vocab_token_problem refuses
// or that repeat, with a message naming the line.
std::vector<std::string> read_vocab(const std::filesystem::path& path);

// Writes one token per line, each followed by "\n". Writes to a temporary file and renames it,
// so an interrupted write never leaves a partial vocab. Rejects what read_vocab would refuse (no
// tokens, a token vocab_token_problem refuses, a repeated token) before writing anything.
void write_vocab(const std::filesystem::path& path, const std::vector<std::string>& vocab);

}  // namespace fp8kit::text
