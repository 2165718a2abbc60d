// The block-scaled FP8 GEMM (block_gemm.h). A persistent grid of clusters of two blocks (one per SM)
// walks the output in 256 x 128 tiles, a cluster taking two neighbouring column tiles of the same rows
// at a time. Per block, one thread of a producer warpgroup streams 128-wide slices of k through
// kStages shared-memory stages with TMA: b's tile and a's scales of its own, and half of a's tile,
// multicast to both blocks (L2 serves a's bytes once per pair: the kernel is bound by L2 bandwidth,
// not the tensor cores, without it). Two math warpgroups, 64 rows per wave each, multiply a stage
// with four wgmma m64n128k32 per wave into an fp32 accumulator, then add it, times the rows' a scales
// and the tile's b scale, to the tile's running sums in registers (the "promotion"): each 128 of k is
// scaled once, and nothing accumulates in the tensor cores' reduced precision beyond 128 products.
// While one warpgroup promotes, the other's wgmmas keep the tensor cores busy. The epilogue goes
// through shared memory so that y is read and written in coalesced 16-byte chunks. Instruction forms
// and layouts: the PTX ISA (TMA tensor copies, mbarrier, wgmma with 128-byte swizzled K-major
// descriptors); the structure follows DeepGEMM's 1D2D kernel.
#include "ops/cuda/block_gemm.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <mutex>
#include <string>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "runtime/cuda/check.h"
#include "ops/cuda/sm90.cuh"
#include "runtime/cuda/device_info.h"

namespace fp8kit::cuda {
namespace {

using namespace sm90;

constexpr int kBlockM = 256, kBlockN = 128, kBlockK = 128;  // a tile; b's scale blocks are 128 x 128
constexpr int kWaves = kBlockM / 128;  // per k-block, each math warpgroup multiplies 64 rows per wave
constexpr int kStages = 4;
constexpr int kMathThreads = 256, kThreads = kMathThreads + 128;
constexpr int kTileGroup = 8;  // tiles walk 8 row-blocks at a time, so a's rows stay in L2
// Two blocks of a cluster take neighbouring column tiles of the same rows: each loads half of a's
// tile and multicasts it to both (L2 serves a's bytes once per pair).
constexpr int kCluster = 2;

// Shared memory, from a 1024-byte aligned base (128-byte swizzled tiles need it): a's and b's stages,
// a's scales per stage, the stages' full and empty barriers, the epilogue's staging rows, the tile's b
// scales (one per k-block).
constexpr int kABytes = kBlockM * kBlockK, kBBytes = kBlockN * kBlockK, kScaleBytes = kBlockM * 4;
constexpr int kAOffset = 0, kBOffset = kStages * kABytes, kScaleOffset = kBOffset + kStages * kBBytes;
constexpr int kBarrierOffset = kScaleOffset + kStages * kScaleBytes;
// Each math warp's staging rows for the epilogue: 8 x 64 floats, rows padded by 8 floats so that the
// fragments' float2 writes and the rows' float4 reads run without bank conflicts.
constexpr int kStagingPitch = 72, kStagingFloats = 8 * kStagingPitch;
constexpr int kStagingOffset = kBarrierOffset + 2 * kStages * 8;
constexpr int kBScaleOffset = kStagingOffset + kMathThreads / 32 * kStagingFloats * 4;
size_t shared_bytes(int k_blocks) { return 1024 + kBScaleOffset + 4 * static_cast<size_t>(k_blocks); }

// The math warpgroups' own barrier (id 1; __syncthreads is 0), without the producer.
__device__ __forceinline__ void math_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kMathThreads) : "memory"); }

// Tile t's row and column blocks: groups of kTileGroup row-blocks, each swept across all columns.
__device__ __forceinline__ void tile_of(int t, int m_blocks, int n_blocks, int& mb, int& nb) {
  const int per_group = kTileGroup * n_blocks, first = t / per_group * kTileGroup;
  const int size = min(m_blocks - first, kTileGroup), in = t % per_group;
  mb = first + in % size;
  nb = in / size;
}

struct Params {
  const float* b_scale_inv;  // [ceil(n / 128), k_blocks]
  const __nv_bfloat16* bias;  // [n] or null
  void* y;
  int m, n, k_blocks;
  bool accumulate;
};

template <Formats F, bool YBf16>
__global__ void __launch_bounds__(kThreads, 1)
    block_gemm_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                      const __grid_constant__ CUtensorMap scale_map, const Params p) {
#ifdef FP8KIT_SM90
  extern __shared__ uint8_t raw[];
  uint8_t* const base = raw + ((1024 - (shared_address(raw) & 1023)) & 1023);
  uint64_t* const full = reinterpret_cast<uint64_t*>(base + kBarrierOffset);
  uint64_t* const empty = full + kStages;
  float* const b_scales = reinterpret_cast<float*>(base + kBScaleOffset);
  const int m_blocks = (p.m + kBlockM - 1) / kBlockM, n_blocks = (p.n + kBlockN - 1) / kBlockN;
  // The cluster walks pairs of column tiles; a block whose column tile is past n computes zeros (TMA
  // fills them) and stores nothing, so that its partner gets its half of a.
  const int pairs = m_blocks * ((n_blocks + kCluster - 1) / kCluster);
  const int cluster = blockIdx.x / kCluster, clusters = gridDim.x / kCluster;
  const uint32_t rank = cluster_rank();
  const auto tile = [&](int pair, int& mb, int& nb) {
    tile_of(pair, m_blocks, (n_blocks + kCluster - 1) / kCluster, mb, nb);
    nb = nb * kCluster + static_cast<int>(rank);
  };

  if (threadIdx.x == kMathThreads) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(&full[s], 1);
      barrier_init(&empty[s], kCluster * kMathThreads / 32);  // one arrival per math warp of the cluster
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster_sync();  // the partner's barriers are ready before anything arrives on them

  int stage = 0;
  uint32_t phase = 0;
  const auto advance = [&] {
    if (++stage == kStages) stage = 0, phase ^= 1;
  };

  if (threadIdx.x >= kMathThreads) {  // the producer warpgroup: one thread issues every copy
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x != kMathThreads) return;
    constexpr int kHalf = kBlockM / kCluster;
    for (int t = cluster; t < pairs; t += clusters) {
      int mb, nb;
      tile(t, mb, nb);
      for (int kb = 0; kb < p.k_blocks; ++kb, advance()) {
        barrier_wait(&empty[stage], phase ^ 1);  // both blocks' math warps are done with the stage
        barrier_expect_bytes(&full[stage], kABytes + kBBytes + kScaleBytes);
        tma_load_multicast(base + kAOffset + stage * kABytes + rank * kHalf * kBlockK, &a_map, &full[stage], kb * kBlockK,
                           mb * kBlockM + rank * kHalf, (1u << kCluster) - 1);
        tma_load(base + kScaleOffset + stage * kScaleBytes, &scale_map, &full[stage], mb * kBlockM, kb);
        tma_load(base + kBOffset + stage * kBBytes, &b_map, &full[stage], kb * kBlockK, nb * kBlockN);
      }
    }
    // The partner arrives on this block's barriers until its last stage: this block's shared memory
    // must outlive those arrivals.
    for (int i = 0; i < kStages; ++i, advance()) barrier_wait(&empty[stage], phase ^ 1);
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int group = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  // This thread's accumulator rows within the tile (wgmma's m64 fragment: r and r + 8) and its
  // first column pair (then every 8 columns).
  const int r = group * 64 + warp * 16 + lane / 4, c = 2 * (lane % 4);
  const uint32_t a_low = descriptor_low(base + kAOffset + group * 64 * kBlockK);
  const uint32_t b_low = descriptor_low(base + kBOffset);
  float acc[64], sum[kWaves * 64];
  for (int t = cluster; t < pairs; t += clusters) {
    int mb, nb;
    tile(t, mb, nb);
    math_sync();  // both warpgroups are done with the last tile's b scales
    for (int i = threadIdx.x; i < p.k_blocks; i += kMathThreads)
      b_scales[i] = nb < n_blocks ? p.b_scale_inv[nb * p.k_blocks + i] : 0.0f;
    math_sync();
#pragma unroll
    for (int i = 0; i < kWaves * 64; ++i) sum[i] = 0.0f;
    for (int kb = 0; kb < p.k_blocks; ++kb, advance()) {
      barrier_wait(&full[stage], phase);
      // Every read of the stage before the last wave's arrival lets the producer refill it.
      const float* a_scales = reinterpret_cast<const float*>(base + kScaleOffset + stage * kScaleBytes);
      const float b_scale = b_scales[kb];
      float s[kWaves][2];
#pragma unroll
      for (int w = 0; w < kWaves; ++w) s[w][0] = a_scales[w * 128 + r] * b_scale, s[w][1] = a_scales[w * 128 + r + 8] * b_scale;
#pragma unroll
      for (int w = 0; w < kWaves; ++w) {
#pragma unroll
        for (int i = 0; i < 64; ++i) fence_operand(acc[i]);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int ks = 0; ks < kBlockK / 32; ++ks) {  // 32 bytes of k per step: 2 in the descriptor's units
          const uint32_t a_at = a_low + ((stage * kABytes + w * 128 * kBlockK) >> 4) + 2 * ks;
          const uint64_t a = (static_cast<uint64_t>(kDescriptorHigh) << 32) | a_at;
          const uint64_t b = (static_cast<uint64_t>(kDescriptorHigh) << 32) | (b_low + stage * (kBBytes >> 4) + 2 * ks);
          wgmma<F>(a, b, acc, ks);
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#pragma unroll
        for (int i = 0; i < 64; ++i) fence_operand(acc[i]);
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
        for (int i = 0; i < 64; ++i) fence_operand(acc[i]);
        // The stage's tiles and scales are read: lane i tells the cluster's block i.
        if (w == kWaves - 1 && lane < kCluster) barrier_arrive_in(&empty[stage], lane);
        float* out = sum + 64 * w;
#pragma unroll
        for (int i = 0; i < 64; i += 4) {
          out[i] += s[w][0] * acc[i];
          out[i + 1] += s[w][0] * acc[i + 1];
          out[i + 2] += s[w][1] * acc[i + 2];
          out[i + 3] += s[w][1] * acc[i + 3];
        }
      }
    }
    // y from the sums, through the warp's staging rows: 8 rows x 64 columns at a time, written as the
    // fragments lie, read back as 16-byte row chunks for coalesced loads and stores of y.
    float* const staging = reinterpret_cast<float*>(base + kStagingOffset) + threadIdx.x / 32 * kStagingFloats;
#pragma unroll
    for (int w = 0; w < kWaves; ++w) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int first_row = mb * kBlockM + w * 128 + group * 64 + warp * 16 + 8 * h;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          __syncwarp();  // the last step's chunks are read
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const float* v = sum + 64 * w + 4 * (8 * half + j) + 2 * h;
            *reinterpret_cast<float2*>(staging + lane / 4 * kStagingPitch + 8 * j + c) = make_float2(v[0], v[1]);
          }
          __syncwarp();
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int chunk = lane + 32 * i, row = first_row + chunk / 16;
            const int col = nb * kBlockN + 64 * half + 4 * (chunk % 16);
            if (row >= p.m || col >= p.n) continue;
            float4 v = *reinterpret_cast<const float4*>(staging + chunk / 16 * kStagingPitch + 4 * (chunk % 16));
            if (p.bias != nullptr) {
              const uint2 bits = *reinterpret_cast<const uint2*>(p.bias + col);
              const float2 b0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits.x));
              const float2 b1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits.y));
              v.x += b0.x, v.y += b0.y, v.z += b1.x, v.w += b1.y;
            }
            const size_t at = static_cast<size_t>(row) * p.n + col;
            if constexpr (YBf16) {
              uint2* y = reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.y) + at);
              if (p.accumulate) {
                const uint2 bits = *y;
                const float2 o0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits.x));
                const float2 o1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits.y));
                v.x += o0.x, v.y += o0.y, v.z += o1.x, v.w += o1.y;
              }
              const __nv_bfloat162 lo = __float22bfloat162_rn(make_float2(v.x, v.y));
              const __nv_bfloat162 hi = __float22bfloat162_rn(make_float2(v.z, v.w));
              *y = make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
            } else {
              float4* y = reinterpret_cast<float4*>(static_cast<float*>(p.y) + at);
              if (p.accumulate) {
                const float4 o = *y;
                v.x += o.x, v.y += o.y, v.z += o.z, v.w += o.w;
              }
              *y = v;
            }
          }
        }
      }
    }
  }
#endif
}

template <Formats F, bool YBf16>
void launch(const GemmArgs& g, cudaStream_t stream) {
  const int k_blocks = static_cast<int>((g.k + kBlockK - 1) / kBlockK);
  const size_t bytes = shared_bytes(k_blocks);
  static std::once_flag configured;
  std::call_once(configured, [] {
    FP8KIT_CUDA_CHECK(cudaFuncSetAttribute(block_gemm_kernel<F, YBf16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(device_facts().shared_optin)));
  });
  const CUtensorMap a = tensor_map(g.a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.m, g.k, kBlockM / kCluster, kBlockK,
                                   CU_TENSOR_MAP_SWIZZLE_128B);
  const CUtensorMap b = tensor_map(g.b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.n, g.k, kBlockN, kBlockK,
                                   CU_TENSOR_MAP_SWIZZLE_128B);
  const CUtensorMap scales = tensor_map(g.a_scale_inv, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, k_blocks, g.m, 1, kBlockM,
                                        CU_TENSOR_MAP_SWIZZLE_NONE);
  const Params p{g.b_scale_inv, static_cast<const __nv_bfloat16*>(g.bias), g.y, static_cast<int>(g.m),
                 static_cast<int>(g.n), k_blocks, g.accumulate};
  const int64_t pairs = ((g.m + kBlockM - 1) / kBlockM) * ((g.n + kBlockN * kCluster - 1) / (kBlockN * kCluster));
  ClusterLaunch launcher(kCluster, kThreads, bytes, stream);
  static const int resident = launcher.resident_clusters(block_gemm_kernel<F, YBf16>, shared_bytes(64));
  launcher.config.gridDim = dim3(static_cast<unsigned>(std::min<int64_t>(pairs, resident) * kCluster));  // each walks pairs
  FP8KIT_CUDA_CHECK(cudaLaunchKernelEx(&launcher.config, block_gemm_kernel<F, YBf16>, a, b, scales, p));
}

}  // namespace

bool block_gemm_runs(const GemmArgs& g) {
  const DeviceFacts& device = device_facts();
  const bool formats = (g.a_type == DType::E4M3 || g.a_type == DType::E5M2) &&
                       (g.b_type == DType::E4M3 || g.b_type == DType::E5M2) &&
                       !(g.a_type == DType::E5M2 && g.b_type == DType::E5M2);
  return device.hopper && formats && g.a_scale_mode == ScaleMode::Vec128 && g.b_scale_mode == ScaleMode::Block128 &&
         (g.y_type == DType::F32 || g.y_type == DType::Bf16) &&
         (g.epilogue == Epilogue::None || g.epilogue == Epilogue::Bias) && g.m > 0 && g.m % 4 == 0 &&
         g.n > 0 && g.n % 16 == 0 && g.k > 0 && g.k % 16 == 0 && g.m < (int64_t{1} << 31) && g.n < (int64_t{1} << 31) &&
         aligned(g.a, 16) && aligned(g.b, 16) && aligned(g.a_scale_inv, 16) && aligned(g.y, 16) &&
         aligned(g.bias, 8) &&
         shared_bytes(static_cast<int>((g.k + kBlockK - 1) / kBlockK)) <= device.shared_optin;
}

void block_gemm(const GemmArgs& g, cudaStream_t stream) {
  if (!block_gemm_runs(g))
    throw Error("block GEMM: a " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k) +
                " product this kernel does not run (block_gemm_runs)");
  const Formats f = g.a_type == DType::E5M2 ? Formats::E5M2xE4M3
                    : g.b_type == DType::E5M2 ? Formats::E4M3xE5M2
                                              : Formats::E4M3xE4M3;
  const bool bf16 = g.y_type == DType::Bf16;
  switch (f) {
    case Formats::E4M3xE4M3: return bf16 ? launch<Formats::E4M3xE4M3, true>(g, stream) : launch<Formats::E4M3xE4M3, false>(g, stream);
    case Formats::E5M2xE4M3: return bf16 ? launch<Formats::E5M2xE4M3, true>(g, stream) : launch<Formats::E5M2xE4M3, false>(g, stream);
    case Formats::E4M3xE5M2: return bf16 ? launch<Formats::E4M3xE5M2, true>(g, stream) : launch<Formats::E4M3xE5M2, false>(g, stream);
  }
}

}  // namespace fp8kit::cuda
