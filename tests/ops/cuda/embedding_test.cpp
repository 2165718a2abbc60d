// GPU token + position embedding against nn::TokenAndPositionEmbedding: forward bit for bit (one
// addition), backward within float atomics' reordering.
#include "ops/cuda/embedding.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "nn/embedding.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/gpu_test.h"

namespace fp8kit::cuda {
namespace {

TEST(CudaEmbedding, MatchesTheCpuLayer) {
  FP8KIT_REQUIRE_GPU();
  struct Case {
    int64_t batch, seq, dim, vocabulary;
  };
  for (const Case c : {Case{32, 200, 32, 20000}, Case{3, 7, 5, 11}, Case{1, 1, 1, 1}}) {
    nn::TokenAndPositionEmbedding layer("e", c.vocabulary, c.seq, c.dim);
    layer.token.value = testing::random_normal(layer.token.value.size(), 1, 0.05f);
    layer.position.value = testing::random_normal(layer.position.value.size(), 2, 0.05f);
    std::mt19937 rng(3);
    std::vector<int32_t> tokens(static_cast<size_t>(c.batch * c.seq));
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 8 == 0 ? 0 : rng() % c.vocabulary);  // repeats
    const std::vector<float> dout = testing::random_normal(static_cast<size_t>(c.batch * c.seq * c.dim), 4);
    DeviceBuffer<int32_t> d_tokens(tokens.size());
    DeviceBuffer<float> d_token(layer.token.value.size()), d_position(layer.position.value.size()),
        d_out(dout.size()), d_dout(dout.size()), d_tg(layer.token.value.size()), d_pg(layer.position.value.size());
    d_tokens.upload(tokens);
    d_token.upload(layer.token.value);
    d_position.upload(layer.position.value);
    d_dout.upload(dout);
    d_tg.fill_bytes(0x7F);  // poisoned: the backward must overwrite every element
    const EmbeddingShape shape{c.batch, c.seq, c.dim, c.vocabulary};
    for (bool bf16 : {false, true}) {
      const auto want = layer.forward(tokens, c.batch, bf16);
      embedding_forward(shape, d_tokens.data(), d_token.data(), d_position.data(), bf16, d_out.data(), nullptr);
      EXPECT_EQ(testing::max_ulp_difference(d_out.to_host(), std::vector<float>(want.begin(), want.end())), 0)
          << "bf16 " << bf16 << " batch " << c.batch;
    }
    layer.backward(dout);
    embedding_backward(shape, d_tokens.data(), d_dout.data(), d_tg.data(), d_pg.data(), nullptr);
    EXPECT_LT(testing::relative_l2(d_tg.to_host(), layer.token.grad), 1e-6);
    EXPECT_LT(testing::relative_l2(d_pg.to_host(), layer.position.grad), 1e-6);
  }
}

}  // namespace
}  // namespace fp8kit::cuda
