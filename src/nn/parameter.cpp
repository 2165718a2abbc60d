// Shape helpers for parameters and state views, and the domains of state values.
#include "nn/parameter.h"

#include <cmath>

namespace fp8kit::nn {

int64_t numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string_view requirement(Domain domain) {
  switch (domain) {
    case Domain::Finite: return "finite";
    case Domain::NonNegative: return "finite and non-negative";
    case Domain::Positive: return "finite and positive";
    case Domain::Count: return "a whole number from 0 to 16777216";
  }
  return "valid";
}

bool in_domain(float value, Domain domain) {
  if (!std::isfinite(value)) return false;
  switch (domain) {
    case Domain::Finite: return true;
    case Domain::NonNegative: return value >= 0.0f;
    case Domain::Positive: return value > 0.0f;
    case Domain::Count: return value >= 0.0f && value <= 16777216.0f && value == std::floor(value);
  }
  return false;
}

}  // namespace fp8kit::nn
