// GEMMs on the GPU through cuBLASLt: float32, bf16 and FP8 (Hopper: E4M3 x E4M3 for fprop, E5M2 x
// E4M3 for dgrad and wgrad), with bias / GELU fused in the epilogue. One GemmContext owns the
// cuBLASLt handle, its one 32 MiB workspace and the cache of algorithm choices (optionally autotuned).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "runtime/cuda/device_buffer.h"
#include "tensor/tensor.h"

namespace fp8kit::cuda {

enum class Epilogue : uint8_t { None, Bias, Gelu, GeluBias };  // GELU: cuBLASLt's tanh approximation
inline bool has_bias(Epilogue e) { return e == Epilogue::Bias || e == Epilogue::GeluBias; }
inline bool has_gelu(Epilogue e) { return e == Epilogue::Gelu || e == Epilogue::GeluBias; }

// How an FP8 operand's scale_inv pointer is read (cuBLASLt's scale modes), for an operand [rows, k]:
// Scalar: one float. OuterVec: [rows], one per row (per channel / token). Vec128: one per 1 x 128
// group along k, laid out [ceil(k / 128), rows] (each group column's rows contiguous). Block128: one
// per 128 x 128 block, [ceil(rows / 128), ceil(k / 128)] row-major (cuBLASLt wants its rows padded to
// 4 floats: gemm() pads a copy when ceil(k / 128) is not a multiple of 4). Hopper runs Vec128 x Vec128
// and Vec128 (a) x Block128 (b) (DeepSeek-V3's recipe), with the split accumulator only; a shape
// cuBLASLt refuses runs as one unscaled GEMM per 128 of k, each added to an f32 accumulator times its
// scales (the CPU reference's order of operations; slow, for odd shapes only).
enum class ScaleMode : uint8_t { Scalar, OuterVec, Vec128, Block128 };

// y[m, n] = a[m, k] . b[n, k]^T, every matrix row-major and contiguous, all pointers on the device.
// Both operands are K-major ("TN"), the only layout Hopper's FP8 GEMMs accept, so for a Linear
// (y = x W^T, x [M, K], W [N, K]) the three GEMMs read the transposed copies quantize_fp8 writes:
//   fprop  y[M, N]  = x . W^T          a = x,         b = W
//   dgrad  dx[M, K] = dy . W           a = dy,        b = W^T   (W's q_t)
//   wgrad  dW[N, K] = dy^T . x         a = dy^T (q_t), b = x^T  (x's q_t)
// Types: f32 x f32 -> f32; bf16 x bf16 -> bf16 or f32; FP8 x FP8 (not E5M2 x E5M2) -> bf16, f32, or
// (per-tensor scales) E4M3 / E5M2 codes of the result times y_scale: the next GEMM's operand, written
// by the epilogue instead of by a quantization pass over a bf16 y.
// FP8 shapes that break cuBLASLt's 16-byte rules (k or n not a multiple of 16, pointers not 16-byte
// aligned) are padded with zeros to multiples of 16 in a temporary copy: same result, extra copies.
// With 1x128 / 128x128 scales, k is padded to a multiple of 128 likewise.
struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  DType a_type = DType::Bf16;
  const void* b = nullptr;
  DType b_type = DType::Bf16;
  void* y = nullptr;
  DType y_type = DType::Bf16;
  // FP8 only: one float each on the device, the operands' scale_inv (null = 1):
  // y = (a_scale_inv * b_scale_inv) * decode(a) . decode(b)^T. cuBLASLt refuses scale pointers that
  // are not 16-byte aligned (NOT_SUPPORTED); such a scale is first copied to an aligned slot (a
  // 4-byte copy on the stream), so pass aligned ones where speed matters.
  const float* a_scale_inv = nullptr;
  const float* b_scale_inv = nullptr;
  // The layouts of a_scale_inv and b_scale_inv (above). OuterVec x OuterVec runs on cuBLASLt where it
  // has an algorithm, otherwise as an unscaled GEMM into f32 and a kernel that scales it (the same
  // product, one more pass over y). Vector scales must be 16-byte aligned.
  ScaleMode a_scale_mode = ScaleMode::Scalar;
  ScaleMode b_scale_mode = ScaleMode::Scalar;
  // FP8 y only (one float on the device): y = fp8(y_scale * result), saturating at the format's max
  // (ops::quantize's codes of the result at that scale); no accumulation.
  const float* y_scale = nullptr;
  // A bf16 a with an E4M3 b (one float on the device): a is quantized per tensor at this static scale,
  // exactly as ops::quantize (codes = e4m3(a * a_scale), a_scale_inv = 1 / a_scale, which stays null
  // here), inside the GEMM where resident_gemm.h runs it (its blocks quantize their rows of a as they
  // load them), otherwise by a quantization into a temporary copy first.
  const float* a_scale = nullptr;
  Epilogue epilogue = Epilogue::None;
  const void* bias = nullptr;  // [n], added before GELU: bf16 for FP8 GEMMs (cuBLASLt's rule), else y_type
  // FP8 only. true: Hopper's fast accumulation (fprop, as TE); false: the split accumulator, which
  // promotes partial sums to fp32 regularly (dgrad, wgrad).
  bool fast_accumulation = false;
  bool accumulate = false;  // y += a . b^T (+ epilogue) instead of y =
  // b is not written by the kernel queued just before (ops::MatmulOptions::constant_b): gemv reads it
  // before that kernel has finished.
  bool constant_b = false;
};

// The bias type a GEMM with these types takes.
DType bias_type(DType a_type, DType y_type);

// cuBLASLt has no algorithm for a GEMM: its heuristic finds none, or it refuses the launch. Nothing
// was computed, so a caller may run the product another way; every other error is a real failure.
struct NoAlgorithm : Error {
  using Error::Error;
};

struct GemmOptions {
  // false: each plan key (shapes, types, epilogue, alignments) runs cuBLASLt's first heuristic choice.
  // true: the first GEMM of a plan key also times up to `candidates` of the heuristic's algorithms on
  // its own operands (a warm-up run each, then 7 rounds of one run each in turn, CUDA events on the
  // stream; medians) and keeps the fastest, unless the first choice is within 3% of it. Costs about
  // 8 x candidates GEMMs once per key (y is saved and restored when accumulating); a call made while
  // its stream is being captured into a graph skips the timing and runs the first choice, and the
  // next uncaptured call tunes. The chosen algorithm may differ between runs, and with it the
  // result's last bits.
  bool autotune = false;
  int candidates = 8;
  // Vec128 x Block128 products run on fp8kit's own kernel (block_gemm.h) where it runs them; false
  // (or the environment's FP8KIT_BLOCK_GEMM=cublaslt): on cuBLASLt's scale modes (for comparisons).
  bool block_kernel = true;
  // Short-k FP8 products with fast accumulation, a GELU epilogue or a_scale, and at least
  // kResidentGemmMinRows rows run on fp8kit's own kernel (resident_gemm.h) where it runs them; false (or
  // FP8KIT_RESIDENT_GEMM=cublaslt): on cuBLASLt.
  bool resident_kernel = true;
};

// Not thread-safe and not for concurrent streams (one workspace): one context per stream.
class GemmContext {
 public:
  explicit GemmContext(GemmOptions options = {});
  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  // Validates (fp8kit::Error naming what to fix), then queues the GEMM on `stream`.
  void gemm(const GemmArgs& args, cudaStream_t stream = nullptr);
  size_t cached_plans() const { return plans_.size(); }
  size_t autotuned_plans() const { return autotuned_; }  // plans whose algorithm was chosen by timing
  size_t fallback_gemms() const { return fallbacks_; }   // scaled GEMMs run by a fallback, not cuBLASLt's scale modes
  size_t block_kernel_gemms() const { return block_kernel_gemms_; }  // block-scaled GEMMs run by block_gemm.h
  size_t resident_kernel_gemms() const { return resident_kernel_gemms_; }  // GEMMs run by resident_gemm.h

  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

 private:
  // What the heuristic's choice depends on: shapes, types, epilogue, accumulation, whether scale
  // pointers are set (cuBLASLt refuses an algorithm chosen without them), alignments.
  struct PlanKey {
    int64_t m, n, k;
    DType a_type, b_type, y_type;
    Epilogue epilogue;
    bool fast_accumulation, accumulate, a_scaled, b_scaled;
    ScaleMode a_scale_mode, b_scale_mode;
    int a_align, b_align, y_align, bias_align;
    auto operator<=>(const PlanKey&) const = default;
  };
  struct Plan;

  Plan& plan_for(const GemmArgs& args);
  cublasStatus_t launch(const Plan& plan, const GemmArgs& args, const cublasLtMatmulAlgo_t& algo, cudaStream_t stream);
  void autotune(Plan& plan, const GemmArgs& args, cudaStream_t stream);
  void pick_fastest(Plan& plan, const GemmArgs& args, const std::vector<cublasLtMatmulAlgo_t>& runnable,
                    cudaStream_t stream);
  void matmul(const GemmArgs& args, cudaStream_t stream);
  void dispatch(const GemmArgs& args, cudaStream_t stream);
  void quantize_a_first(const GemmArgs& args, cudaStream_t stream);
  void matmul_block_scaled(const GemmArgs& args, cudaStream_t stream);
  void matmul_padded(const GemmArgs& args, cudaStream_t stream);
  void matmul_outer_fallback(const GemmArgs& args, cudaStream_t stream);
  void matmul_block_fallback(const GemmArgs& args, cudaStream_t stream);

  GemmOptions options_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<std::byte> workspace_;
  DeviceBuffer<float> scale_slots_;  // [12]: floats 0, 4 and 8 take misaligned a / b / y scales
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
  size_t autotuned_ = 0;
  size_t fallbacks_ = 0;
  size_t block_kernel_gemms_ = 0;
  size_t resident_kernel_gemms_ = 0;
  bool outer_vec_refused_ = false;  // cuBLASLt had no OuterVec algorithm: the fallback runs them
};

}  // namespace fp8kit::cuda
