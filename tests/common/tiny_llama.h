// What the LM trainer's tests train: a tiny Llama (vocabulary 23, hidden 32) and token streams it can
// learn in a few steps.
#pragma once

#include <cstdint>
#include <vector>

#include "models/llama_config.h"

namespace fp8kit::testing {

inline models::LlamaConfig tiny_llama() {
  models::LlamaConfig c = models::llama_preset("tiny", 23);
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.head_dim = 8;
  c.max_position_embeddings = 32;
  return c;
}

// n tokens (< 23) whose next token is mostly the last one plus 1, else random (an LCG from `seed`).
inline std::vector<int32_t> learnable_stream(size_t n, uint32_t seed) {
  std::vector<int32_t> s = {1, 2};
  uint32_t x = seed;
  while (s.size() < n) {
    x = x * 1664525u + 1013904223u;
    const int32_t next = (x >> 28) == 0 ? static_cast<int32_t>((x >> 8) % 23) : (s.back() + 1) % 23;
    s.push_back(next);
  }
  return s;
}

}  // namespace fp8kit::testing
