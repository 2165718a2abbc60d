// Shape helpers for parameters and state views.
#include "nn/parameter.h"

namespace fp8kit::nn {

int64_t numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace fp8kit::nn
