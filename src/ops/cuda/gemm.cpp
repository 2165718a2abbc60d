// cuBLASLt GEMMs. Row-major y[m, n] = a[m, k] . b[n, k]^T is, in cuBLASLt's column-major view,
// D[n, m] = op(A) . B with A = b stored as a column-major [k, n] matrix (lda = k) and transa = T,
// B = a stored as [k, m] (ldb = k) and transb = N: exactly the "TN" layout FP8 requires. Hence
// cuBLASLt's A scale is b's scale_inv and its B scale is a's, and the bias (one per row of D) is
// one per column n of y.
#include "ops/cuda/gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"
#include "ops/cuda/block_gemm.h"
#include "ops/cuda/quantize.h"
#include "ops/cuda/resident_gemm.h"
#include "ops/cuda/gemm_scales.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/stream.h"

namespace fp8kit::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::Bf16: return CUDA_R_16BF;
    case DType::E4M3: return CUDA_R_8F_E4M3;
    case DType::E5M2: return CUDA_R_8F_E5M2;
    default: fail("GEMM: unsupported element type {}", name(t));
  }
}

cublasLtEpilogue_t cublas_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::None: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::Gelu: return CUBLASLT_EPILOGUE_GELU;
    case Epilogue::GeluBias: return CUBLASLT_EPILOGUE_GELU_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

int32_t cublas_scale_mode(ScaleMode mode) {
  switch (mode) {
    case ScaleMode::Scalar: return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case ScaleMode::OuterVec: return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case ScaleMode::Vec128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case ScaleMode::Block128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

std::string_view scale_mode_name(ScaleMode mode) {
  switch (mode) {
    case ScaleMode::Scalar: return "scalar";
    case ScaleMode::OuterVec: return "per-row";
    case ScaleMode::Vec128: return "1x128";
    case ScaleMode::Block128: return "128x128";
  }
  return "?";
}

// A stream-ordered temporary (capturable in a CUDA graph): freed in stream order when its scope ends,
// also when an error unwinds; free() ends it on the normal path and reports a failed free.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) { FP8KIT_CUDA_CHECK(cudaMallocAsync(&data_, bytes, stream)); }
  ~Scratch() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(data_); }
  void free() { FP8KIT_CUDA_CHECK(cudaFreeAsync(std::exchange(data_, nullptr), stream_)); }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

std::string_view epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::None: return "none";
    case Epilogue::Bias: return "bias";
    case Epilogue::Gelu: return "gelu";
    case Epilogue::GeluBias: return "gelu+bias";
  }
  return "?";
}

std::string describe(const GemmArgs& g) {
  const bool scaled = g.a_scale_mode != ScaleMode::Scalar || g.b_scale_mode != ScaleMode::Scalar;
  return fmt::format("GEMM y[{}x{}] = a[{}x{}] . b[{}x{}]^T ({} x {} -> {}, epilogue {}{}{})", g.m, g.n, g.m, g.k, g.n,
                     g.k, name(g.a_type), name(g.b_type), name(g.y_type), epilogue_name(g.epilogue),
                     g.fast_accumulation ? ", fast accumulation" : "",
                     scaled ? fmt::format(", {} x {} scales", scale_mode_name(g.a_scale_mode), scale_mode_name(g.b_scale_mode))
                            : std::string());
}

// Largest power of two dividing the address, capped at 256 (cuBLASLt's default assumption).
int alignment(const void* p) {
  if (p == nullptr) return 256;
  const auto address = reinterpret_cast<uintptr_t>(p);
  return static_cast<int>(std::min<uintptr_t>(256, address & (~address + 1)));
}

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

void validate(const GemmArgs& g) {
  const std::string what = describe(g);
  FP8KIT_CHECK(g.m > 0 && g.n > 0 && g.k > 0, "{}: m, n and k must be positive", what);
  FP8KIT_CHECK(g.a != nullptr && g.b != nullptr && g.y != nullptr, "{}: a, b and y must be device pointers, not null", what);
  FP8KIT_CHECK(g.a_scale == nullptr || (g.a_type == DType::Bf16 && g.b_type == DType::E4M3 && g.a_scale_inv == nullptr &&
                                          g.a_scale_mode == ScaleMode::Scalar && g.b_scale_mode == ScaleMode::Scalar),
               "{}: a_scale quantizes a bf16 a for an E4M3 b with a per-tensor scale (and no a_scale_inv)", what);
  if (is_fp8(g.a_type) || is_fp8(g.b_type)) {
    FP8KIT_CHECK((is_fp8(g.a_type) || g.a_scale != nullptr) && is_fp8(g.b_type),
                 "{}: FP8 GEMMs need both operands in FP8 (or a bf16 a and a_scale)", what);
    FP8KIT_CHECK(!(g.a_type == DType::E5M2 && g.b_type == DType::E5M2),
                 "{}: E5M2 x E5M2 is not supported by Hopper's FP8 GEMMs; quantize one operand as E4M3", what);
    FP8KIT_CHECK(g.y_type == DType::Bf16 || g.y_type == DType::F32 || is_fp8(g.y_type),
                 "{}: FP8 GEMMs write bf16, f32, e4m3 or e5m2", what);
    FP8KIT_CHECK(is_fp8(g.y_type) == (g.y_scale != nullptr), "{}: an FP8 y needs y_scale, and only an FP8 y takes one",
                 what);
    FP8KIT_CHECK(!is_fp8(g.y_type) || (!g.accumulate && g.a_scale_mode == ScaleMode::Scalar &&
                                         g.b_scale_mode == ScaleMode::Scalar),
                 "{}: an FP8 y takes per-tensor operand scales and no accumulation", what);
  } else {
    FP8KIT_CHECK(g.a_type == g.b_type && (g.a_type == DType::F32 || g.a_type == DType::Bf16),
                 "{}: operands must both be f32, both bf16, or both FP8", what);
    FP8KIT_CHECK(g.a_type == DType::Bf16 ? (g.y_type == DType::Bf16 || g.y_type == DType::F32) : g.y_type == DType::F32,
                 "{}: f32 GEMMs write f32; bf16 GEMMs write bf16 or f32", what);
    FP8KIT_CHECK(g.a_scale_inv == nullptr && g.b_scale_inv == nullptr,
                 "{}: scale_inv pointers apply to FP8 operands only", what);
    FP8KIT_CHECK(!g.fast_accumulation, "{}: fast accumulation applies to FP8 GEMMs only", what);
    FP8KIT_CHECK(g.y_scale == nullptr, "{}: y_scale applies to FP8 products only", what);
  }
  FP8KIT_CHECK(has_bias(g.epilogue) == (g.bias != nullptr),
               "{}: epilogues with bias need a bias pointer ([n], {}); the others take none", what,
               name(bias_type(g.a_scale != nullptr ? DType::E4M3 : g.a_type, g.y_type)));
  const ScaleMode a = g.a_scale_mode, b = g.b_scale_mode;
  if (a == ScaleMode::Scalar && b == ScaleMode::Scalar) return;
  FP8KIT_CHECK(is_fp8(g.a_type), "{}: scale modes apply to FP8 operands only", what);
  FP8KIT_CHECK((a == ScaleMode::OuterVec && b == ScaleMode::OuterVec) ||
                   (a == ScaleMode::Vec128 && (b == ScaleMode::Vec128 || b == ScaleMode::Block128)),
               "{}: supported scale pairs are per-row x per-row, 1x128 x 1x128 and 1x128 x 128x128", what);
  FP8KIT_CHECK(g.a_scale_inv != nullptr && g.b_scale_inv != nullptr && alignment(g.a_scale_inv) >= 16 &&
                   alignment(g.b_scale_inv) >= 16,
               "{}: vector and block scales need both scale_inv pointers, 16-byte aligned", what);
  FP8KIT_CHECK(g.epilogue == Epilogue::None || g.epilogue == Epilogue::Bias,
               "{}: vector and block scales take no GELU epilogue", what);
  FP8KIT_CHECK(a == ScaleMode::OuterVec || !g.fast_accumulation,
               "{}: block-scaled GEMMs run the split accumulator only (fast_accumulation = false)", what);
}

// What k an FP8 GEMM is padded to a multiple of: 16 (cuBLASLt's 16-byte rule), 128 with 1x128 or 128x128
// scales (whole blocks along k, as DeepSeek-V3's kernels assume; the zeros add nothing and no block).
int64_t k_multiple(const GemmArgs& g) {
  return g.a_scale_mode == ScaleMode::Vec128 ? 128 : 16;
}

// Whether work queued on `stream` is being captured into a graph (then nothing may wait for it).
bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();  // the legacy stream while another stream captures: treat as capturing
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

template <typename T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value,
                   const std::string& context) {
  FP8KIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)), context);
}

}  // namespace

DType bias_type(DType a_type, DType y_type) { return is_fp8(a_type) ? DType::Bf16 : y_type; }

// The cuBLASLt descriptors and the chosen algorithm of one PlanKey.
struct GemmContext::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  // cuBLASLt's A (our b), B (our a), D (y) and C: y's layout, or bf16 for an FP8 y (cuBLASLt's rule;
  // never read: beta is 0).
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, y = nullptr, c = nullptr;
  std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's, best first (one without autotuning)
  cublasLtMatmulAlgo_t algo{};
  bool tuned = false;  // algo was timed against the other candidates
  std::string context;
  ~Plan() {
    if (c && c != y) cublasLtMatrixLayoutDestroy(c);
    if (y) cublasLtMatrixLayoutDestroy(y);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

GemmContext::GemmContext(GemmOptions options) : options_(options), workspace_(kWorkspaceBytes), scale_slots_(12) {
  FP8KIT_CHECK(options.candidates >= 1, "GemmOptions: candidates must be at least 1, not {}", options.candidates);
  // FP8KIT_BLOCK_GEMM=cublaslt: block-scaled GEMMs on cuBLASLt (a whole program's, for comparisons).
  if (const char* v = std::getenv("FP8KIT_BLOCK_GEMM"); v != nullptr && std::string_view(v) == "cublaslt")
    options_.block_kernel = false;
  if (const char* v = std::getenv("FP8KIT_RESIDENT_GEMM"); v != nullptr && std::string_view(v) == "cublaslt")
    options_.resident_kernel = false;
  FP8KIT_CUBLAS_CHECK(cublasLtCreate(&handle_), "creating the cuBLASLt handle");
}

GemmContext::~GemmContext() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

namespace {

// throw_cublas_error's message, as NoAlgorithm.
[[noreturn]] void throw_no_algorithm(cublasStatus_t status, const char* call, const std::string& context) {
  try {
    throw_cublas_error(status, call, context);
  } catch (const Error& e) {
    throw NoAlgorithm(e.what());
  }
}

}  // namespace

GemmContext::Plan& GemmContext::plan_for(const GemmArgs& g) {
  const PlanKey key{g.m, g.n, g.k, g.a_type, g.b_type, g.y_type, g.epilogue, g.fast_accumulation, g.accumulate,
                    g.a_scale_inv != nullptr, g.b_scale_inv != nullptr, g.a_scale_mode, g.b_scale_mode,
                    alignment(g.a), alignment(g.b), alignment(g.y), alignment(g.bias)};
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;

  auto plan = std::make_unique<Plan>();
  const std::string& ctx = plan->context = describe(g);
  FP8KIT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), ctx);
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T}, ctx);
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, int32_t{CUBLAS_OP_N}, ctx);
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{cublas_epilogue(g.epilogue)}, ctx);
  if (is_fp8(g.a_type)) {
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t{g.fast_accumulation}, ctx);
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(g.b_scale_inv), ctx);
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(g.a_scale_inv), ctx);
    if (g.a_scale_mode != ScaleMode::Scalar) {  // cuBLASLt's A is our b, its B our a
      set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, cublas_scale_mode(g.b_scale_mode), ctx);
      set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, cublas_scale_mode(g.a_scale_mode), ctx);
    }
  }
  if (has_bias(g.epilogue)) {
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t{cuda_type(bias_type(g.a_type, g.y_type))}, ctx);
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias, ctx);  // its alignment guides the heuristic
  }
  const auto k = static_cast<uint64_t>(g.k), m = static_cast<uint64_t>(g.m), n = static_cast<uint64_t>(g.n);
  FP8KIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, cuda_type(g.b_type), k, n, g.k), ctx);
  FP8KIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, cuda_type(g.a_type), k, m, g.k), ctx);
  FP8KIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->y, cuda_type(g.y_type), n, m, g.n), ctx);
  plan->c = plan->y;
  if (is_fp8(g.y_type)) {
    FP8KIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_16BF, n, m, g.n), ctx);
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, static_cast<const void*>(g.y_scale), ctx);
  }

  cublasLtMatmulPreference_t preference = nullptr;
  FP8KIT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference), ctx);
  const auto set_preference = [&](cublasLtMatmulPreferenceAttributes_t attribute, auto value) {
    const cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value));
    if (status != CUBLAS_STATUS_SUCCESS) {
      cublasLtMatmulPreferenceDestroy(preference);
      throw_cublas_error(status, "cublasLtMatmulPreferenceSetAttribute", ctx);
    }
  };
  set_preference(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{kWorkspaceBytes});
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(key.b_align));
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(key.a_align));
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(key.y_align));
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(key.y_align));
  std::vector<cublasLtMatmulHeuristicResult_t> results(options_.autotune ? options_.candidates : 1);
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c, plan->y, preference,
                                     static_cast<int>(results.size()), results.data(), &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) throw_no_algorithm(status, "cublasLtMatmulAlgoGetHeuristic", ctx);
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, "cublasLtMatmulAlgoGetHeuristic", ctx);
  for (int i = 0; i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) plan->candidates.push_back(results[i].algo);
  if (plan->candidates.empty()) throw NoAlgorithm(fmt::format("{}: cuBLASLt has no algorithm for this GEMM on this GPU", ctx));
  plan->algo = plan->candidates.front();
  return *plans_.emplace(key, std::move(plan)).first->second;
}

cublasStatus_t GemmContext::launch(const Plan& plan, const GemmArgs& g, const cublasLtMatmulAlgo_t& algo,
                                   cudaStream_t stream) {
  const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
  // An FP8 y's C is a layout of its own, never read: cuBLASLt refuses C == D with different layouts.
  const void* c = plan.c == plan.y ? g.y : nullptr;
  return cublasLtMatmul(handle_, plan.desc, &alpha, g.b, plan.a, g.a, plan.b, &beta, c, plan.c, g.y, plan.y, &algo,
                        workspace_.data(), kWorkspaceBytes, stream);
}

// Times the candidates on g's operands and keeps the fastest in plan.algo: a warm-up run of each
// (candidates that refuse to run are dropped), then pick_fastest. Accumulating GEMMs read y, so y
// is saved first and restored after the trial runs.
void GemmContext::autotune(Plan& plan, const GemmArgs& g, cudaStream_t stream) {
  plan.tuned = true;
  ++autotuned_;
  if (plan.candidates.size() < 2) return;
  const size_t y_bytes = static_cast<size_t>(g.m * g.n) * dtype_size(g.y_type);
  DeviceBuffer<std::byte> saved_y(g.accumulate ? y_bytes : 0);
  if (g.accumulate) FP8KIT_CUDA_CHECK(cudaMemcpyAsync(saved_y.data(), g.y, y_bytes, cudaMemcpyDeviceToDevice, stream));
  std::vector<cublasLtMatmulAlgo_t> runnable;
  for (const cublasLtMatmulAlgo_t& algo : plan.candidates)
    if (launch(plan, g, algo, stream) == CUBLAS_STATUS_SUCCESS) runnable.push_back(algo);
  if (runnable.size() == 1) plan.algo = runnable[0];
  if (runnable.size() > 1) pick_fastest(plan, g, runnable, stream);
  if (g.accumulate) FP8KIT_CUDA_CHECK(cudaMemcpyAsync(g.y, saved_y.data(), y_bytes, cudaMemcpyDeviceToDevice, stream));
  // saved_y is freed on return, while the copy may still be queued: wait for it first.
  if (g.accumulate) FP8KIT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

// kRounds rounds that run every candidate once in turn (so clock and power drift spread over all of
// them), each candidate's median. The heuristic's first choice stays unless another is at least
// kMargin faster: short trials can favour a kernel that loses once the GPU runs hot.
void GemmContext::pick_fastest(Plan& plan, const GemmArgs& g, const std::vector<cublasLtMatmulAlgo_t>& runnable,
                               cudaStream_t stream) {
  constexpr int kRounds = 7;
  constexpr float kMargin = 0.03f;
  const size_t n = runnable.size();
  std::vector<Event> marks;  // start and end of every trial
  marks.reserve(kRounds * n * 2);
  for (size_t i = 0; i < kRounds * n * 2; ++i) marks.emplace_back(true);
  for (int round = 0; round < kRounds; ++round) {
    for (size_t c = 0; c < n; ++c) {
      FP8KIT_CUDA_CHECK(cudaEventRecord(marks[(round * n + c) * 2].get(), stream));
      FP8KIT_CUBLAS_CHECK(launch(plan, g, runnable[c], stream), plan.context);
      FP8KIT_CUDA_CHECK(cudaEventRecord(marks[(round * n + c) * 2 + 1].get(), stream));
    }
  }
  std::vector<float> medians(n);
  for (size_t c = 0; c < n; ++c) {
    std::vector<float> ms(kRounds);
    for (int round = 0; round < kRounds; ++round)
      ms[round] = elapsed_ms(marks[(round * n + c) * 2], marks[(round * n + c) * 2 + 1]);
    std::nth_element(ms.begin(), ms.begin() + kRounds / 2, ms.end());
    medians[c] = ms[kRounds / 2];
  }
  const size_t fastest = static_cast<size_t>(std::min_element(medians.begin(), medians.end()) - medians.begin());
  // runnable[0] is the heuristic's first choice whenever that one runs (it always should).
  const bool first_runs = std::memcmp(&runnable[0], &plan.candidates[0], sizeof(cublasLtMatmulAlgo_t)) == 0;
  if (!(first_runs && medians[fastest] > (1.0f - kMargin) * medians[0])) plan.algo = runnable[fastest];
}

void GemmContext::matmul(const GemmArgs& g, cudaStream_t stream) {
  Plan& plan = plan_for(g);
  if (is_fp8(g.a_type)) {
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(g.b_scale_inv), plan.context);
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(g.a_scale_inv), plan.context);
  }
  if (has_bias(g.epilogue)) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias, plan.context);
  if (is_fp8(g.y_type))
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, static_cast<const void*>(g.y_scale), plan.context);
  if (options_.autotune && !plan.tuned && !is_capturing(stream)) autotune(plan, g, stream);
  const cublasStatus_t status = launch(plan, g, plan.algo, stream);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) throw_no_algorithm(status, "cublasLtMatmul", plan.context);
  FP8KIT_CUBLAS_CHECK(status, plan.context);
}

// Copies the operands into zero-padded [m, kp] and [np, kp] buffers (zeros add nothing to the dot
// products; kp per k_multiple), runs the GEMM into a [m, np] buffer and copies the [m, n] part out.
void GemmContext::matmul_padded(const GemmArgs& g, cudaStream_t stream) {
  const int64_t kp = round_up(g.k, k_multiple(g)), np = round_up(g.n, 16);
  const size_t y_size = dtype_size(g.y_type);
  const size_t a_bytes = round_up(g.m * kp, 256), b_bytes = round_up(np * kp, 256);
  const size_t y_bytes = round_up(g.m * np * static_cast<int64_t>(y_size), 256), bias_bytes = has_bias(g.epilogue) ? round_up(np * 2, 256) : 0;
  // b's per-row and 1x128 scales have one float per row of b, n of them per row of scales: np once padded
  // (128x128 blocks and a's scales keep their layout, k padded to 16 adding no 128-block).
  const int64_t b_scale_rows = g.b_scale_mode == ScaleMode::OuterVec ? 1
                               : g.b_scale_mode == ScaleMode::Vec128 ? (g.k + 127) / 128
                                                                      : 0;
  const size_t b_scale_bytes = round_up(b_scale_rows * np * 4, 256);
  const size_t total = a_bytes + b_bytes + y_bytes + bias_bytes + b_scale_bytes;
  Scratch buffer(total, stream);
  std::byte* a = buffer.data();
  std::byte* b = a + a_bytes;
  std::byte* y = b + b_bytes;
  std::byte* bias = y + y_bytes;
  std::byte* b_scale = bias + bias_bytes;
  FP8KIT_CUDA_CHECK(cudaMemsetAsync(buffer.data(), 0, total, stream));
  if (b_scale_bytes > 0)
    FP8KIT_CUDA_CHECK(cudaMemcpy2DAsync(b_scale, np * 4, g.b_scale_inv, g.n * 4, g.n * 4, b_scale_rows,
                                        cudaMemcpyDeviceToDevice, stream));
  FP8KIT_CUDA_CHECK(cudaMemcpy2DAsync(a, kp, g.a, g.k, g.k, g.m, cudaMemcpyDeviceToDevice, stream));
  FP8KIT_CUDA_CHECK(cudaMemcpy2DAsync(b, kp, g.b, g.k, g.k, g.n, cudaMemcpyDeviceToDevice, stream));
  if (g.accumulate)
    FP8KIT_CUDA_CHECK(cudaMemcpy2DAsync(y, np * y_size, g.y, g.n * y_size, g.n * y_size, g.m, cudaMemcpyDeviceToDevice, stream));
  if (bias_bytes > 0) FP8KIT_CUDA_CHECK(cudaMemcpyAsync(bias, g.bias, g.n * 2, cudaMemcpyDeviceToDevice, stream));
  GemmArgs padded = g;
  padded.n = np;
  padded.k = kp;
  padded.a = a;
  padded.b = b;
  padded.y = y;
  padded.bias = bias_bytes > 0 ? bias : nullptr;
  if (b_scale_bytes > 0) padded.b_scale_inv = reinterpret_cast<const float*>(b_scale);
  matmul(padded, stream);
  FP8KIT_CUDA_CHECK(cudaMemcpy2DAsync(g.y, g.n * y_size, y, np * y_size, g.n * y_size, g.m, cudaMemcpyDeviceToDevice, stream));
  buffer.free();
}

// Per-row x per-row scales where cuBLASLt has no OuterVec algorithm: the unscaled FP8 GEMM into an
// f32 buffer, then y = (a_scale[i] * b_scale[j]) * acc (+ bias) (+ y) in one pass (gemm_scales.h).
void GemmContext::matmul_outer_fallback(const GemmArgs& g, cudaStream_t stream) {
  ++fallbacks_;
  Scratch buffer(static_cast<size_t>(g.m * g.n) * sizeof(float), stream);
  float* acc = reinterpret_cast<float*>(buffer.data());
  GemmArgs unscaled = g;
  unscaled.a_scale_mode = unscaled.b_scale_mode = ScaleMode::Scalar;
  unscaled.a_scale_inv = unscaled.b_scale_inv = nullptr;
  unscaled.y = acc;
  unscaled.y_type = DType::F32;
  unscaled.epilogue = Epilogue::None;
  unscaled.bias = nullptr;
  unscaled.accumulate = false;
  gemm(unscaled, stream);
  scale_outer(acc, g.m, g.n, g.a_scale_inv, g.b_scale_inv, static_cast<const uint16_t*>(g.bias), g.accumulate, g.y,
              g.y_type, stream);
  buffer.free();
}

// Block scales where cuBLASLt has no algorithm (matmul.h's formula, step by step): per 128-wide slice
// of k, the slice's codes copied out (zero-padded to 128), their unscaled GEMM into f32, and a pass
// adding it times the two scales to an f32 accumulator; then y from the accumulator (+ bias) (+ y).
void GemmContext::matmul_block_fallback(const GemmArgs& g, cudaStream_t stream) {
  ++fallbacks_;
  const int64_t slices = (g.k + 127) / 128;
  const size_t a_bytes = round_up(g.m * 128, 256), b_bytes = round_up(g.n * 128, 256);
  const size_t f32_bytes = round_up(g.m * g.n * 4, 256);
  const size_t total = a_bytes + b_bytes + 2 * f32_bytes;
  Scratch buffer(total, stream);
  std::byte* a = buffer.data();
  std::byte* b = a + a_bytes;
  float* partial = reinterpret_cast<float*>(b + b_bytes);
  float* acc = reinterpret_cast<float*>(b + b_bytes + f32_bytes);
  FP8KIT_CUDA_CHECK(cudaMemsetAsync(a, 0, total, stream));
  GemmArgs slice = g;
  slice.k = 128;
  slice.a = a, slice.b = b, slice.y = partial, slice.y_type = DType::F32;
  slice.a_scale_inv = slice.b_scale_inv = nullptr;
  slice.a_scale_mode = slice.b_scale_mode = ScaleMode::Scalar;
  slice.epilogue = Epilogue::None, slice.bias = nullptr, slice.accumulate = false;
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t k0 = 128 * s, width = std::min<int64_t>(128, g.k - k0);
    if (width < 128) FP8KIT_CUDA_CHECK(cudaMemsetAsync(a, 0, a_bytes + b_bytes, stream));
    const auto* a_codes = static_cast<const std::byte*>(g.a) + k0;
    const auto* b_codes = static_cast<const std::byte*>(g.b) + k0;
    FP8KIT_CUDA_CHECK(cudaMemcpy2DAsync(a, 128, a_codes, g.k, width, g.m, cudaMemcpyDeviceToDevice, stream));
    FP8KIT_CUDA_CHECK(cudaMemcpy2DAsync(b, 128, b_codes, g.k, width, g.n, cudaMemcpyDeviceToDevice, stream));
    gemm(slice, stream);
    const bool block = g.b_scale_mode == ScaleMode::Block128;
    add_scaled_slice(partial, g.m, g.n, g.a_scale_inv + s * g.m, block ? g.b_scale_inv + s : g.b_scale_inv + s * g.n,
                     block ? 128 : 1, block ? slices : 1, acc, stream);
  }
  scale_outer(acc, g.m, g.n, nullptr, nullptr, static_cast<const uint16_t*>(g.bias), g.accumulate, g.y, g.y_type,
              stream);
  buffer.free();
}

// A bf16 a with a_scale where the short-k kernel does not run: quantized into a temporary (ops::quantize's
// codes and scale_inv), then the FP8 GEMM.
void GemmContext::quantize_a_first(const GemmArgs& g, cudaStream_t stream) {
  Scratch buffer(256 + static_cast<size_t>(g.m * g.k), stream);
  QuantizeArgs q;
  q.x = g.a, q.x_type = DType::Bf16, q.rows = g.m, q.cols = g.k;
  q.scale = g.a_scale;
  q.scale_inv = reinterpret_cast<float*>(buffer.data());
  q.q = reinterpret_cast<uint8_t*>(buffer.data() + 256);
  quantize_fp8(q, stream);
  GemmArgs codes = g;
  codes.a = q.q, codes.a_type = DType::E4M3, codes.a_scale = nullptr, codes.a_scale_inv = q.scale_inv;
  gemm(codes, stream);
  buffer.free();
}

// cuBLASLt's GEMM, through zero-padded copies where its 16-byte rules (or whole 128-blocks of k) ask.
void GemmContext::dispatch(const GemmArgs& g, cudaStream_t stream) {
  const bool unaligned = alignment(g.a) < 16 || alignment(g.b) < 16 || alignment(g.y) < 16 || alignment(g.bias) < 16;
  if (is_fp8(g.a_type) && (g.k % k_multiple(g) != 0 || g.n % 16 != 0 || unaligned)) {
    matmul_padded(g, stream);
  } else {
    matmul(g, stream);
  }
}

// cuBLASLt reads 128x128 block scales with rows of a multiple of 4 floats (16-byte aligned rows, as
// PyTorch's _scaled_mm requires them): ours are padded in a copy when they are not.
void GemmContext::matmul_block_scaled(const GemmArgs& g, cudaStream_t stream) {
  const int64_t k_blocks = (g.k + 127) / 128, padded_blocks = round_up(k_blocks, 4);
  if (g.b_scale_mode != ScaleMode::Block128 || k_blocks == padded_blocks) return dispatch(g, stream);
  const int64_t n_blocks = (g.n + 127) / 128;
  const size_t bytes = static_cast<size_t>(n_blocks * padded_blocks) * sizeof(float);
  Scratch buffer(bytes, stream);
  float* padded = reinterpret_cast<float*>(buffer.data());
  FP8KIT_CUDA_CHECK(cudaMemsetAsync(padded, 0, bytes, stream));
  FP8KIT_CUDA_CHECK(cudaMemcpy2DAsync(padded, padded_blocks * sizeof(float), g.b_scale_inv, k_blocks * sizeof(float),
                                      k_blocks * sizeof(float), n_blocks, cudaMemcpyDeviceToDevice, stream));
  GemmArgs with_padded = g;
  with_padded.b_scale_inv = padded;
  dispatch(with_padded, stream);
  buffer.free();
}

void GemmContext::gemm(const GemmArgs& args, cudaStream_t stream) {
  validate(args);
  GemmArgs g = args;
  const auto align_scale = [&](const float*& scale, int slot) {
    if (scale == nullptr || alignment(scale) >= 16) return;
    float* aligned = scale_slots_.data() + 4 * slot;
    FP8KIT_CUDA_CHECK(cudaMemcpyAsync(aligned, scale, sizeof(float), cudaMemcpyDeviceToDevice, stream));
    scale = aligned;
  };
  align_scale(g.a_scale_inv, 0);  // vector scales are aligned (validate)
  align_scale(g.b_scale_inv, 1);
  align_scale(g.y_scale, 2);
  // GELU epilogues and a quantized in the product only: there the own kernel's overlapped epilogue
  // and its quantization of a's rows win (the lab MLP's first Linear, 16384 x 3072 x 768 into E4M3);
  // otherwise cuBLASLt is as fast or faster at large m (bench/cuda/README.md, "The short-k FP8 GEMM").
  const bool resident_pays = has_gelu(g.epilogue) || g.a_scale != nullptr;
  if (options_.resident_kernel && resident_pays && g.m >= kResidentGemmMinRows && resident_gemm_runs(g)) {
    ++resident_kernel_gemms_;
    return resident_gemm(g, stream);
  }
  if (g.a_scale != nullptr) return quantize_a_first(g, stream);
  switch (g.a_scale_mode) {
    case ScaleMode::Scalar:
      return dispatch(g, stream);
    case ScaleMode::Vec128:
    case ScaleMode::Block128:  // (validate: a is Vec128)
      if (options_.block_kernel && block_gemm_runs(g)) {
        ++block_kernel_gemms_;
        return block_gemm(g, stream);
      }
      try {
        return matmul_block_scaled(g, stream);
      } catch (const NoAlgorithm&) {
        return matmul_block_fallback(g, stream);  // cuBLASLt has no algorithm for this shape
      }
    case ScaleMode::OuterVec:
      if (!outer_vec_refused_) {
        try {
          return dispatch(g, stream);
        } catch (const NoAlgorithm&) {
          outer_vec_refused_ = true;  // no algorithm (or a refused launch): the fallback from now on
        }
      }
      return matmul_outer_fallback(g, stream);
  }
}

}  // namespace fp8kit::cuda
