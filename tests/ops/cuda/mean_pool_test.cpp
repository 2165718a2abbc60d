// GPU mean pooling and sigmoid + BCE against their CPU cores (ops/cpu/mean_pool.h and
// ops/cpu/binary_crossentropy.h). Mean pooling sums in the CPU's order: bit for bit (also with the
// dropout that follows it fused in, both ways). The sigmoid and log use CUDA's expf/logf (within 2 ulp
// of glibc's): probabilities and gradients within 1e-6 relative.
#include "ops/cuda/mean_pool.h"

#include <gtest/gtest.h>

#include <vector>

#include "numerics/cast.h"
#include "ops/cuda/binary_crossentropy.h"
#include "ops/cuda/gpu_test.h"
#include "ops/cpu/binary_crossentropy.h"
#include "ops/cpu/mean_pool.h"
#include "ops/dropout.h"
#include "runtime/cuda/device_buffer.h"

namespace fp8kit::cuda {
namespace {

TEST(CudaMeanPool, MatchesTheCpuBitForBit) {
  FP8KIT_REQUIRE_GPU();
  struct Case {
    int64_t batch, seq, dim;
  };
  for (const Case c : {Case{32, 200, 32}, Case{3, 7, 5}, Case{1, 1, 1}}) {
    const std::vector<float> x = testing::random_normal(c.batch * c.seq * c.dim, 1),
                             dout = testing::random_normal(c.batch * c.dim, 2);
    DeviceBuffer<float> d_x(x.size()), d_out(dout.size()), d_dout(dout.size()), d_dx(x.size());
    d_x.upload(x);
    d_dout.upload(dout);
    std::vector<float> out(dout.size()), dx(x.size());
    DeviceBuffer<uint64_t> d_step(1);
    d_step.upload(std::vector<uint64_t>{12});
    for (bool bf16 : {false, true})
      for (bool dropout : {false, true}) {  // with the pooled output's dropout fused: ops::dropout_forward after
        ops::cpu::mean_pool_forward(x, c.batch, c.seq, c.dim, bf16, out);
        if (dropout) ops::dropout_forward(ops::DropoutMask(3, 12, 4, 0.1f), 0.1f, bf16, out, out);
        mean_pool_forward(d_x.data(), c.batch, c.seq, c.dim, bf16, DropoutSite{3, d_step.data(), 4, 0.1f, dropout},
                          d_out.data(), nullptr);
        EXPECT_EQ(testing::max_ulp_difference(d_out.to_host(), out), 0) << "bf16 " << bf16 << " dropout " << dropout;
      }
    ops::cpu::mean_pool_backward(dout, c.batch, c.seq, c.dim, dx);
    mean_pool_backward(d_dout.data(), DropoutSite{}, false, c.batch, c.seq, c.dim, d_dx.data(), nullptr);
    EXPECT_EQ(testing::max_ulp_difference(d_dx.to_host(), dx), 0);
    // With the pooled output's dropout backward fused in: ops::dropout_backward, then the CPU's backward.
    for (bool bf16 : {false, true}) {
      std::vector<float> dropped(dout.size());
      ops::dropout_backward(ops::DropoutMask(3, 12, 4, 0.1f), 0.1f, bf16, dout, dropped);
      ops::cpu::mean_pool_backward(dropped, c.batch, c.seq, c.dim, dx);
      mean_pool_backward(d_dout.data(), DropoutSite{3, d_step.data(), 4, 0.1f, true}, bf16, c.batch, c.seq, c.dim,
                         d_dx.data(), nullptr);
      EXPECT_EQ(testing::max_ulp_difference(d_dx.to_host(), dx), 0) << "with dropout, bf16 " << bf16;
    }
  }
}

TEST(CudaBinaryCrossentropy, MatchesTheCpu) {
  FP8KIT_REQUIRE_GPU();
  for (int64_t batch : {1, 32, 1000}) {
    std::vector<float> z = testing::random_normal(batch, 5, 4.0f), labels(batch);
    for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<float>(i % 2);
    if (batch > 2) z[0] = 40.0f, z[1] = -40.0f;  // clipped on both sides
    DeviceBuffer<float> d_z(batch), d_labels(batch), d_probs(batch), d_loss(1), d_dz(batch);
    d_z.upload(z);
    d_labels.upload(labels);
    for (bool bf16 : {false, true}) {
      std::vector<float> p(batch), dz(batch);
      ops::cpu::sigmoid(z, bf16, p);
      const float loss = ops::cpu::binary_crossentropy(p, labels);
      ops::cpu::binary_crossentropy_sigmoid_backward(p, labels, dz);
      sigmoid_binary_crossentropy(d_z.data(), d_labels.data(), batch, bf16, d_probs.data(), d_loss.data(),
                                  d_dz.data(), nullptr);
      EXPECT_LT(testing::relative_l2(d_probs.to_host(), p), bf16 ? 4e-3 : 1e-6);
      EXPECT_NEAR(d_loss.to_host()[0], loss, 1e-5 * std::abs(loss) + 1e-6) << "batch " << batch;
      EXPECT_LT(testing::relative_l2(d_dz.to_host(), dz), bf16 ? 4e-3 : 1e-5);
    }
  }
}

// The logits' Linear epilogue (bias, nn::Linear's rounding) fused in: the same bits as the kernel on
// logits that had it applied, which are also written out.
TEST(CudaBinaryCrossentropy, LinearEpilogueFirst) {
  FP8KIT_REQUIRE_GPU();
  constexpr int64_t kBatch = 32;
  const std::vector<float> y = testing::random_normal(kBatch, 6, 3.0f), labels(kBatch, 1.0f), bias = {0.7f};
  DeviceBuffer<float> d_y(kBatch), d_z(kBatch), d_bias(1), d_labels(kBatch), d_out(kBatch), d_probs(kBatch),
      d_loss(1), d_dz(kBatch);
  d_y.upload(y);
  d_bias.upload(bias);
  d_labels.upload(labels);
  for (bool bf16 : {false, true}) {
    std::vector<float> z(kBatch);
    for (int64_t i = 0; i < kBatch; ++i)
      z[i] = bf16 ? fp8kit::round_bf16(fp8kit::round_bf16(y[i]) + fp8kit::round_bf16(bias[0])) : y[i] + bias[0];
    d_z.upload(z);
    sigmoid_binary_crossentropy(d_z.data(), d_labels.data(), kBatch, bf16, d_probs.data(), d_loss.data(), d_dz.data(),
                                nullptr);
    const std::vector<float> probs = d_probs.to_host(), loss = d_loss.to_host(), dz = d_dz.to_host();
    sigmoid_binary_crossentropy(d_y.data(), d_labels.data(), kBatch, bf16, d_probs.data(), d_loss.data(),
                                d_dz.data(), nullptr, {d_bias.data(), Activation::None, bf16, d_out.data()});
    EXPECT_EQ(testing::max_ulp_difference(d_out.to_host(), z), 0) << "bf16 " << bf16;
    EXPECT_EQ(testing::max_ulp_difference(d_probs.to_host(), probs), 0) << "bf16 " << bf16;
    EXPECT_EQ(testing::max_ulp_difference(d_loss.to_host(), loss), 0) << "bf16 " << bf16;
    EXPECT_EQ(testing::max_ulp_difference(d_dz.to_host(), dz), 0) << "bf16 " << bf16;
  }
}

}  // namespace
}  // namespace fp8kit::cuda
