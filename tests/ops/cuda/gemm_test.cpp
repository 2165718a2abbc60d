// cuBLASLt GEMMs against a double-precision CPU reference computed from the very bytes the GPU reads
// (FP8 codes decoded exactly, bf16 widened), scaled by the operands' scale_inv, plus bias and GELU.
//
// Tolerances, as relative Frobenius error ||y - ref|| / ||ref|| (operands ~N(0,1), K <= 4096), see
// bound() below. Each GEMM prints the error it measured ("measured error ...").
#include "ops/cuda/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "numerics/cast.h"
#include "ops/cuda/gpu_test.h"
#include "runtime/cuda/graph.h"

namespace fp8kit::cuda {
namespace {

// A row-major matrix as raw bytes of `type`, and the exact (unscaled) value of each element.
struct Operand {
  DType type;
  std::vector<uint8_t> bytes;
  std::vector<double> values;
  float scale_inv = 1.0f;
};

Operand make_operand(DType type, int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(count);
  for (float& v : x) v = normal(rng);
  Operand op{type, std::vector<uint8_t>(count * dtype_size(type)), std::vector<double>(count)};
  if (type == DType::E4M3 || type == DType::E5M2) {
    const Fp8Format format = type == DType::E4M3 ? Fp8Format::E4M3 : Fp8Format::E5M2;
    const float scale = fp8_max(format) / testing::reference_amax(x);  // fill the format's range
    op.scale_inv = 1.0f / scale;
    for (int64_t i = 0; i < count; ++i) {
      op.bytes[i] = encode_fp8(x[i] * scale, format);
      op.values[i] = decode_fp8(op.bytes[i], format);
    }
  } else if (type == DType::Bf16) {
    for (int64_t i = 0; i < count; ++i) {
      const uint16_t h = float_to_bf16(x[i]);
      std::memcpy(&op.bytes[2 * i], &h, 2);
      op.values[i] = bf16_to_float(h);
    }
  } else {
    std::memcpy(op.bytes.data(), x.data(), 4 * count);
    for (int64_t i = 0; i < count; ++i) op.values[i] = x[i];
  }
  return op;
}

std::vector<float> to_floats(const std::vector<uint8_t>& bytes, DType type) {
  std::vector<float> out(bytes.size() / dtype_size(type));
  for (size_t i = 0; i < out.size(); ++i) {
    if (type == DType::F32) {
      std::memcpy(&out[i], &bytes[4 * i], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      out[i] = bf16_to_float(h);
    }
  }
  return out;
}

double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

struct Case {
  int64_t m, n, k;
  DType a, b, y;
  Epilogue epilogue = Epilogue::None;
  bool fast = false;
  bool accumulate = false;
  size_t a_offset = 0;       // bytes: misaligns a
  bool pass_scales = true;   // false: null scale pointers (scale 1)
  bool aligned_scales = false;  // true: 16-byte aligned scale pointers; false: b's at +4 bytes (copied)
};

std::string describe(const Case& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + " " + std::string(name(c.a)) +
         " x " + std::string(name(c.b)) + " -> " + std::string(name(c.y)) + (c.fast ? " fast" : "") +
         (c.epilogue != Epilogue::None ? " epilogue" : "") + (c.accumulate ? " accumulate" : "") +
         (c.a_offset ? " misaligned" : "");
}

// The tolerance of a case. Measured on an H100 (cuBLASLt 13.0, these seeds), largest per row:
//   f32 or bf16 operands, f32 output (exact products, fp32 accumulation):   4.8e-7  -> 2e-6
//   FP8, split accumulator (dgrad/wgrad; ~2^-13, set by the MMA itself,
//   flat in K from 512 to 4096):                                           1.3e-4  -> 3e-4
//   FP8, fast accumulation (fprop; grows with K: 3.4e-4 at K=512,
//   1.35e-3 at K=4096, Hopper's ~14-bit accumulator):                      1.4e-3  -> 3e-3
//   bf16 output (bf16 rounding: up to 2^-8 relative, ~1.7e-3 RMS here):    1.7e-3  -> 3e-3
// cuBLASLt's GELU (tanh form) matched ours to well under these bounds.
double bound(const Case& c) {
  if (c.y == DType::Bf16) return 3e-3;
  if (c.a == DType::E4M3 || c.a == DType::E5M2) return c.fast ? 3e-3 : 3e-4;
  return 2e-6;
}

// Runs one GEMM and returns its relative error against the double reference.
double run_case(GemmContext& context, const Case& c, uint32_t seed) {
  const Operand a = make_operand(c.a, c.m * c.k, seed), b = make_operand(c.b, c.n * c.k, seed + 1);
  const bool fp8 = c.a == DType::E4M3 || c.a == DType::E5M2;
  const bool with_bias = has_bias(c.epilogue);
  const Operand bias = make_operand(bias_type(c.a, c.y), c.n, seed + 2);
  const Operand y0 = make_operand(c.y, c.m * c.n, seed + 3);

  DeviceBuffer<uint8_t> d_a(a.bytes.size() + c.a_offset), d_b(b.bytes.size()), d_bias(bias.bytes.size()),
      d_y(y0.bytes.size());
  std::vector<uint8_t> a_bytes(c.a_offset, 0);
  a_bytes.insert(a_bytes.end(), a.bytes.begin(), a.bytes.end());
  d_a.upload(a_bytes);
  d_b.upload(b.bytes);
  d_bias.upload(bias.bytes);
  if (c.accumulate) {
    d_y.upload(y0.bytes);
  } else {
    d_y.fill_bytes(0xFF);  // NaN: an element the GEMM does not write fails the comparison
  }
  DeviceBuffer<float> scales(8);
  const int b_slot = c.aligned_scales ? 4 : 1;
  std::vector<float> s(8, 0.0f);
  s[0] = a.scale_inv, s[b_slot] = b.scale_inv;
  scales.upload(s);

  GemmArgs args;
  args.m = c.m, args.n = c.n, args.k = c.k;
  args.a = d_a.data() + c.a_offset, args.a_type = c.a;
  args.b = d_b.data(), args.b_type = c.b;
  args.y = d_y.data(), args.y_type = c.y;
  if (fp8 && c.pass_scales) args.a_scale_inv = scales.data(), args.b_scale_inv = scales.data() + b_slot;
  args.epilogue = c.epilogue;
  args.bias = with_bias ? d_bias.data() : nullptr;
  args.fast_accumulation = c.fast;
  args.accumulate = c.accumulate;
  context.gemm(args);
  FP8KIT_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> y = to_floats(d_y.to_host(), c.y);

  const double scale = fp8 && c.pass_scales ? double(a.scale_inv) * double(b.scale_inv) : 1.0;
  std::vector<double> ref(c.m * c.n);
#pragma omp parallel for
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double dot = 0.0;
      for (int64_t l = 0; l < c.k; ++l) dot += a.values[i * c.k + l] * b.values[j * c.k + l];
      double v = scale * dot + (with_bias ? bias.values[j] : 0.0) + (c.accumulate ? y0.values[i * c.n + j] : 0.0);
      if (has_gelu(c.epilogue)) v = gelu(v);
      ref[i * c.n + j] = v;
    }
  }
  const double error = testing::relative_error(y, ref);
  std::cout << "measured error " << describe(c) << ": " << error << "\n";
  return error;
}

TEST(CudaGemm, Fp8FpropFastAccumulation) {
  FP8KIT_REQUIRE_GPU();
  GemmContext context;
  for (const auto& [m, n, k] : {std::tuple{128, 256, 512}, {64, 48, 4096}, {256, 384, 1024}, {2048, 768, 3072}}) {
    Case c{m, n, k, DType::E4M3, DType::E4M3, DType::F32, Epilogue::None, true};
    c.aligned_scales = m == 64;
    EXPECT_LT(run_case(context, c, 1), bound(c)) << describe(c);
  }
}

TEST(CudaGemm, Fp8SplitAccumulationForDgradAndWgrad) {
  FP8KIT_REQUIRE_GPU();
  GemmContext context;
  for (const auto& [m, n, k] : {std::tuple{128, 256, 512}, {64, 48, 4096}, {768, 3072, 2048}}) {
    for (const auto& [a, b] : {std::pair{DType::E4M3, DType::E4M3}, {DType::E5M2, DType::E4M3}, {DType::E4M3, DType::E5M2}}) {
      const Case c{m, n, k, a, b, DType::F32};
      EXPECT_LT(run_case(context, c, 2), bound(c)) << describe(c);
    }
  }
}

TEST(CudaGemm, Fp8Bf16OutputBiasAndGelu) {
  FP8KIT_REQUIRE_GPU();
  GemmContext context;
  for (Epilogue e : {Epilogue::None, Epilogue::Bias, Epilogue::Gelu, Epilogue::GeluBias}) {
    const Case c{96, 160, 768, DType::E4M3, DType::E4M3, DType::Bf16, e, true};
    EXPECT_LT(run_case(context, c, 3), bound(c)) << describe(c);
    const Case f{96, 160, 768, DType::E4M3, DType::E4M3, DType::F32, e, false};
    EXPECT_LT(run_case(context, f, 4), bound(f)) << describe(f);
  }
}

TEST(CudaGemm, Fp8OddShapesArePadded) {
  FP8KIT_REQUIRE_GPU();
  GemmContext context;
  const Case cases[] = {
      {5, 17, 33, DType::E4M3, DType::E4M3, DType::F32},
      {5, 17, 33, DType::E5M2, DType::E4M3, DType::Bf16, Epilogue::Bias},
      {1, 16, 16, DType::E4M3, DType::E4M3, DType::F32},
      {17, 32, 48, DType::E4M3, DType::E4M3, DType::F32},  // odd m needs no padding
      {3, 5, 7, DType::E4M3, DType::E4M3, DType::F32, Epilogue::Bias, false, true},
      {64, 64, 64, DType::E4M3, DType::E4M3, DType::F32, Epilogue::None, false, false, 1},  // a misaligned
  };
  for (const Case& c : cases) EXPECT_LT(run_case(context, c, 5), bound(c)) << describe(c);
}

TEST(CudaGemm, Fp8NullScalesMeanOne) {
  FP8KIT_REQUIRE_GPU();
  GemmContext context;
  Case c{32, 48, 64, DType::E4M3, DType::E4M3, DType::F32};
  c.pass_scales = false;
  EXPECT_LT(run_case(context, c, 6), bound(c));
}

TEST(CudaGemm, Bf16AndF32) {
  FP8KIT_REQUIRE_GPU();
  GemmContext context;
  const Case bf16_cases[] = {
      {128, 256, 512, DType::Bf16, DType::Bf16, DType::Bf16},
      {128, 256, 512, DType::Bf16, DType::Bf16, DType::F32},
      {5, 17, 33, DType::Bf16, DType::Bf16, DType::Bf16, Epilogue::Bias},
      {33, 40, 100, DType::Bf16, DType::Bf16, DType::F32, Epilogue::GeluBias},
  };
  for (const Case& c : bf16_cases) EXPECT_LT(run_case(context, c, 7), bound(c)) << describe(c);
  const Case f32_cases[] = {
      {5, 17, 33, DType::F32, DType::F32, DType::F32},
      {128, 96, 300, DType::F32, DType::F32, DType::F32, Epilogue::Bias},
      {64, 64, 64, DType::F32, DType::F32, DType::F32, Epilogue::None, false, true},
  };
  for (const Case& c : f32_cases) EXPECT_LT(run_case(context, c, 8), bound(c)) << describe(c);
}

TEST(CudaGemm, HeuristicChoiceIsCachedPerShape) {
  FP8KIT_REQUIRE_GPU();
  GemmContext context;
  const Case c{64, 64, 64, DType::Bf16, DType::Bf16, DType::Bf16};
  run_case(context, c, 9);
  run_case(context, c, 10);
  EXPECT_EQ(context.cached_plans(), 1u);
  run_case(context, {64, 64, 128, DType::Bf16, DType::Bf16, DType::Bf16}, 11);
  EXPECT_EQ(context.cached_plans(), 2u);
}

TEST(CudaGemm, AutotunedGemmsStayWithinTolerancesAndAreCached) {
  FP8KIT_REQUIRE_GPU();
  GemmContext context(GemmOptions{.autotune = true, .resident_kernel = false});  // cuBLASLt's plans, all of them
  const Case cases[] = {
      {2048, 768, 3072, DType::E4M3, DType::E4M3, DType::F32, Epilogue::None, true},
      {768, 3072, 2048, DType::E5M2, DType::E4M3, DType::F32},
      {96, 160, 768, DType::E4M3, DType::E4M3, DType::Bf16, Epilogue::GeluBias, true},
      {128, 256, 512, DType::Bf16, DType::Bf16, DType::F32, Epilogue::None, false, true},  // y restored after trials
      {5, 17, 33, DType::E4M3, DType::E4M3, DType::F32},                                   // padded copies
  };
  for (int pass = 0; pass < 2; ++pass) {
    for (const Case& c : cases) EXPECT_LT(run_case(context, c, 12 + pass), bound(c)) << describe(c);
    EXPECT_EQ(context.cached_plans(), std::size(cases));
    EXPECT_EQ(context.autotuned_plans(), std::size(cases));  // tuned once, on the first pass
  }
}

TEST(CudaGemm, AutotuningWaitsUntilTheStreamIsNotCaptured) {
  FP8KIT_REQUIRE_GPU();
  constexpr int64_t m = 64, n = 48, k = 128;
  const Operand a = make_operand(DType::Bf16, m * k, 14), b = make_operand(DType::Bf16, n * k, 15);
  std::vector<double> ref(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) ref[i * n + j] += a.values[i * k + l] * b.values[j * k + l];
  DeviceBuffer<uint8_t> d_a(a.bytes.size()), d_b(b.bytes.size());
  DeviceBuffer<float> d_y(m * n);
  d_a.upload(a.bytes);
  d_b.upload(b.bytes);
  GemmArgs args;
  args.m = m, args.n = n, args.k = k;
  args.a = d_a.data(), args.b = d_b.data(), args.y = d_y.data(), args.y_type = DType::F32;

  GemmContext context(GemmOptions{.autotune = true});
  cudaStream_t stream = nullptr;
  FP8KIT_CUDA_CHECK(cudaStreamCreate(&stream));
  const Graph graph = Graph::capture(stream, [&] {
    context.gemm(args, stream);  // captured: the heuristic's first choice, no timing
  });
  EXPECT_EQ(context.cached_plans(), 1u);
  EXPECT_EQ(context.autotuned_plans(), 0u);
  d_y.fill_bytes(0xFF);
  graph.launch(stream);
  FP8KIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_LT(testing::relative_error(d_y.to_host(), ref), 2e-6);

  d_y.fill_bytes(0xFF);
  context.gemm(args, stream);  // not captured: tunes now
  FP8KIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_LT(testing::relative_error(d_y.to_host(), ref), 2e-6);
  EXPECT_EQ(context.cached_plans(), 1u);
  EXPECT_EQ(context.autotuned_plans(), 1u);
  cudaStreamDestroy(stream);
}

// The message of the Error `args` raises.
std::string error_of(GemmContext& context, const GemmArgs& args) {
  try {
    context.gemm(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(CudaGemm, ImpossibleGemmsAreRefusedWithReasons) {
  FP8KIT_REQUIRE_GPU();
  GemmContext context;
  DeviceBuffer<float> buf(1024);
  GemmArgs args;
  args.m = 16, args.n = 16, args.k = 16;
  args.a = args.b = args.y = buf.data();
  args.a_type = args.b_type = DType::E5M2;
  args.y_type = DType::Bf16;
  EXPECT_NE(error_of(context, args).find("E5M2 x E5M2"), std::string::npos) << error_of(context, args);
  args.a_type = DType::E4M3;
  args.m = 0;
  EXPECT_NE(error_of(context, args).find("must be positive"), std::string::npos) << error_of(context, args);
  args.m = 16;
  args.epilogue = Epilogue::Bias;
  EXPECT_NE(error_of(context, args).find("bias pointer"), std::string::npos) << error_of(context, args);
  args.epilogue = Epilogue::None;
  args.a_type = DType::Bf16;
  EXPECT_NE(error_of(context, args).find("both"), std::string::npos) << error_of(context, args);
  args.a_type = args.b_type = DType::F32;
  args.y_type = DType::Bf16;
  EXPECT_NE(error_of(context, args).find("f32 GEMMs write f32"), std::string::npos) << error_of(context, args);
  args.y_type = DType::F32;
  args.fast_accumulation = true;
  EXPECT_NE(error_of(context, args).find("fast accumulation"), std::string::npos) << error_of(context, args);
  args.fast_accumulation = false;
  args.y = nullptr;
  EXPECT_NE(error_of(context, args).find("null"), std::string::npos) << error_of(context, args);
}

}  // namespace
}  // namespace fp8kit::cuda
