// Test helper: a file's contents as a string (empty when it cannot be opened, so that the comparison
// after it fails).
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace fp8kit::testing {

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace fp8kit::testing
