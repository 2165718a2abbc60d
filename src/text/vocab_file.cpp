// Reading and writing vocab.txt files.
#include "text/vocab_file.h"

#include "base/error.h"
#include "text/utf8.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <unordered_map>

namespace fp8kit::text {

namespace fs = std::filesystem;

namespace {

// Fails naming the first token that repeats an earlier one, with both ids.
void check_unique(const std::vector<std::string>& vocab, const fs::path& path) {
  std::unordered_map<std::string_view, size_t> first;
  for (size_t i = 0; i < vocab.size(); ++i) {
    const auto [it, inserted] = first.try_emplace(vocab[i], i);
    FP8KIT_CHECK(inserted, "{}:{}: token \"{}\" already appears on line {}", path.string(), i + 1, vocab[i],
                 it->second + 1);
  }
}

}  // namespace

std::string vocab_token_problem(std::string_view token) {
  if (token.empty()) return "is empty";
  if (token.size() > kMaxVocabTokenBytes) {
    return fmt::format("has {} bytes, more than the {} a vocab.txt token may have", token.size(), kMaxVocabTokenBytes);
  }
  if (token.find_first_of("\r\n") != std::string_view::npos) return "contains a line break";
  if (!is_valid_utf8(token)) return "is not valid UTF-8";
  return "";
}

std::vector<std::string> read_vocab(const fs::path& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  FP8KIT_CHECK(fs::exists(status), "cannot open vocabulary file {}: check the path", path.string());
  FP8KIT_CHECK(fs::is_regular_file(status), "vocabulary file {} is not a regular file (a folder, device or pipe); give "
               "a vocab.txt with one token per line", path.string());
  std::ifstream in(path, std::ios::binary);
  FP8KIT_CHECK(in.good(), "cannot open vocabulary file {}: check its permissions", path.string());
  // Read in bounded chunks rather than trusting the file size (files in /proc report 0 bytes).
  std::string bytes;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    bytes.append(chunk, static_cast<size_t>(in.gcount()));
    FP8KIT_CHECK(bytes.size() <= kMaxVocabFileBytes,
                 "vocabulary file {} is larger than {} MiB, more than any vocab.txt; is it the right file?",
                 path.string(), kMaxVocabFileBytes >> 20);
  }
  FP8KIT_CHECK(!in.bad(), "error while reading vocabulary file {}", path.string());
  FP8KIT_CHECK(!bytes.starts_with('{') || !nlohmann::json::accept(bytes),
               "vocabulary file {} is JSON (a tokenizer.json? `lm train` and `tokenize` take one with --tokenizer), "
               "not a WordPiece vocab.txt of one token per line", path.string());

  std::vector<std::string> vocab;
  for (size_t begin = 0; begin < bytes.size();) {
    size_t end = bytes.find('\n', begin);
    if (end == std::string::npos) end = bytes.size();
    std::string_view line(bytes.data() + begin, end - begin);
    if (line.ends_with('\r')) line.remove_suffix(1);
    const std::string problem = vocab_token_problem(line);
    FP8KIT_CHECK(problem.empty(), "{}:{}: the token {}{}", path.string(), vocab.size() + 1, problem,
                 line.empty() ? " (a vocab.txt has one token per line, no blank lines)" : "");
    vocab.emplace_back(line);
    begin = end + 1;
  }
  FP8KIT_CHECK(!vocab.empty(), "vocabulary file {} is empty", path.string());
  check_unique(vocab, path);
  return vocab;
}

void write_vocab(const fs::path& path, const std::vector<std::string>& vocab) {
  FP8KIT_CHECK(!vocab.empty(), "no tokens to write to {}: a vocab.txt needs at least one", path.string());
  for (size_t i = 0; i < vocab.size(); ++i) {
    const std::string problem = vocab_token_problem(vocab[i]);
    FP8KIT_CHECK(problem.empty(), "vocabulary token {} {}; it cannot be written to {}", i, problem, path.string());
  }
  check_unique(vocab, path);
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    FP8KIT_CHECK(out.good(), "cannot write {}: check that the directory exists and is writable", tmp.string());
    for (const auto& token : vocab) out << token << '\n';
    out.flush();
    FP8KIT_CHECK(out.good(), "error while writing {} (disk full?)", tmp.string());
  }
  std::error_code error;
  fs::rename(tmp, path, error);
  FP8KIT_CHECK(!error, "cannot rename {} to {}: {}", tmp.string(), path.string(), error.message());
}

}  // namespace fp8kit::text
