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

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <mutex>
#include <string>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_info.h"

namespace fp8kit::cuda {
namespace {

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

// Operand formats, compile-time for wgmma: a x b.
enum class Formats { E4M3xE4M3, E5M2xE4M3, E4M3xE5M2 };

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP8KIT_BLOCK_GEMM_SM90 1
#endif

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void barrier_init(uint64_t* b, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(b)), "r"(count));
}
__device__ __forceinline__ void barrier_expect_bytes(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(b)), "r"(bytes) : "memory");
}
// Arrives on the barrier at b's offset in the shared memory of the cluster's block `rank`.
__device__ __forceinline__ void barrier_arrive_in(uint64_t* b, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}" ::"r"(shared_address(b)),
      "r"(rank)
      : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void barrier_wait(uint64_t* b, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "retry:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra retry;\n"
      "}" ::"r"(shared_address(b)),
      "r"(parity)
      : "memory");
}
// The math warpgroups' own barrier (id 1; __syncthreads is 0), without the producer.
__device__ __forceinline__ void math_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kMathThreads) : "memory"); }

// A 2D tile [rows, cols] from the tensor map's coordinates (col, row) into shared memory, counted on b.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, uint64_t* b, int col, int row) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          shared_address(dst)),
      "l"(map), "r"(shared_address(b)), "r"(col), "r"(row)
      : "memory");
}
// The same into dst and counted on b at their offsets in every block of the cluster in `blocks`.
__device__ __forceinline__ void tma_load_multicast(void* dst, const CUtensorMap* map, uint64_t* b, int col, int row,
                                                   uint16_t blocks) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(shared_address(dst)),
      "l"(map), "r"(shared_address(b)), "r"(col), "r"(row), "h"(blocks)
      : "memory");
}

// A wgmma shared-memory descriptor's low word for a K-major tile of 128-byte rows, 128-byte swizzled:
// start address >> 4, leading byte offset 1 (unused by swizzled K-major layouts). The high word: stride
// 1024 bytes between groups of 8 rows (>> 4), swizzle mode 1 (128 bytes) in bits 62-63.
__device__ __forceinline__ uint32_t descriptor_low(const void* tile) { return (shared_address(tile) >> 4) | (1u << 16); }
constexpr uint32_t kDescriptorHigh = 64u | (1u << 30);

__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

#define FP8KIT_WGMMA_64(TYPES)                                                                                         \
  asm volatile(                                                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                                     \
      "wgmma.mma_async.sync.aligned.m64n128k32.f32" TYPES                                                              \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "    \
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, " \
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "               \
      "%64, %65, p, 1, 1;\n}"                                                                                          \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),   \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),        \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),       \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),       \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),       \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),       \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),       \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                     \
      : "l"(a), "l"(b), "r"(accumulate))

// d[64] (+)= a . b^T for one m64 x n128 x k32 step; accumulate 0 overwrites d.
template <Formats F>
__device__ __forceinline__ void wgmma(uint64_t a, uint64_t b, float* d, int accumulate) {
  if constexpr (F == Formats::E4M3xE4M3) {
    FP8KIT_WGMMA_64(".e4m3.e4m3");
  } else if constexpr (F == Formats::E5M2xE4M3) {
    FP8KIT_WGMMA_64(".e5m2.e4m3");
  } else {
    FP8KIT_WGMMA_64(".e4m3.e5m2");
  }
}
#undef FP8KIT_WGMMA_64

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
#ifdef FP8KIT_BLOCK_GEMM_SM90
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

// cuTensorMapEncodeTiled from the driver, through the runtime (no link against libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    FP8KIT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || fn == nullptr)
      throw Error("block GEMM: the CUDA driver has no cuTensorMapEncodeTiled (update the driver to CUDA 12 or later)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A row-major [rows, cols] matrix read in boxes of [box_rows, box_cols] (cols innermost).
CUtensorMap tensor_map(const void* data, CUtensorMapDataType type, size_t element_bytes, int64_t rows, int64_t cols,
                       uint32_t box_rows, uint32_t box_cols, CUtensorMapSwizzle swizzle) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * element_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows}, element_strides[2] = {1, 1};
  const CUresult status =
      encode_tiled()(&map, type, 2, const_cast<void*>(data), dims, strides, box, element_strides,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS)
    throw Error("block GEMM: cuTensorMapEncodeTiled failed (" + std::to_string(status) + ") for a [" +
                std::to_string(rows) + ", " + std::to_string(cols) + "] operand");
  return map;
}

// The current device's facts the kernel depends on, read once (block_gemm_runs asks on every GEMM).
struct DeviceFacts {
  bool hopper = false;  // compute capability 9.0, what sm_90a code runs on
  size_t shared_optin = 0;  // shared memory a block may opt in to
};
const DeviceFacts& device_facts() {
  static const DeviceFacts facts = [] {
    DeviceFacts f;
    int device = 0, major = 0, minor = 0, shared = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return f;  // no GPU: the kernel runs nothing
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    f.hopper = major == 9 && minor == 0;
    f.shared_optin = static_cast<size_t>(shared);
    return f;
  }();
  return facts;
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
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = kCluster, attribute.val.clusterDim.y = 1, attribute.val.clusterDim.z = 1;
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  // As many clusters as fit at once (GPCs may leave an SM without a partner), each walking pairs.
  static const int resident = [&] {
    cudaLaunchConfig_t probe = config;
    probe.gridDim = dim3(current_device_attribute(cudaDevAttrMultiProcessorCount) / kCluster * kCluster);
    probe.dynamicSmemBytes = shared_bytes(64);
    int clusters = 0;
    FP8KIT_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, block_gemm_kernel<F, YBf16>, &probe));
    return std::max(clusters, 1);
  }();
  config.gridDim = dim3(static_cast<unsigned>(std::min<int64_t>(pairs, resident) * kCluster));
  FP8KIT_CUDA_CHECK(cudaLaunchKernelEx(&config, block_gemm_kernel<F, YBf16>, a, b, scales, p));
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
