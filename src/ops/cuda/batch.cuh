// Several tensors in one launch: a 1-D grid in which member t owns the blocks [first[t], first[t + 1])
// (quantize, bf16 cast, transpose and Linear-output batches).
#pragma once

#include <cstdint>

namespace fp8kit::cuda {

struct BatchPosition {
  int member;     // which tensor of the batch
  int64_t local;  // the block's index within that tensor's blocks
};

// Where `block` falls in a batch of `count` members (a batch has a few: a linear scan). `first` must
// point into a __grid_constant__ kernel parameter (no copy to local memory).
__device__ __forceinline__ BatchPosition batch_position(const int64_t* first, int count, int64_t block) {
  int t = 0;
  while (t + 1 < count && block >= first[t + 1]) ++t;
  return {t, block - first[t]};
}

}  // namespace fp8kit::cuda
