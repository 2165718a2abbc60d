// Small byte-level BPE models for the tests: the 256 byte tokens (id = byte value), then merges
// given as pairs of token strings, each merged token added in order.
#pragma once

#include "text/bpe_tokenizer.h"

#include <string>
#include <utility>
#include <vector>

namespace fp8kit::testing {

inline text::BpeModel byte_model(const std::vector<std::pair<std::string, std::string>>& merges,
                                 text::SplitPattern pattern = text::SplitPattern::kGpt2) {
  text::BpeModel model;
  model.pattern = pattern;
  for (int b = 0; b < 256; ++b) model.tokens.emplace_back(1, static_cast<char>(b));
  const auto id_of = [&](const std::string& token) {
    for (size_t id = 0; id < model.tokens.size(); ++id) {
      if (model.tokens[id] == token) return static_cast<int32_t>(id);
    }
    model.tokens.push_back(token);
    return static_cast<int32_t>(model.tokens.size() - 1);
  };
  for (const auto& [left, right] : merges) {
    const int32_t a = id_of(left), b = id_of(right);
    id_of(left + right);
    model.merges.emplace_back(a, b);
  }
  return model;
}

}  // namespace fp8kit::testing
