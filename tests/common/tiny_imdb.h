// Test data: a tiny generated aclImdb folder for the commands that train on IMDB.
#pragma once

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace fp8kit::testing {

// <name>/{train,test}/{neg,pos}/<i>_<rating>.txt with short reviews built from telling words, 12
// per class in train and `test_count` in test.
inline std::filesystem::path make_tiny_imdb(const std::filesystem::path& dir, const std::string& name = "aclImdb",
                                            int test_count = 6) {
  std::mt19937 rng(0);
  const std::vector<std::string> positive{"great", "wonderful", "excellent", "loved", "amazing", "superb"};
  const std::vector<std::string> negative{"awful", "terrible", "boring", "hated", "worst", "dull"};
  const std::vector<std::string> common{"the", "movie", "film", "was", "and", "a", "of", "it", "this"};
  for (const auto& [split, count] : {std::pair<std::string, int>{"train", 12}, {"test", test_count}}) {
    for (const std::string label : {"neg", "pos"}) {
      const auto folder = dir / name / split / label;
      std::filesystem::create_directories(folder);
      std::vector<std::string> words = label == "pos" ? positive : negative;
      words.insert(words.end(), common.begin(), common.end());
      for (int i = 0; i < count; ++i) {
        std::ofstream file(folder / (std::to_string(i) + (label == "pos" ? "_8.txt" : "_2.txt")));
        for (int w = 0; w < 30; ++w) file << words[rng() % words.size()] << ' ';
        file << ". <br /><br />";
      }
    }
  }
  return dir / name;
}

}  // namespace fp8kit::testing
