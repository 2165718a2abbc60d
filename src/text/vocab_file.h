// WordPiece vocabulary files in the BERT / Hugging Face `vocab.txt` format: one token per line,
// UTF-8, the line number (from 0) is the token id.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace fp8kit::text {

// Reads a vocab.txt: strips a trailing "\n" or "\r\n" from each line; rejects empty files, empty
// tokens, duplicate tokens and invalid UTF-8 with a message naming the line.
std::vector<std::string> read_vocab(const std::filesystem::path& path);

// Writes one token per line, each followed by "\n". Writes to a temporary file and renames it,
// so an interrupted write never leaves a partial vocab. Rejects tokens containing a newline.
void write_vocab(const std::filesystem::path& path, const std::vector<std::string>& vocab);

}  // namespace fp8kit::text
