// Reading and writing vocab.txt files.
#include "text/vocab_file.h"

#include "base/error.h"
#include "text/utf8.h"

#include <fstream>
#include <unordered_map>

namespace fp8kit::text {

std::vector<std::string> read_vocab(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  FP8KIT_CHECK(in.good(), "cannot open vocabulary file {}: check the path", path.string());
  std::vector<std::string> vocab;
  std::unordered_map<std::string, size_t> line_of;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t number = vocab.size() + 1;
    FP8KIT_CHECK(!line.empty(), "{}:{}: empty token (a vocab.txt has one token per line, no blank lines)",
                 path.string(), number);
    FP8KIT_CHECK(is_valid_utf8(line), "{}:{}: the token is not valid UTF-8", path.string(), number);
    const auto [it, inserted] = line_of.try_emplace(line, number);
    FP8KIT_CHECK(inserted, "{}:{}: token \"{}\" already appears on line {}", path.string(), number, line, it->second);
    vocab.push_back(std::move(line));
  }
  FP8KIT_CHECK(!in.bad(), "error while reading vocabulary file {}", path.string());
  FP8KIT_CHECK(!vocab.empty(), "vocabulary file {} is empty", path.string());
  return vocab;
}

void write_vocab(const std::filesystem::path& path, const std::vector<std::string>& vocab) {
  for (size_t i = 0; i < vocab.size(); ++i) {
    FP8KIT_CHECK(!vocab[i].empty() && vocab[i].find_first_of("\r\n") == std::string::npos,
                 "vocabulary token {} is empty or contains a line break; it cannot be written to vocab.txt", i);
  }
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    FP8KIT_CHECK(out.good(), "cannot write {}: check that the directory exists and is writable", tmp.string());
    for (const auto& token : vocab) out << token << '\n';
    out.flush();
    FP8KIT_CHECK(out.good(), "error while writing {} (disk full?)", tmp.string());
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  FP8KIT_CHECK(!error, "cannot rename {} to {}: {}", tmp.string(), path.string(), error.message());
}

}  // namespace fp8kit::text
