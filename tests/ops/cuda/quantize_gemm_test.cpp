// quantize_fp8_gemm against its two halves: the codes, transposed codes, amax and scale_inv are
// quantize_fp8's bit for bit (with a Linear epilogue or its gradient too), and y is the FP8 GEMM of
// those codes: decoded and multiplied in double precision, within the fp32 accumulation's error
// (the tensor cores add 32 exact products per instruction with their own rounding; bound: 2^-12 of
// the sum of |products|, times alpha). Shapes: the seed model's ([6400, 32] . [32, 32], the head's
// [32, 32] . [32, 32]), ragged rows, every k and a wide n that fit; every format pair; without the
// codes' outputs; no rows.
#include "ops/cuda/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "numerics/cast.h"
#include "ops/cuda/gpu_test.h"
#include "runtime/cuda/device_buffer.h"

namespace fp8kit::cuda {
namespace {

struct Result {
  std::vector<uint8_t> q, q_t;
  std::vector<float> scalars;  // amax, scale_inv
  std::vector<float> y;
};

// x [rows, k] quantized with scale 2.5 (and w's codes multiplied when fused), on fresh buffers; with
// `codes` false, fused without the q and q_t outputs.
Result run(bool fused, const std::vector<float>& x, int64_t rows, int64_t k, Fp8Format format,
           const std::vector<uint8_t>& w, int64_t n, Fp8Format w_format, const EpilogueGradient& gradient,
           const DeviceBuffer<float>& bias, bool codes = true) {
  DeviceBuffer<float> d_x(x.size()), scalars(5), d_y(std::max<int64_t>(1, rows * n));
  DeviceBuffer<uint8_t> q(x.size()), q_t(x.size()), d_w(w.size());
  d_x.upload(x);
  d_w.upload(w);
  // scale, amax, scale_inv (written), the GEMM's scale_invs of x (1 / 2.5) and of w
  scalars.upload(std::vector<float>{2.5f, 0.0f, 0.0f, 0.4f, 0.75f});
  const bool epilogue = !gradient.active() && bias.size() > 0;
  const QuantizeArgs args{.x = d_x.data(),
                          .rows = rows,
                          .cols = k,
                          .format = format,
                          .scale = scalars.data(),
                          .q = codes ? q.data() : nullptr,
                          .q_t = codes ? q_t.data() : nullptr,
                          .amax = scalars.data() + 1,
                          .scale_inv = scalars.data() + 2,
                          .epilogue = epilogue ? LinearEpilogue{bias.data(), Activation::Relu, false} : LinearEpilogue{},
                          .gradient = gradient};
  if (fused) {
    quantize_fp8_gemm(args, d_w.data(), w_format, n, scalars.data() + 3, scalars.data() + 4, d_y.data());
  } else {
    quantize_fp8(args);
  }
  const std::vector<float> s = scalars.to_host();
  return {q.to_host(), q_t.to_host(), {s[1], s[2]}, fused ? d_y.to_host() : std::vector<float>{}};
}

TEST(CudaQuantizeGemm, CodesAreQuantizeFp8sAndYTheirProduct) {
  FP8KIT_REQUIRE_GPU();
  struct Shape {
    int64_t rows, k, n;
  };
  DeviceBuffer<uint64_t> step(1);
  step.upload(std::vector<uint64_t>{3});
  uint32_t seed = 1;
  for (const Shape& s : {Shape{6400, 32, 32}, Shape{32, 32, 32}, Shape{37, 32, 8}, Shape{1, 64, 16},
                         Shape{100, 128, 32}, Shape{65, 96, 40}, Shape{64, 32, 128}})
    // x . w: plain E4M3 x E4M3; bias + ReLU first; a gradient, E5M2 x E4M3; plain E4M3 x E5M2; a gradient
    // E5M2 x E5M2 without the codes' outputs (q, q_t: compared only with codes).
    for (int mode = 0; mode < 5; ++mode) {
      const bool gradient_mode = mode == 2 || mode == 4, codes = mode != 4;
      const Fp8Format format = gradient_mode ? Fp8Format::E5M2 : Fp8Format::E4M3;
      const Fp8Format w_format = mode >= 3 ? Fp8Format::E5M2 : Fp8Format::E4M3;
      const std::vector<float> x = testing::random_normal(s.rows * s.k, ++seed, gradient_mode ? 0.01f : 3.0f);
      std::vector<uint8_t> w(s.n * s.k);
      const std::vector<float> w_values = testing::random_normal(w.size(), ++seed, 100.0f);
      for (size_t i = 0; i < w.size(); ++i) w[i] = encode_fp8(w_values[i], w_format);
      DeviceBuffer<float> bias(mode == 1 ? s.k : 0), y_fwd(gradient_mode ? s.rows * s.k : 0);
      if (mode == 1) bias.upload(testing::random_normal(s.k, ++seed, 2.0f));
      EpilogueGradient gradient{};
      if (gradient_mode) {
        y_fwd.upload(testing::random_normal(s.rows * s.k, ++seed));
        gradient = {Activation::Relu, y_fwd.data(), {7, step.data(), 4, 0.1f, true}, false};
      }
      const std::string what = std::to_string(s.rows) + "x" + std::to_string(s.k) + " . " + std::to_string(s.n) +
                               " mode " + std::to_string(mode);
      const Result fused = run(true, x, s.rows, s.k, format, w, s.n, w_format, gradient, bias, codes);
      const Result apart = run(false, x, s.rows, s.k, format, w, s.n, w_format, gradient, bias);
      if (codes) {
        EXPECT_EQ(fused.q, apart.q) << what;
        EXPECT_EQ(fused.q_t, apart.q_t) << what;
      }
      EXPECT_EQ(fused.scalars, apart.scalars) << what;
      const double alpha = 0.4 * 0.75;  // x's scale_inv (1 / 2.5) times w's
      int bad = 0;
      for (int64_t i = 0; i < s.rows; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
          double sum = 0.0, magnitude = 0.0;
          for (int64_t p = 0; p < s.k; ++p) {
            const double product = static_cast<double>(decode_fp8(apart.q[i * s.k + p], format)) *
                                   decode_fp8(w[j * s.k + p], w_format);
            sum += product;
            magnitude += std::fabs(product);
          }
          const double got = fused.y[i * s.n + j], want = static_cast<double>(0.4f * 0.75f) * sum;
          if (std::fabs(got - want) > alpha * magnitude * 0x1p-12 + 1e-30 && ++bad <= 3)
            ADD_FAILURE() << what << ": y[" << i << ", " << j << "] = " << got << ", want " << want;
        }
      EXPECT_EQ(bad, 0) << what;
    }
}

// No rows: nothing to multiply, but scale_inv is written, as quantize_fp8 writes it.
TEST(CudaQuantizeGemm, NoRowsStillWritesScaleInv) {
  FP8KIT_REQUIRE_GPU();
  const Result r = run(true, {}, 0, 32, Fp8Format::E4M3, std::vector<uint8_t>(32 * 8, 0x38), 8, Fp8Format::E4M3, {},
                       DeviceBuffer<float>(0));
  EXPECT_EQ(r.scalars, (std::vector<float>{0.0f, 0.4f}));
}

TEST(CudaQuantizeGemm, RefusesShapesThatDoNotFit) {
  EXPECT_TRUE(quantize_fp8_gemm_fits(32, 32));
  EXPECT_TRUE(quantize_fp8_gemm_fits(128, 32));
  EXPECT_FALSE(quantize_fp8_gemm_fits(16, 32));   // k not a multiple of 32
  EXPECT_FALSE(quantize_fp8_gemm_fits(160, 8));   // k over 128
  EXPECT_FALSE(quantize_fp8_gemm_fits(32, 1));    // n not a multiple of 8
  EXPECT_FALSE(quantize_fp8_gemm_fits(128, 64));  // n k over 4096
  QuantizeArgs args;
  args.rows = 4;
  args.cols = 16;
  EXPECT_THROW(quantize_fp8_gemm(args, nullptr, Fp8Format::E4M3, 8, nullptr, nullptr, nullptr), Error);
  // The quantization's own scale_inv output is written during the launch: not the GEMM's input.
  DeviceBuffer<float> scalars(2);
  DeviceBuffer<uint8_t> w(32 * 8);
  DeviceBuffer<float> y(4 * 8);
  args.cols = 32;
  args.scale = scalars.data();
  args.scale_inv = scalars.data() + 1;
  EXPECT_THROW(quantize_fp8_gemm(args, w.data(), Fp8Format::E4M3, 8, args.scale_inv, nullptr, y.data()), Error);
}

}  // namespace
}  // namespace fp8kit::cuda
