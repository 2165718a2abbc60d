// Sigmoid + binary cross-entropy on Tensors: the bits of the seed model's CPU path (nn::sigmoid,
// nn::binary_crossentropy, nn::binary_crossentropy_sigmoid_backward) for z [batch] and [batch, 1], f32
// and bf16, saturated logits, batch 1; evaluation (no labels) writes probs only; argument errors.
#include "ops/binary_crossentropy.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "cpu_op_test.h"
#include "nn/binary_crossentropy.h"
#include "ops/context.h"

#include <gtest/gtest.h>

#include <vector>

namespace fp8kit::ops {
namespace {

TEST(SigmoidBinaryCrossentropyOp, MatchesTheModelsPathBitForBit) {
  for (const int64_t batch : {1, 37}) {
    std::vector<float> z = testing::random_vector(batch, 1, -6, 6), labels(batch);
    for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<float>(i % 2);
    if (batch > 2) z[0] = 40.0f, z[1] = -40.0f;  // clipped on both sides
    Context c;
    for (const bool bf16 : {false, true}) {
      std::vector<float> p(batch), want_dz(batch);
      nn::sigmoid(z, bf16, p);
      const float want_loss = nn::binary_crossentropy(p, labels);
      nn::binary_crossentropy_sigmoid_backward(p, labels, want_dz);
      for (const bool column : {false, true}) {
        const Tensor tz = testing::host_tensor(z, column ? std::vector<int64_t>{batch, 1} : std::vector<int64_t>{batch});
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
