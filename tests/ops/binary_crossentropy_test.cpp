// Sigmoid + binary cross-entropy: the CPU cores' values (Keras's clip, JAX's gradient through it) and
// gradient by finite differences; the op on Tensors: the bits of the seed model's CPU path (the cores,
// which nn::sigmoid, nn::binary_crossentropy and nn::binary_crossentropy_sigmoid_backward name) for z
// [batch] and [batch, 1], f32 and bf16, saturated logits, batch 1; evaluation (no labels) writes probs
// only; argument errors.
#include "ops/binary_crossentropy.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "cpu_op_test.h"
#include "ops/cpu/binary_crossentropy.h"
#include "ops/context.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace fp8kit::ops {
namespace {

TEST(BinaryCrossentropy, ClipsProbabilitiesLikeKeras) {
  const std::vector<float> p = {0.9f, 0.2f, 1.0f, 0.0f}, y = {1, 0, 1, 1};
  const double expected =
      (-std::log(0.9f) - std::log(0.8f) - std::log(1.0f - 1e-7f) - std::log(1e-7f)) / 4.0;
  EXPECT_NEAR(cpu::binary_crossentropy(p, y), expected, 1e-5);
  std::vector<float> dz(4);
  cpu::binary_crossentropy_sigmoid_backward(p, y, dz);
  EXPECT_NEAR(dz[0], (0.9f - 1.0f) / 4.0f, 1e-7);  // inside the clip: (p - y) / batch
  EXPECT_NEAR(dz[1], 0.2f / 4.0f, 1e-7);
  EXPECT_EQ(dz[2], 0.0f);  // clipped (a bf16 sigmoid rounds to 1.0): no gradient
  EXPECT_EQ(dz[3], 0.0f);
}

TEST(BinaryCrossentropy, GradientMatchesFiniteDifferencesThroughSigmoid) {
  auto z = testing::random_vector(8, 4, -3, 3);
  const std::vector<float> y = {1, 0, 1, 0, 0, 1, 1, 0};
  std::vector<float> p(8), dz(8);
  auto loss = [&] {
    cpu::sigmoid(z, false, p);
    return static_cast<double>(cpu::binary_crossentropy(p, y));
  };
  loss();
  cpu::binary_crossentropy_sigmoid_backward(p, y, dz);
  testing::expect_gradient_close(z, dz, loss, 1e-2, 1e-4, 1e-2, "dz");
}

TEST(SigmoidBinaryCrossentropyOp, MatchesTheModelsPathBitForBit) {
  for (const int64_t batch : {1, 37}) {
    std::vector<float> z = testing::random_vector(batch, 1, -6, 6), labels(batch);
    for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<float>(i % 2);
    if (batch > 2) z[0] = 40.0f, z[1] = -40.0f;  // clipped on both sides
    Context c;
    for (const bool bf16 : {false, true}) {
      std::vector<float> p(batch), want_dz(batch);
      cpu::sigmoid(z, bf16, p);
      const float want_loss = cpu::binary_crossentropy(p, labels);
      cpu::binary_crossentropy_sigmoid_backward(p, labels, want_dz);
      for (const bool column : {false, true}) {
        const std::vector<int64_t> shape = column ? std::vector<int64_t>{batch, 1} : std::vector<int64_t>{batch};
        const Tensor tz = testing::host_tensor(z, shape);
        const Tensor tl = testing::host_tensor(labels, {batch});
        Tensor probs, loss, dz;
        sigmoid_binary_crossentropy(c, tz, &tl, bf16, probs, loss, dz);
        EXPECT_TRUE(testing::same_bits(probs.span<float>(), p)) << "batch " << batch << " bf16 " << bf16;
        ASSERT_EQ(loss.shape(), std::vector<int64_t>{1});
        EXPECT_TRUE(testing::same_bits(loss.span<float>(), std::vector<float>{want_loss}));
        EXPECT_EQ(dz.shape(), tz.shape());
        EXPECT_TRUE(testing::same_bits(dz.span<float>(), want_dz)) << "batch " << batch << " bf16 " << bf16;

        Tensor eval_probs, untouched_loss, untouched_dz;
        sigmoid_binary_crossentropy(c, tz, nullptr, bf16, eval_probs, untouched_loss, untouched_dz);
        EXPECT_TRUE(testing::same_bits(eval_probs.span<float>(), p));
        EXPECT_EQ(untouched_loss.numel(), 0);
        EXPECT_EQ(untouched_dz.numel(), 0);
      }
    }
  }
}

TEST(SigmoidBinaryCrossentropyOp, ErrorsNameTheOpAndTheTensor) {
  Context c;
  const Tensor z({4, 2}, DType::F32), z4({4}, DType::F32), empty({0}, DType::F32), labels({3}, DType::F32);
  Tensor probs, loss, dz;
  EXPECT_EQ(testing::error_of([&] { sigmoid_binary_crossentropy(c, z, nullptr, false, probs, loss, dz); }),
            "sigmoid_binary_crossentropy: z must be [batch] or [batch, 1] with batch >= 1, got [4, 2]");
  EXPECT_EQ(testing::error_of([&] { sigmoid_binary_crossentropy(c, empty, nullptr, false, probs, loss, dz); }),
            "sigmoid_binary_crossentropy: z must be [batch] or [batch, 1] with batch >= 1, got [0]");
  EXPECT_EQ(testing::error_of([&] { sigmoid_binary_crossentropy(c, z4, &labels, false, probs, loss, dz); }),
            "sigmoid_binary_crossentropy: labels must be [4], got [3]");
}

}  // namespace
}  // namespace fp8kit::ops
