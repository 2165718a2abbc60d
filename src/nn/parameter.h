// Trainable parameters (float32 master value + gradient) and named float32 views of other state
// (optimizer moments, FP8 scales and amax histories) for checkpoints and inspection.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fp8kit::nn {

// Names are Keras-like variable paths ("transformer_decoder/self_attention/query/kernel"); shapes
// are Keras's (a query kernel is {32, 2, 16}); value and grad are row-major, numel(shape) long.
struct Parameter {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> value;
  std::vector<float> grad;

  int64_t numel() const { return static_cast<int64_t>(value.size()); }
};

// The values a state entry can hold by its meaning; checkpoints holding any other are refused.
enum class Domain {
  Finite,       // weights, Adam's first moment
  NonNegative,  // finite and >= 0: Adam's second moment, amax histories
  Positive,     // finite and > 0: FP8 scales
  Count,        // a whole number in [0, 2^24] (exact in float32): Adam's iterations
};

// What `domain` requires, for messages: "finite", "finite and non-negative", ...
std::string_view requirement(Domain domain);
// Whether `value` lies in `domain`.
bool in_domain(float value, Domain domain);

// A named, non-owning float32 view; shape {} is a scalar. Valid while its owner lives and is not
// reconfigured (e.g. SeedClassifier::set_precision invalidates FP8 state views).
struct StateEntry {
  std::string name;
  std::vector<int64_t> shape;
  std::span<float> data;
  Domain domain = Domain::Finite;
};

// Product of the dims (1 for a scalar).
int64_t numel(std::span<const int64_t> shape);

}  // namespace fp8kit::nn
