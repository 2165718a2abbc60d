// Weight initialisers: the seed's (Keras's rules: Glorot-uniform with Keras's fan computation,
// uniform(-0.05, 0.05) for embeddings) and Hugging Face's normal(0, 0.02). Draws come from
// std::mt19937_64 through fixed mappings (not std::*_distribution, whose outputs differ between
// standard libraries).
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace fp8kit::nn {

// Keras compute_fans: rank 1: (n, n); rank 2: (shape[0], shape[1]); higher: receptive field =
// product of shape[:-2], fan_in = shape[-2] * rf, fan_out = shape[-1] * rf.
struct Fans {
  double fan_in, fan_out;
};
Fans keras_fans(std::span<const int64_t> shape);

// sqrt(6 / (fan_in + fan_out)).
float glorot_uniform_limit(std::span<const int64_t> shape);

// Fills with lo + (hi - lo) u, u = (next() >> 40) / 2^24 in [0, 1).
void fill_uniform(std::span<float> values, float lo, float hi, std::mt19937_64& rng);

// Fills with normal(0, stddev) draws (Hugging Face's Linear and Embedding initialisation), each from
// two 53-bit uniforms by Box-Muller in double: the same values with every standard library.
void fill_normal(std::span<float> values, float stddev, std::mt19937_64& rng);

}  // namespace fp8kit::nn
