// Embedding kernels. Forward: one thread per output element. Backward, deterministic and in the CPU
// layer's order: the token ids are sorted stably (CUB radix sort, so equal ids keep their positions'
// order), each distinct id's rows of dout are added one after the other, and each position's rows over
// the batch likewise. Runs of one id are mostly short (a few rows): a warp per sorted position sums the
// run starting there, lane = column, its loads all in flight at once. Runs longer than a warp (padding,
// frequent words: hundreds of rows) would keep a warp waiting on load after load; the sort lists
// them, and a few blocks sum them with ops/cuda/ordered_sum.cuh (8 warps fetching, one adding).
// gather_rows (inference: token embeddings, last hidden rows): a block per row, 16-byte copies.
#include "ops/cuda/embedding.h"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <string>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/dropout.cuh"
#include "ops/cuda/ordered_sum.cuh"
#include "ops/cuda/round.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void forward_kernel(EmbeddingShape s, const int32_t* tokens, const float* token, const float* position,
                               bool bf16, DropoutArgs dropout, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= s.batch * s.seq * s.dim) return;
  const int64_t bt = i / s.dim, d = i % s.dim;
  const float t = token[static_cast<int64_t>(tokens[bt]) * s.dim + d];
  float sum = maybe_bf16(t, bf16);
  if (position != nullptr) {
    const float p = position[(bt % s.seq) * s.dim + d];
    sum = bf16 ? round_bf16(round_bf16(t) + round_bf16(p)) : t + p;
  }
  out[i] = dropout.forward(sum, static_cast<uint32_t>(i), bf16);
}

constexpr int kShortRun = 32;       // rows: a warp's run (one sorted position per lane)
constexpr unsigned kLongBlocks = 64;  // blocks that take the long runs (there are a few dozen at most)
constexpr int kShortWarps = kOrderedSumWarps;  // warps (sorted positions) per block of the short runs

// run_end[id] = one past the last sorted position holding id (written for the ids present only); the
// starts of runs longer than kShortRun appended to long_runs (in any order: each is summed alone).
__global__ void run_end_kernel(int32_t n, const uint32_t* sorted, int32_t* run_end, int32_t* long_runs,
                               int32_t* long_count) {
  const int32_t i = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const uint32_t id = sorted[i];
  if (i == n - 1 || sorted[i + 1] != id) run_end[id] = i + 1;
  if ((i == 0 || sorted[i - 1] != id) && i + kShortRun < n && sorted[i + kShortRun] == id)
    long_runs[atomicAdd(long_count, 1)] = i;
}

// The gradient sums in one launch; blockIdx.y: 32 columns. token_grad[id, col] = sum of
// dout[order[j], col] over id's run of sorted positions j, j increasing (= batch order), from 0.
// Blocks [0, kLongBlocks) take the listed long runs, k, k + kLongBlocks, ...; the next short_blocks
// blocks a sorted position per warp, summing the run that starts there unless it is long; the blocks
// after them (none without a position table) position_grad[t, d] = sum over b = 0, 1, ... of
// dout[b, t, d], a thread per element.
__global__ void __launch_bounds__(kOrderedSumThreads)
    sums_kernel(EmbeddingShape s, unsigned short_blocks, const uint32_t* sorted, const int32_t* order,
                const int32_t* run_end, const int32_t* long_runs, const int32_t* long_count, const float* dout,
                float* token_grad, float* position_grad) {
  const int32_t n = static_cast<int32_t>(s.batch * s.seq);
  const int64_t dim = s.dim;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * 32 + lane;
  const int64_t column = col < dim ? col : dim - 1;  // for the loads of lanes past the last column
  if (blockIdx.x < kLongBlocks) {  // the same for the whole block
    for (int32_t k = blockIdx.x; k < *long_count; k += kLongBlocks) {
      const int32_t i = long_runs[k];
      const uint32_t id = sorted[i];
      float sum[1];
      ordered_sum<1>(
          i, run_end[id], col < dim, [&](int64_t j, float(&v)[1]) { v[0] = dout[order[j] * dim + column]; },
          [](float(&acc)[1], const float(&e)[1]) { acc[0] += e[0]; }, sum);
      if (warp == 0 && col < dim) token_grad[id * dim + col] = sum[0];
    }
    return;
  }
  if (blockIdx.x < kLongBlocks + short_blocks) {
    const int64_t i = static_cast<int64_t>(blockIdx.x - kLongBlocks) * kShortWarps + warp;
    if (i >= n) return;
    const uint32_t id = sorted[i];
    if ((i > 0 && sorted[i - 1] == id) || (i + kShortRun < n && sorted[i + kShortRun] == id)) return;
    const int32_t rows = run_end[id] - static_cast<int32_t>(i);  // 1 .. kShortRun
    const int32_t mine = lane < rows ? order[i + lane] : 0;     // lane k: the position of the run's row k
    float sum = 0.0f;
#pragma unroll 8
    for (int k = 0; k < rows; ++k) sum += dout[static_cast<int64_t>(__shfl_sync(0xFFFFFFFFu, mine, k)) * dim + column];
    if (col < dim) token_grad[id * dim + col] = sum;
    return;
  }
  const int64_t i = static_cast<int64_t>(blockIdx.x - kLongBlocks - short_blocks) * blockDim.x + threadIdx.x;
  if (blockIdx.y != 0 || i >= s.seq * s.dim) return;
  float sum = 0.0f;
#pragma unroll 8
  for (int64_t b = 0; b < s.batch; ++b) sum += dout[b * s.seq * s.dim + i];
  position_grad[i] = sum;
}

// The sort's first step: token_grad zeroed (rows of absent ids stay 0), positions[i] = i (the values
// the sort permutes), thread i doing each that has an element i, and the list of long runs emptied.
__global__ void prepare_kernel(EmbeddingShape s, float* token_grad, int32_t* positions, int32_t* long_count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < s.vocabulary * s.dim) token_grad[i] = 0.0f;
  if (i < s.batch * s.seq) positions[i] = static_cast<int32_t>(i);
  if (i == 0) *long_count = 0;
}

int key_bits(int64_t vocabulary) {
  int bits = 1;
  while ((int64_t{1} << bits) < vocabulary) ++bits;
  return bits;
}

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The backward's scratch, carved from one workspace: sorted ids, positions (iota), their sorted order
// and the long runs' starts [n], run ends [vocabulary], the long runs' count, then CUB's temporary
// storage.
struct Scratch {
  uint32_t* sorted = nullptr;
  int32_t* positions = nullptr;
  int32_t* order = nullptr;
  int32_t* long_runs = nullptr;
  int32_t* run_end = nullptr;
  int32_t* long_count = nullptr;
  void* sort_storage = nullptr;
  size_t sort_bytes = 0;
  size_t total = 0;
};

Scratch scratch_for(const EmbeddingShape& s, void* base) {
  const int64_t n = s.batch * s.seq;
  if (s.batch < 0 || s.seq < 0 || s.dim < 0 || s.vocabulary < 1 || n >= (int64_t{1} << 31) ||
      s.vocabulary >= (int64_t{1} << 31) || (s.dim + 31) / 32 > 65535)
    throw Error("embedding_backward: unsupported shape: batch " + std::to_string(s.batch) + ", seq " +
                std::to_string(s.seq) + ", dim " + std::to_string(s.dim) + ", vocabulary " +
                std::to_string(s.vocabulary));
  Scratch r;
  FP8KIT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, r.sort_bytes, static_cast<const uint32_t*>(nullptr),
                                                    static_cast<uint32_t*>(nullptr),
                                                    static_cast<const int32_t*>(nullptr),
                                                    static_cast<int32_t*>(nullptr), static_cast<int>(n), 0,
                                                    key_bits(s.vocabulary)));
  const size_t ids = align256(static_cast<size_t>(n) * 4), runs = align256(static_cast<size_t>(s.vocabulary) * 4);
  r.total = 4 * ids + runs + 256 + r.sort_bytes;
  char* p = static_cast<char*>(base);
  if (p != nullptr) {
    r.sorted = reinterpret_cast<uint32_t*>(p);
    r.positions = reinterpret_cast<int32_t*>(p + ids);
    r.order = reinterpret_cast<int32_t*>(p + 2 * ids);
    r.long_runs = reinterpret_cast<int32_t*>(p + 3 * ids);
    r.run_end = reinterpret_cast<int32_t*>(p + 4 * ids);
    r.long_count = reinterpret_cast<int32_t*>(p + 4 * ids + runs);
    r.sort_storage = p + 4 * ids + runs + 256;
  }
  return r;
}

}  // namespace

void embedding_forward(const EmbeddingShape& shape, const int32_t* tokens, const float* token, const float* position,
                       bool bf16, const DropoutSite& dropout, float* out, cudaStream_t stream) {
  const int64_t n = shape.batch * shape.seq * shape.dim;
  if (n == 0) return;
  forward_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      shape, tokens, token, position, bf16, dropout_args(dropout, bf16, "embedding_forward", n), out);
  check_launch("embedding_forward");
}

size_t embedding_backward_workspace(const EmbeddingShape& shape) { return scratch_for(shape, nullptr).total; }

namespace {

// The workspace carved for `shape`, after checking it (naming `what`).
Scratch checked_scratch(const EmbeddingShape& shape, void* workspace, size_t workspace_bytes, const char* what) {
  const Scratch w = scratch_for(shape, workspace);
  if (workspace == nullptr || workspace_bytes < w.total)
    throw Error(std::string(what) + ": the workspace has " + std::to_string(workspace_bytes) + " bytes, " +
                std::to_string(w.total) + " needed (embedding_backward_workspace)");
  if (!aligned(workspace, 256))
    throw Error(std::string(what) + ": the workspace must be 256-byte aligned");
  return w;
}

}  // namespace

void embedding_backward_sort(const EmbeddingShape& shape, const int32_t* tokens, float* token_grad, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream) {
  const Scratch w = checked_scratch(shape, workspace, workspace_bytes, "embedding_backward");
  const int32_t n = static_cast<int32_t>(shape.batch * shape.seq);
  if (n == 0 || shape.seq * shape.dim == 0) {
    FP8KIT_CUDA_CHECK(cudaMemsetAsync(token_grad, 0, shape.vocabulary * shape.dim * sizeof(float), stream));
    return;
  }
  const int64_t threads = std::max(shape.vocabulary * shape.dim, int64_t{n});
  if (threads >= (int64_t{1} << 31) * kThreads)
    throw Error("embedding_backward: " + std::to_string(threads) + " elements are too many for one launch");
  prepare_kernel<<<blocks_for(threads, kThreads), kThreads, 0, stream>>>(shape, token_grad, w.positions,
                                                                         w.long_count);
  check_launch("embedding_backward");
  size_t sort_bytes = w.sort_bytes;
  FP8KIT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(w.sort_storage, sort_bytes,
                                                    reinterpret_cast<const uint32_t*>(tokens), w.sorted, w.positions,
                                                    w.order, n, 0, key_bits(shape.vocabulary), stream));
  run_end_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(n, w.sorted, w.run_end, w.long_runs,
                                                                   w.long_count);
  check_launch("embedding_backward");
}

void embedding_backward_sums(const EmbeddingShape& shape, const float* dout, float* token_grad, float* position_grad,
                             void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const Scratch w = checked_scratch(shape, workspace, workspace_bytes, "embedding_backward");
  const int32_t n = static_cast<int32_t>(shape.batch * shape.seq);
  if (shape.seq * shape.dim == 0) return;
  if (n == 0) {
    if (position_grad != nullptr)
      FP8KIT_CUDA_CHECK(cudaMemsetAsync(position_grad, 0, shape.seq * shape.dim * sizeof(float), stream));
    return;
  }
  const int64_t short_blocks = (n + kShortWarps - 1) / kShortWarps;
  const int64_t position_blocks =
      position_grad != nullptr ? (shape.seq * shape.dim + kOrderedSumThreads - 1) / kOrderedSumThreads : 0;
  if (kLongBlocks + short_blocks + position_blocks >= (int64_t{1} << 31))
    throw Error("embedding_backward: batch x seq " + std::to_string(n) + " and seq x dim " +
                std::to_string(shape.seq * shape.dim) + " are too large for one launch");
  const dim3 grid(kLongBlocks + static_cast<unsigned>(short_blocks + position_blocks), blocks_for(shape.dim, 32));
  sums_kernel<<<grid, kOrderedSumThreads, 0, stream>>>(shape, static_cast<unsigned>(short_blocks), w.sorted, w.order,
                                                       w.run_end, w.long_runs, w.long_count, dout, token_grad,
                                                       position_grad);
  check_launch("embedding_backward");
}

void embedding_backward(const EmbeddingShape& shape, const int32_t* tokens, const float* dout, float* token_grad,
                        float* position_grad, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  embedding_backward_sort(shape, tokens, token_grad, workspace, workspace_bytes, stream);
  embedding_backward_sums(shape, dout, token_grad, position_grad, workspace, workspace_bytes, stream);
}

namespace {

constexpr int kGatherThreads = 256;

// Row blockIdx.x of out = table row ids[blockIdx.x], in units of Unit (zeros for an id outside the table).
template <typename Unit>
__global__ void gather_rows_kernel(int64_t n, int64_t units, const Unit* table, const int32_t* ids, Unit* out) {
  const int64_t r = blockIdx.x, id = ids[r];
  Unit* dst = out + r * units;
  const bool inside = id >= 0 && id < n;
  const Unit* src = table + (inside ? id : 0) * units;
  for (int64_t u = threadIdx.x; u < units; u += blockDim.x) dst[u] = inside ? src[u] : Unit{};
}

template <typename Unit>
void launch_gather(int64_t rows, int64_t n, int64_t row_bytes, const std::byte* table, const int32_t* ids,
                   std::byte* out, cudaStream_t stream) {
  const int64_t units = row_bytes / static_cast<int64_t>(sizeof(Unit));
  const int threads =
      static_cast<int>(std::min<int64_t>(kGatherThreads, std::max<int64_t>(32, (units + 31) / 32 * 32)));
  gather_rows_kernel<Unit><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
      n, units, reinterpret_cast<const Unit*>(table), ids, reinterpret_cast<Unit*>(out));
}

}  // namespace

void gather_rows(int64_t rows, int64_t n, int64_t row_bytes, const std::byte* table, const int32_t* ids,
                 std::byte* out, cudaStream_t stream) {
  if (rows < 0 || rows >= (int64_t{1} << 31) || row_bytes < 0 || row_bytes % 2 != 0)
    throw Error("gather_rows: unsupported shape (" + std::to_string(rows) + " rows of " + std::to_string(row_bytes) +
                " bytes)");
  if (rows == 0 || row_bytes == 0) return;
  if (row_bytes % 16 == 0 && aligned(table, 16) && aligned(out, 16)) {
    launch_gather<uint4>(rows, n, row_bytes, table, ids, out, stream);
  } else {
    launch_gather<uint16_t>(rows, n, row_bytes, table, ids, out, stream);
  }
  check_launch("gather_rows");
}

}  // namespace fp8kit::cuda
