// Several tensors in one launch (quantize, bf16 cast, transpose and Linear-output batches): a 1-D grid
// in which member t owns the blocks [first[t], first[t + 1]), laid out as its own grid of tiles_x[t]
// blocks per row would be. Filled on the host with add(), passed as a __grid_constant__ kernel
// parameter, read on the device with tile().
#pragma once

#include <cstdint>
#include <string>

#include "base/error.h"

namespace fp8kit::cuda {

struct BatchTile {
  int member;     // which tensor of the batch
  int64_t x, y;   // the block's place in that tensor's grid
};

template <typename Member, int kMax>
struct LaunchBatch {
  Member m[kMax];
  int64_t tiles_x[kMax];
  int64_t first[kMax + 1];
  int count;
  bool interleaved;  // members take turns block by block (interleave())

  // Host: appends `member` with a grid of x by y blocks (none when either is 0). Start from a
  // value-initialised batch (LaunchBatch<...> b{}).
  void add(const Member& member, int64_t x, int64_t y) {
    m[count] = member;
    tiles_x[count] = x > 0 ? x : 1;
    first[count + 1] = first[count] + x * y;
    ++count;
  }
  // Host: appends a rows x cols matrix covered by tile x tile blocks.
  void add_matrix(const Member& member, int64_t rows, int64_t cols, int64_t tile) {
    add(member, (cols + tile - 1) / tile, (rows + tile - 1) / tile);
  }
  // Host: when every member has one grid, lets them take turns block by block, so that members
  // reading the same input (a SwiGLU's gate and up gradients, both from its output's) meet each tile
  // of it in L2 rather than in memory twice; otherwise the members' blocks stay in order.
  void interleave() {
    interleaved = true;
    for (int t = 1; t < count; ++t)
      interleaved = interleaved && tiles_x[t] == tiles_x[0] && first[t + 1] - first[t] == first[1] - first[0];
  }
  // Host: the grid's size, checked against one launch's limit (naming `what`).
  unsigned blocks(const char* what) const {
    if (first[count] >= (int64_t{1} << 31))
      throw Error(std::string(what) + ": too many blocks for one launch; split the tensors");
    return static_cast<unsigned>(first[count]);
  }
  // Device: where `block` falls (a batch has a few members: a linear scan). Call it on the
  // __grid_constant__ parameter itself (no copy to local memory).
  __device__ __forceinline__ BatchTile tile(int64_t block) const {
    if (interleaved) {
      const int t = static_cast<int>(block % count);
      const int64_t local = block / count;
      return {t, local % tiles_x[t], local / tiles_x[t]};
    }
    int t = 0;
    while (t + 1 < count && block >= first[t + 1]) ++t;
    const int64_t local = block - first[t];
    return {t, local % tiles_x[t], local / tiles_x[t]};
  }
};

}  // namespace fp8kit::cuda
