// GPU token + position embedding against the CPU cores (ops::embedding_gather / embedding_scatter): the forward bit for bit (one
// addition, then the fused dropout against ops::dropout_forward), and the backward too (the GPU adds
// each gradient row in the CPU's order), the same bits on every run.
#include "ops/cuda/embedding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "base/error.h"
#include "ops/embedding.h"
#include "ops/cuda/gpu_test.h"
#include "ops/dropout.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/stream.h"

namespace fp8kit::cuda {
namespace {

using testing::same_bits;

TEST(CudaEmbedding, MatchesTheCpuLayerBitForBit) {
  FP8KIT_REQUIRE_GPU();
  struct Case {
    int64_t batch, seq, dim, vocabulary;
    bool boundary_runs = false;  // ids 0..5 on 32, 33, 1, 31, 65 and 38 positions (a warp's run is 32)
  };
  // The seed's shape (token 0 on ~1/8 of the positions: a run of ~800 rows); one id only (a run over
  // all rows, 40 columns: a partial second column block); runs about the length where the GPU changes
  // method; tiny ones.
  for (const Case c : {Case{32, 200, 32, 20000}, Case{4, 100, 40, 1}, Case{2, 100, 33, 6, true}, Case{3, 7, 5, 11},
                       Case{1, 1, 1, 1}, Case{2, 3, 33, 70000}}) {
    const std::vector<float> token = testing::random_normal(c.vocabulary * c.dim, 1, 0.05f),
                             position = testing::random_normal(c.seq * c.dim, 2, 0.05f);
    std::mt19937 rng(3);
    std::vector<int32_t> tokens;
    if (c.boundary_runs) {
      const int lengths[] = {32, 33, 1, 31, 65, 38};
      for (int id = 0; id < 6; ++id) tokens.insert(tokens.end(), lengths[id], id);
      std::shuffle(tokens.begin(), tokens.end(), rng);
    } else {
      tokens.resize(static_cast<size_t>(c.batch * c.seq));
      for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 8 == 0 ? 0 : rng() % c.vocabulary);  // repeats
    }
    ASSERT_EQ(static_cast<int64_t>(tokens.size()), c.batch * c.seq);
    const std::vector<float> dout = testing::random_normal(static_cast<size_t>(c.batch * c.seq * c.dim), 4);
    const EmbeddingShape shape{c.batch, c.seq, c.dim, c.vocabulary};
    DeviceBuffer<int32_t> d_tokens(tokens.size());
    DeviceBuffer<float> d_token(token.size()), d_position(position.size()), d_out(dout.size()), d_dout(dout.size()),
        d_tg(token.size()), d_pg(position.size());
    DeviceBuffer<uint8_t> workspace(embedding_backward_workspace(shape));
    d_tokens.upload(tokens);
    d_token.upload(token);
    d_position.upload(position);
    d_dout.upload(dout);
    DeviceBuffer<uint64_t> d_step(1);
    d_step.upload(std::vector<uint64_t>{6});
    for (bool bf16 : {false, true})
      for (bool dropout : {false, true}) {  // the forward with the embedding dropout fused (ops::dropout_forward)
        std::vector<float> want(dout.size());
        ops::embedding_gather(tokens, c.seq, c.dim, token, position, bf16, want);
        if (dropout) ops::dropout_forward(ops::DropoutMask(9, 6, 0, 0.1f), 0.1f, bf16, want, want);
        const DropoutSite site{9, d_step.data(), 0, 0.1f, dropout};
        embedding_forward(shape, d_tokens.data(), d_token.data(), d_position.data(), bf16, site, d_out.data(),
                          nullptr);
        EXPECT_EQ(testing::max_ulp_difference(d_out.to_host(), want), 0)
            << "bf16 " << bf16 << " dropout " << dropout << " batch " << c.batch;
      }
    std::vector<float> token_grad(token.size()), position_grad(position.size());
    ops::embedding_scatter(tokens, c.seq, c.dim, dout, token_grad, position_grad);
    std::vector<float> first_tg, first_pg;
    Stream sort_stream, sums_stream;
    const Event sorted;
    for (int run = 0; run < 3; ++run) {
      d_tg.fill_bytes(0x7F);  // poisoned: the backward must overwrite every element
      d_pg.fill_bytes(0x7F);
      if (run < 2) {
        embedding_backward(shape, d_tokens.data(), d_dout.data(), d_tg.data(), d_pg.data(), workspace.data(),
                           workspace.size(), nullptr);
      } else {  // the two halves on two streams, ordered by an event (as the seed model runs them)
        FP8KIT_CUDA_CHECK(cudaDeviceSynchronize());
        embedding_backward_sort(shape, d_tokens.data(), d_tg.data(), workspace.data(), workspace.size(),
                                sort_stream.get());
        FP8KIT_CUDA_CHECK(cudaEventRecord(sorted.get(), sort_stream.get()));
        FP8KIT_CUDA_CHECK(cudaStreamWaitEvent(sums_stream.get(), sorted.get(), 0));
        embedding_backward_sums(shape, d_dout.data(), d_tg.data(), d_pg.data(), workspace.data(), workspace.size(),
                                sums_stream.get());
        sums_stream.synchronize();
      }
      const std::vector<float> tg = d_tg.to_host(), pg = d_pg.to_host();
      EXPECT_EQ(testing::max_ulp_difference(tg, token_grad), 0) << c.batch << "x" << c.seq << " run " << run;
      EXPECT_EQ(testing::max_ulp_difference(pg, position_grad), 0) << c.batch << "x" << c.seq << " run " << run;
      if (run == 0) {
        first_tg = tg;
        first_pg = pg;
      } else {
        EXPECT_TRUE(same_bits(tg, first_tg) && same_bits(pg, first_pg)) << "two runs differ (run " << run << ")";
      }
    }
  }
}

TEST(CudaEmbedding, RejectsASmallWorkspace) {
  FP8KIT_REQUIRE_GPU();
  const EmbeddingShape shape{2, 3, 4, 10};
  const size_t bytes = embedding_backward_workspace(shape);
  DeviceBuffer<uint8_t> workspace(bytes);
  DeviceBuffer<int32_t> tokens(6);
  DeviceBuffer<float> dout(24), tg(40), pg(12);
  EXPECT_THROW(embedding_backward(shape, tokens.data(), dout.data(), tg.data(), pg.data(), workspace.data(), bytes - 1,
                                  nullptr),
               Error);
}

}  // namespace
}  // namespace fp8kit::cuda
