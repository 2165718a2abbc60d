// GPU FP8 quantization (cast + transpose + amax) against the CPU's scalar casts, bit for bit: random
// and special inputs, fp32 and bf16, both formats, TE (multiply) and Keras (divide) scales, awkward
// shapes and misaligned pointers, and every one of the 2^32 float32 bit patterns.
#include "ops/cuda/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "numerics/cast.h"
#include "ops/cuda/gpu_test.h"
#include "ops/dropout.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/stream.h"

namespace fp8kit::cuda {
namespace {

using testing::awkward_floats;
using testing::reference_amax;

struct Expected {
  std::vector<uint8_t> q, q_t;
  float amax;
};

// The CPU reference: encode_fp8(x * scale) (or x / m), saturating, plus the transpose and amax.
Expected expect(const std::vector<float>& x, int64_t rows, int64_t cols, float scale, bool divide, Fp8Format format) {
  Expected e{std::vector<uint8_t>(x.size()), std::vector<uint8_t>(x.size()), reference_amax(x)};
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = x[r * cols + c];
      const uint8_t code = encode_fp8(divide ? v / scale : v * scale, format, Overflow::Saturate);
      e.q[r * cols + c] = code;
      e.q_t[c * rows + r] = code;
    }
  }
  return e;
}

// Counts mismatches and reports the first few (a bare EXPECT per element would flood the log).
template <typename In>
void expect_codes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, const std::vector<In>& input,
                  const std::string& what, bool transposed, int64_t rows, int64_t cols) {
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (++bad <= 5) {
      const size_t src = transposed ? (i % rows) * cols + i / rows : i;
      ADD_FAILURE() << what << ": element " << i << " input bits 0x" << std::hex
                    << static_cast<uint32_t>(std::bit_cast<std::conditional_t<sizeof(In) == 4, uint32_t, uint16_t>>(input[src]))
                    << " gpu 0x" << int(got[i]) << " cpu 0x" << int(want[i]) << std::dec;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " mismatches";
}

struct GpuResult {
  std::vector<uint8_t> q, q_t;
  float amax, scale_inv;
};

// Runs quantize_fp8 on x placed `offset` elements into its device buffer (to test misaligned rows).
template <typename In>
GpuResult run_gpu(const std::vector<In>& x, int64_t rows, int64_t cols, float scale, bool divide, Fp8Format format,
            size_t offset = 0, cudaStream_t stream = nullptr, bool transposed = true) {
  std::vector<In> padded(x.size() + offset);
  std::copy(x.begin(), x.end(), padded.begin() + offset);
  DeviceBuffer<In> d_x(padded.size());
  d_x.upload(padded);
  DeviceBuffer<uint8_t> q(x.size() + 1), q_t(x.size() + 16);
  q.fill_bytes(0xA5);
  q_t.fill_bytes(0xA5);
  DeviceBuffer<float> scalars(3);  // scale, amax, scale_inv
  const std::vector<float> init = {scale, 0.0f, -1.0f};
  scalars.upload(init);
  const QuantizeArgs args{.x = d_x.data() + offset,
                          .x_type = sizeof(In) == 4 ? DType::F32 : DType::Bf16,
                          .rows = rows,
                          .cols = cols,
                          .format = format,
                          .scale = scalars.data(),
                          .divide = divide,
                          .q = q.data() + offset % 2,  // odd offsets also misalign the outputs
                          .q_t = transposed ? q_t.data() + offset : nullptr,
                          .amax = scalars.data() + 1,
                          .scale_inv = scalars.data() + 2};
  quantize_fp8(args, stream);
  FP8KIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<uint8_t> all_q = q.to_host(), all_q_t = q_t.to_host();
  const std::vector<float> out = scalars.to_host();
  return {std::vector<uint8_t>(all_q.begin() + offset % 2, all_q.begin() + offset % 2 + x.size()),
          std::vector<uint8_t>(all_q_t.begin() + offset, all_q_t.begin() + offset + x.size()), out[1], out[2]};
}

void check_f32(int64_t rows, int64_t cols, float scale, bool divide, Fp8Format format, uint32_t seed, size_t offset = 0) {
  const std::vector<float> x = awkward_floats(rows * cols, seed);
  const Expected want = expect(x, rows, cols, scale, divide, format);
  const GpuResult got = run_gpu(x, rows, cols, scale, divide, format, offset);
  const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " f32 -> " + std::string(name(format)) +
                           (divide ? " / " : " * ") + std::to_string(scale) + " offset " + std::to_string(offset);
  expect_codes(got.q, want.q, x, what, false, rows, cols);
  expect_codes(got.q_t, want.q_t, x, what + " (transposed)", true, rows, cols);
  EXPECT_EQ(std::bit_cast<uint32_t>(got.amax), std::bit_cast<uint32_t>(want.amax)) << what;
  EXPECT_EQ(got.scale_inv, divide ? scale : 1.0f / scale) << what;
}

const int64_t kShapes[][2] = {{1, 16}, {5, 160}, {217, 256}, {1, 1}, {5, 17}, {33, 1}, {130, 70}, {128, 64},
                              {256, 4096}, {600, 200}};

TEST(CudaQuantize, F32MatchesCpuOnAwkwardShapes) {
  FP8KIT_REQUIRE_GPU();
  uint32_t seed = 1;
  for (const auto& shape : kShapes)
    for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2})
      for (float scale : {1.0f, 0.37f, 1024.0f, 3e-5f}) check_f32(shape[0], shape[1], scale, false, format, seed++);
}

TEST(CudaQuantize, KerasDivideMatchesCpu) {
  FP8KIT_REQUIRE_GPU();
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (float multiplier : {0.37f, 3.0f, 1.0f / 448.0f}) check_f32(217, 256, multiplier, true, format, 99);
}

TEST(CudaQuantize, MisalignedRowsTakeTheScalarPath) {
  FP8KIT_REQUIRE_GPU();
  check_f32(64, 128, 0.5f, false, Fp8Format::E4M3, 7, 1);   // x 4 bytes off, q 1 byte off
  check_f32(37, 96, 2.0f, false, Fp8Format::E5M2, 8, 3);
}


// awkward_floats as In (f32, or bf16 bits), and the values the cast reads from them.
template <typename In>
struct Inputs {
  std::vector<In> x;
  std::vector<float> values;
};
template <typename In>
Inputs<In> inputs_of(int64_t count, uint32_t seed) {
  Inputs<In> in{{}, awkward_floats(count, seed)};
  if constexpr (sizeof(In) == 4) {
    in.x = in.values;
  } else {
    in.x.resize(in.values.size());
    for (size_t i = 0; i < in.x.size(); ++i) in.x[i] = float_to_bf16(in.values[i]), in.values[i] = bf16_to_float(in.x[i]);
  }
  return in;
}

void check_bf16(int64_t rows, int64_t cols, uint32_t seed) {
  const auto [x, as_float] = inputs_of<uint16_t>(rows * cols, seed);
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const Expected want = expect(as_float, rows, cols, 0.75f, false, format);
    const GpuResult got = run_gpu(x, rows, cols, 0.75f, false, format);
    const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " bf16 -> " + std::string(name(format));
    expect_codes(got.q, want.q, x, what, false, rows, cols);
    expect_codes(got.q_t, want.q_t, x, what + " (transposed)", true, rows, cols);
    EXPECT_EQ(std::bit_cast<uint32_t>(got.amax), std::bit_cast<uint32_t>(want.amax)) << what;
  }
}

TEST(CudaQuantize, Bf16MatchesCpu) {
  FP8KIT_REQUIRE_GPU();
  for (const auto& shape : kShapes) check_bf16(shape[0], shape[1], 5);
}

TEST(CudaQuantize, LargeTensor) {
  FP8KIT_REQUIRE_GPU();
  check_f32(16384, 4096, 0.25f, false, Fp8Format::E4M3, 11);
  check_bf16(16384, 4096, 12);
}

// Large tensors cast without a transposed copy (inference's activations, FP8 attention's q, k and v)
// take the flat kernel: whole 16-byte loads, and a partial last one where the element count is not a
// multiple of 8; a misaligned x takes the tile. The same bytes as the CPU either way.
template <typename In>
void check_straight(int64_t rows, int64_t cols, float scale, bool divide, Fp8Format format, uint32_t seed,
                    size_t offset) {
  const auto [x, values] = inputs_of<In>(rows * cols, seed);
  const Expected want = expect(values, rows, cols, scale, divide, format);
  const GpuResult got = run_gpu(x, rows, cols, scale, divide, format, offset, nullptr, false);
  const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + (sizeof(In) == 4 ? " f32" : " bf16") +
                           " -> " + std::string(name(format)) + (divide ? " / " : " * ") + std::to_string(scale) +
                           " offset " + std::to_string(offset) + ", no transpose";
  expect_codes(got.q, want.q, x, what, false, rows, cols);
  EXPECT_EQ(std::bit_cast<uint32_t>(got.amax), std::bit_cast<uint32_t>(want.amax)) << what;
  EXPECT_EQ(got.scale_inv, divide ? scale : 1.0f / scale) << what;
}

TEST(CudaQuantize, StraightCastsOfLargeTensors) {
  FP8KIT_REQUIRE_GPU();
  uint32_t seed = 40;
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{16384, 768}, {1031, 1019}, {(1 << 20) + 5, 1}}) {
    for (const size_t offset : {size_t{0}, size_t{1}}) {
      check_straight<float>(rows, cols, 0.37f, false, Fp8Format::E4M3, ++seed, offset);
      check_straight<uint16_t>(rows, cols, 3.0f, true, Fp8Format::E5M2, ++seed, offset);
    }
  }
}

// Batches of straight casts take the flat kernel too: two members reading one x take turns block by
// block (interleaved; one of them an amax-only pass without codes), members of different sizes (a
// partial last load) follow one another.
TEST(CudaQuantize, StraightBatchesOfLargeTensors) {
  FP8KIT_REQUIRE_GPU();
  const int64_t sizes[2] = {int64_t{1} << 21, (int64_t{1} << 20) + 13};
  std::vector<float> x[2];
  DeviceBuffer<float> d_x0(sizes[0]), d_x1(sizes[1]), scalars(8);
  DeviceBuffer<uint8_t> q0(sizes[0]), q1(sizes[1]);
  const float* d_x[2] = {d_x0.data(), d_x1.data()};
  for (int i = 0; i < 2; ++i) x[i] = awkward_floats(sizes[i], 60 + i);
  d_x0.upload(x[0]);
  d_x1.upload(x[1]);
  for (const bool interleaved : {true, false}) {
    scalars.upload(std::vector<float>{0.5f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f});  // scale, then amaxes
    q0.fill_bytes(0xA5);
    q1.fill_bytes(0xA5);
    QuantizeArgs args[2];
    for (int t = 0; t < 2; ++t) {
      const int src = interleaved ? 0 : t;
      args[t] = {.x = d_x[src], .x_type = DType::F32, .rows = sizes[src], .cols = 1, .format = Fp8Format::E4M3,
                 .scale = scalars.data(), .q = t == 0 ? q0.data() : interleaved ? nullptr : q1.data(),
                 .amax = scalars.data() + 2 + t, .scale_inv = scalars.data() + 4 + t};
    }
    quantize_fp8_batch(args);
    FP8KIT_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> out = scalars.to_host();
    for (int t = 0; t < 2; ++t) {
      const int src = interleaved ? 0 : t;
      const std::string what = std::string(interleaved ? "interleaved" : "in turn") + " member " + std::to_string(t);
      const Expected want = expect(x[src], sizes[src], 1, 0.5f, false, Fp8Format::E4M3);
      EXPECT_EQ(std::bit_cast<uint32_t>(out[2 + t]), std::bit_cast<uint32_t>(want.amax)) << what;
      EXPECT_EQ(out[4 + t], 2.0f) << what;
      if (args[t].q != nullptr) expect_codes((t == 0 ? q0 : q1).to_host(), want.q, x[src], what, false, sizes[src], 1);
    }
    if (interleaved) {  // the amax-only member wrote no codes
      const std::vector<uint8_t> untouched = q1.to_host();
      EXPECT_EQ(std::count(untouched.begin(), untouched.end(), uint8_t{0xA5}), sizes[1]);
    }
  }
}

TEST(CudaQuantize, EveryBf16PatternEveryScale) {
  FP8KIT_REQUIRE_GPU();
  std::vector<uint16_t> x(65536);
  std::vector<float> as_float(x.size());
  for (uint32_t i = 0; i < 65536; ++i) x[i] = static_cast<uint16_t>(i), as_float[i] = bf16_to_float(x[i]);
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (float scale : {1.0f, 0.001f, 300.0f}) {
      const Expected want = expect(as_float, 256, 256, scale, false, format);
      const GpuResult got = run_gpu(x, 256, 256, scale, false, format);
      expect_codes(got.q, want.q, x, "all bf16 * " + std::to_string(scale), false, 256, 256);
    }
}

TEST(CudaQuantize, OutputsAreOptionalAndAmaxAccumulates) {
  FP8KIT_REQUIRE_GPU();
  const std::vector<float> x = {1.0f, -3.0f, 2.0f, 0.5f};
  DeviceBuffer<float> d_x(4), scalars(2);
  d_x.upload(x);
  const std::vector<float> init = {1.0f, 5.0f};  // amax starts above this tensor's 3
  scalars.upload(init);
  QuantizeArgs args;
  args.x = d_x.data();
  args.rows = 2;
  args.cols = 2;
  args.scale = scalars.data();
  args.amax = scalars.data() + 1;
  quantize_fp8(args);
  EXPECT_EQ(scalars.to_host()[1], 5.0f);
}

TEST(CudaQuantize, RunsOnAStream) {
  FP8KIT_REQUIRE_GPU();
  Stream stream;
  const std::vector<float> x = awkward_floats(300 * 200, 3);
  const Expected want = expect(x, 300, 200, 2.0f, false, Fp8Format::E4M3);
  const GpuResult got = run_gpu(x, 300, 200, 2.0f, false, Fp8Format::E4M3, 0, stream.get());
  EXPECT_EQ(got.q, want.q);
  EXPECT_EQ(got.q_t, want.q_t);
}

// A producing Linear's epilogue fused into the quantization: the codes, transposed codes and amax are
// those of act(x + bias) under nn::Linear's rules, which is also written to epilogue.y (separately
// and in place); one tensor alone and two in one quantize_fp8_batch launch; padding outside the
// matrix does not reach the amax.
TEST(CudaQuantize, LinearEpilogueBeforeTheCast) {
  FP8KIT_REQUIRE_GPU();
  const int64_t shapes[][2] = {{6400, 32}, {5, 17}, {33, 1}, {217, 256}};
  uint32_t seed = 50;
  for (const auto& shape : shapes)
    for (bool relu : {false, true})
      for (bool bf16 : {false, true})
        for (bool in_place : {false, true}) {
          const int64_t rows = shape[0], cols = shape[1];
          const std::vector<float> x = testing::random_normal(rows * cols, ++seed, 3.0f),
                                   bias = testing::random_normal(cols, ++seed, 50.0f);
          std::vector<float> v(x.size());
          for (size_t i = 0; i < x.size(); ++i) {
            const float b = bias[i % cols];
            const float a = bf16 ? fp8kit::round_bf16(fp8kit::round_bf16(x[i]) + fp8kit::round_bf16(b)) : x[i] + b;
            v[i] = relu ? std::max(a, 0.0f) : a;
          }
          const float scale = 2.5f;
          const Expected want = expect(v, rows, cols, scale, false, Fp8Format::E4M3);
          for (bool batched : {false, true}) {
            DeviceBuffer<float> d_x(x.size()), d_y(x.size()), d_bias(cols), scalars(2);
            d_x.upload(x);
            d_bias.upload(bias);
            scalars.upload(std::vector<float>{scale, 0.0f});
            DeviceBuffer<uint8_t> q(x.size()), q_t(x.size());
            const QuantizeArgs args{.x = d_x.data(),
                                    .rows = rows,
                                    .cols = cols,
                                    .scale = scalars.data(),
                                    .q = q.data(),
                                    .q_t = q_t.data(),
                                    .amax = scalars.data() + 1,
                                    .epilogue = {d_bias.data(), (relu ? Activation::Relu : Activation::None), bf16, in_place ? d_x.data() : d_y.data()}};
            if (batched) {
              // A plain tensor first, so the epilogue's tensor is not block 0 of the launch.
              DeviceBuffer<float> other(64 * 64), other_scalars(2);
              other.upload(testing::random_normal(64 * 64, 7));
              other_scalars.upload(std::vector<float>{1.0f, 0.0f});
              DeviceBuffer<uint8_t> other_q(64 * 64);
              const QuantizeArgs plain{.x = other.data(),
                                       .rows = 64,
                                       .cols = 64,
                                       .scale = other_scalars.data(),
                                       .q = other_q.data(),
                                       .amax = other_scalars.data() + 1};
              const QuantizeArgs both[] = {plain, args};
              quantize_fp8_batch(both);
            } else {
              quantize_fp8(args);
            }
            const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " relu " +
                                     std::to_string(relu) + " bf16 " + std::to_string(bf16) + " in place " +
                                     std::to_string(in_place) + " batched " + std::to_string(batched);
            expect_codes(q.to_host(), want.q, v, what, false, rows, cols);
            expect_codes(q_t.to_host(), want.q_t, v, what + " (transposed)", true, rows, cols);
            EXPECT_EQ(std::bit_cast<uint32_t>(scalars.to_host()[1]), std::bit_cast<uint32_t>(want.amax)) << what;
            EXPECT_EQ(testing::max_ulp_difference((in_place ? d_x : d_y).to_host(), v), 0) << what;
          }
        }
}

// A Linear's output gradient quantized with the backward of its epilogue applied as it is loaded:
// codes, transposed codes and amax of g = ReLU mask(ops::dropout_backward(dy)), as nn::Linear's
// backward quantizes its gradient; alone and batched.
TEST(CudaQuantize, EpilogueGradientBeforeTheCast) {
  FP8KIT_REQUIRE_GPU();
  DeviceBuffer<uint64_t> d_step(1);
  d_step.upload(std::vector<uint64_t>{8});
  uint32_t seed = 70;
  for (const auto& shape : {std::pair<int64_t, int64_t>{6400, 32}, {5, 17}, {32, 1}})
    for (bool relu : {false, true})
      for (bool dropout : {false, true}) {
        const auto [rows, cols] = shape;
        const std::vector<float> dy = testing::random_normal(rows * cols, ++seed, 0.01f),
                                 y = testing::random_normal(rows * cols, ++seed);
        std::vector<float> g = dy;
        if (dropout) ops::dropout_backward(ops::DropoutMask(4, 8, 1, 0.1f), 0.1f, true, dy, g);
        for (int64_t i = 0; i < rows * cols; ++i)
          if (relu && !(y[i] > 0.0f)) g[i] = 0.0f;
        const float scale = 3000.0f;
        const Expected want = expect(g, rows, cols, scale, false, Fp8Format::E5M2);
        for (bool batched : {false, true}) {
          DeviceBuffer<float> d_dy(dy.size()), d_y(y.size()), scalars(2);
          d_dy.upload(dy);
          d_y.upload(y);
          scalars.upload(std::vector<float>{scale, 0.0f});
          DeviceBuffer<uint8_t> q(dy.size()), q_t(dy.size());
          const QuantizeArgs args{.x = d_dy.data(),
                                  .rows = rows,
                                  .cols = cols,
                                  .format = Fp8Format::E5M2,
                                  .scale = scalars.data(),
                                  .q = q.data(),
                                  .q_t = q_t.data(),
                                  .amax = scalars.data() + 1,
                                  .gradient = {(relu ? Activation::Relu : Activation::None), d_y.data(), {4, d_step.data(), 1, 0.1f, dropout}, true}};
          if (batched) {
            const QuantizeArgs both[] = {args, args};  // the same tensor twice: the same outputs
            quantize_fp8_batch(both);
          } else {
            quantize_fp8(args);
          }
          const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " relu " +
                                   std::to_string(relu) + " dropout " + std::to_string(dropout) + " batched " +
                                   std::to_string(batched);
          expect_codes(q.to_host(), want.q, g, what, false, rows, cols);
          expect_codes(q_t.to_host(), want.q_t, g, what + " (transposed)", true, rows, cols);
          EXPECT_EQ(std::bit_cast<uint32_t>(scalars.to_host()[1]), std::bit_cast<uint32_t>(want.amax)) << what;
        }
      }
}

TEST(CudaQuantize, BadArgumentsAreNamed) {
  FP8KIT_REQUIRE_GPU();
  DeviceBuffer<float> buf(4);
  QuantizeArgs args;
  args.x = buf.data();
  args.rows = 2;
  args.cols = 2;
  EXPECT_THROW(
      {
        try {
          quantize_fp8(args);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("scale is null"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  args.scale = buf.data();
  args.scale_inv = buf.data();
  EXPECT_THROW(quantize_fp8(args), Error);
  args.scale_inv = nullptr;
  args.x_type = DType::E4M3;
  EXPECT_THROW(quantize_fp8(args), Error);
  args.x_type = DType::F32;
  args.rows = -1;
  EXPECT_THROW(quantize_fp8(args), Error);
}

// Every float32 bit pattern, scale 1, both formats, against encode_fp8 on the CPU; chunked 2^26 at a
// time. Also checks each chunk's amax.
TEST(CudaQuantize, EveryFloat32BitPattern) {
  FP8KIT_REQUIRE_GPU();
  constexpr int64_t kRows = 8192, kCols = 8192, kChunk = kRows * kCols;
  std::vector<uint32_t> bits(kChunk);
  std::vector<uint8_t> q(kChunk);
  DeviceBuffer<uint32_t> d_x(kChunk);
  DeviceBuffer<uint8_t> d_q(kChunk);
  DeviceBuffer<float> scalars(2);
  const std::vector<float> init = {1.0f, 0.0f};
  size_t bad = 0;
  for (uint64_t base = 0; base < (uint64_t{1} << 32); base += kChunk) {
#pragma omp parallel for
    for (int64_t i = 0; i < kChunk; ++i) bits[i] = static_cast<uint32_t>(base + i);
    d_x.upload(bits);
    for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
      scalars.upload(init);
      const QuantizeArgs args{.x = d_x.data(),
                              .rows = kRows,
                              .cols = kCols,
                              .format = format,
                              .scale = scalars.data(),
                              .q = d_q.data(),
                              .amax = scalars.data() + 1};
      quantize_fp8(args);
      d_q.download(q);
      size_t chunk_bad = 0;
      float amax = 0.0f;
#pragma omp parallel for reduction(+ : chunk_bad) reduction(max : amax)
      for (int64_t i = 0; i < kChunk; ++i) {
        const float x = std::bit_cast<float>(bits[i]);
        if (q[i] != encode_fp8(x, format, Overflow::Saturate)) ++chunk_bad;
        if (!std::isnan(x)) amax = std::max(amax, std::fabs(x));
      }
      if (chunk_bad > 0 && bad == 0) {
        for (int64_t i = 0; i < kChunk; ++i) {
          const float x = std::bit_cast<float>(bits[i]);
          if (q[i] != encode_fp8(x, format, Overflow::Saturate)) {
            ADD_FAILURE() << name(format) << ": first mismatch at bits 0x" << std::hex << bits[i] << " gpu 0x"
                          << int(q[i]) << " cpu 0x" << int(encode_fp8(x, format, Overflow::Saturate)) << std::dec;
            break;
          }
        }
      }
      bad += chunk_bad;
      EXPECT_EQ(std::bit_cast<uint32_t>(scalars.to_host()[1]), std::bit_cast<uint32_t>(amax))
          << name(format) << " chunk at 0x" << std::hex << base;
    }
  }
  EXPECT_EQ(bad, 0u) << "float32 bit patterns cast differently on the GPU";
}

}  // namespace
}  // namespace fp8kit::cuda
