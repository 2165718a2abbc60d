// Hopper (sm_90a) building blocks of fp8kit's own FP8 GEMMs (block_gemm.cu, resident_gemm.cu): TMA
// tensor copies, mbarriers, cluster helpers and wgmma with 128-byte swizzled K-major shared-memory
// descriptors (the PTX ISA's forms), and the host's tensor maps. Included by .cu files only.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "base/error.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_info.h"

namespace fp8kit::cuda::sm90 {

// Operand formats, compile-time for wgmma: a x b.
enum class Formats { E4M3xE4M3, E5M2xE4M3, E4M3xE5M2 };

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP8KIT_SM90 1
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

// Keeps the compiler from moving accesses of an accumulator register across wgmma's fences and waits.
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

// cuTensorMapEncodeTiled from the driver, through the runtime (no link against libcuda).
inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    FP8KIT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || fn == nullptr)
      throw Error("FP8 GEMM: the CUDA driver has no cuTensorMapEncodeTiled (update the driver to CUDA 12 or later)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A row-major [rows, cols] matrix read in boxes of [box_rows, box_cols] (cols innermost).
inline CUtensorMap tensor_map(const void* data, CUtensorMapDataType type, size_t element_bytes, int64_t rows, int64_t cols,
                       uint32_t box_rows, uint32_t box_cols, CUtensorMapSwizzle swizzle) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * element_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows}, element_strides[2] = {1, 1};
  const CUresult status =
      encode_tiled()(&map, type, 2, const_cast<void*>(data), dims, strides, box, element_strides,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS)
    throw Error("FP8 GEMM: cuTensorMapEncodeTiled failed (" + std::to_string(status) + ") for a [" +
                std::to_string(rows) + ", " + std::to_string(cols) + "] operand");
  return map;
}

// The current device's facts the kernels depend on, read once (their `runs` checks ask on every GEMM).
struct DeviceFacts {
  bool hopper = false;  // compute capability 9.0, what sm_90a code runs on
  size_t shared_optin = 0;  // shared memory a block may opt in to
};
inline const DeviceFacts& device_facts() {
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

// A launch of `threads`-thread blocks in clusters of `cluster` blocks along x, with `shared` bytes of
// dynamic shared memory, on `stream`; the grid is the caller's.
struct ClusterLaunch {
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute attribute{};
  ClusterLaunch(int cluster, int threads, size_t shared, cudaStream_t stream) {
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = static_cast<unsigned>(cluster), attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.dynamicSmemBytes = shared;
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;  // config points at attribute
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
  // How many clusters of `kernel` fit at once with `shared` bytes a block (GPCs may leave an SM without
  // a partner); at least 1.
  template <typename Kernel>
  int resident_clusters(Kernel kernel, size_t shared) const {
    cudaLaunchConfig_t probe = config;
    const int cluster = static_cast<int>(attribute.val.clusterDim.x);
    probe.gridDim = dim3(static_cast<unsigned>(current_device_attribute(cudaDevAttrMultiProcessorCount) / cluster * cluster));
    probe.dynamicSmemBytes = shared;
    int clusters = 0;
    FP8KIT_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &probe));
    return clusters > 1 ? clusters : 1;
  }
};

}  // namespace fp8kit::cuda::sm90
