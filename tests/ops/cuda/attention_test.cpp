// GPU causal attention against ops::causal_attention_forward/backward, with and without dropout on
// the probabilities (the same mask bits), float32 and bf16, the seed's shape and awkward ones (one
// row, partial tiles of rows and keys, head_dim 64 over many tiles).
// Tolerances (relative L2): the CPU's exp is a polynomial and its sums run in 8 lanes, the GPU's
// are expf and sequential, so float32 agrees to ~1e-6 (bounds 2e-5 forward, 1e-4 gradients); in
// bf16 a score or probability that lands on the other side of a rounding boundary moves by a bf16
// ulp (2^-8 relative), so bounds 1e-2.
#include "ops/cuda/attention.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "base/error.h"
#include "ops/attention.h"
#include "ops/cuda/gpu_test.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/graph.h"

namespace fp8kit::cuda {
namespace {

struct Errors {
  double out, dq, dk, dv;  // relative L2 of the GPU's against the CPU op's
};

// Forward and backward of random inputs (seeds seed .. seed + 3) through the CPU op and the GPU
// kernels, dropout (rate 0.1, when on) keyed by (dropout_seed, step, site 1).
Errors against_cpu(const ops::AttentionShape& s, uint32_t seed, uint64_t dropout_seed, uint64_t step, bool dropout,
                   bool bf16) {
  const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
  const std::vector<float> q = testing::random_normal(n, seed, 1.5f), k = testing::random_normal(n, seed + 1, 1.5f),
                           v = testing::random_normal(n, seed + 2), dout = testing::random_normal(n, seed + 3);
  DeviceBuffer<float> d_q(n), d_k(n), d_v(n), d_dout(n), d_out(n), d_dq(n), d_dk(n), d_dv(n),
      d_stats(s.batch * s.heads * s.seq * 2);
  d_q.upload(q);
  d_k.upload(k);
  d_v.upload(v);
  d_dout.upload(dout);
  DeviceBuffer<uint64_t> d_step(1);
  d_step.upload(std::vector<uint64_t>{step});
  const ops::DropoutMask mask(dropout_seed, step, 1, 0.1f);
  const DropoutSite site{dropout_seed, d_step.data(), 1, 0.1f, dropout};
  std::vector<float> probs(s.batch * s.heads * s.seq * s.seq, 0.0f), out(n), dq(n), dk(n), dv(n);
  ops::causal_attention_forward(s, q.data(), k.data(), v.data(), dropout ? &mask : nullptr, 0.1f, bf16, probs.data(),
                                out.data());
  ops::causal_attention_backward(s, q.data(), k.data(), v.data(), probs.data(), dropout ? &mask : nullptr, 0.1f, bf16,
                                 dout.data(), dq.data(), dk.data(), dv.data());
  causal_attention_forward(s, d_q.data(), d_k.data(), d_v.data(), site, bf16, d_stats.data(), d_out.data(), nullptr);
  DeviceBuffer<uint8_t> scratch(causal_attention_backward_workspace(s));
  causal_attention_backward(s, d_q.data(), d_k.data(), d_v.data(), d_stats.data(), site, bf16, d_dout.data(),
                            d_dq.data(), d_dk.data(), d_dv.data(), scratch.data(), scratch.size(), nullptr);
  return {testing::relative_l2(d_out.to_host(), out), testing::relative_l2(d_dq.to_host(), dq),
          testing::relative_l2(d_dk.to_host(), dk), testing::relative_l2(d_dv.to_host(), dv)};
}

TEST(CudaAttention, MatchesTheCpuOp) {
  FP8KIT_REQUIRE_GPU();
  for (const ops::AttentionShape s : {ops::AttentionShape{32, 200, 2, 16}, ops::AttentionShape{3, 37, 3, 32},
                                      ops::AttentionShape{2, 5, 1, 64}, ops::AttentionShape{1, 1, 1, 16},
                                      ops::AttentionShape{1, 250, 2, 64}}) {
    for (bool dropout : {false, true})
      for (bool bf16 : {false, true}) {
        const Errors e = against_cpu(s, 1, 5, 17, dropout, bf16);
        std::printf("attention %ldx%ldx%ldx%ld dropout %d bf16 %d: measured error out %.2e dq %.2e dk %.2e dv %.2e\n",
                    long(s.batch), long(s.seq), long(s.heads), long(s.head_dim), dropout, bf16, e.out, e.dq, e.dk,
                    e.dv);
        EXPECT_LT(e.out, bf16 ? 1e-2 : 2e-5);
        EXPECT_LT(e.dq, bf16 ? 1e-2 : 1e-4);
        EXPECT_LT(e.dk, bf16 ? 1e-2 : 1e-4);
        EXPECT_LT(e.dv, bf16 ? 1e-2 : 1e-4);
      }
  }
}

// 48 x 420 x 421 / 2 pairs: more than one backward launch's scratch holds, so two launches.
TEST(CudaAttention, ManyHeadsRunInSeveralBackwardLaunches) {
  FP8KIT_REQUIRE_GPU();
  const Errors e = against_cpu({48, 420, 1, 16}, 5, 9, 3, true, false);
  EXPECT_LT(e.out, 2e-5);
  EXPECT_LT(e.dq, 1e-4);
  EXPECT_LT(e.dk, 1e-4);
  EXPECT_LT(e.dv, 1e-4);
}

// The seed model captures its step into a CUDA graph, possibly with the very first attention calls
// (run this test alone to check that path): the graph's results equal the direct calls' bit for bit.
TEST(CudaAttention, CapturedInAGraphGivesTheSameBits) {
  FP8KIT_REQUIRE_GPU();
  const ops::AttentionShape s{4, 70, 2, 16};
  const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
  DeviceBuffer<float> d_q(n), d_k(n), d_v(n), d_dout(n), d_stats(s.batch * s.heads * s.seq * 2);
  d_q.upload(testing::random_normal(n, 11));
  d_k.upload(testing::random_normal(n, 12));
  d_v.upload(testing::random_normal(n, 13));
  d_dout.upload(testing::random_normal(n, 14));
  DeviceBuffer<uint64_t> d_step(1);
  d_step.upload(std::vector<uint64_t>{5});
  const DropoutSite site{3, d_step.data(), 1, 0.1f, true};
  cudaStream_t stream = nullptr;
  FP8KIT_CUDA_CHECK(cudaStreamCreate(&stream));
  // outs[0]: from the graph, outs[1]: direct calls; each out, dq, dk, dv.
  std::vector<std::vector<float>> outs[2];
  for (int direct = 0; direct < 2; ++direct) {
    DeviceBuffer<float> d_out(n), d_dq(n), d_dk(n), d_dv(n);
    DeviceBuffer<uint8_t> scratch(causal_attention_backward_workspace(s));
    const auto run = [&] {
      causal_attention_forward(s, d_q.data(), d_k.data(), d_v.data(), site, true, d_stats.data(), d_out.data(), stream);
      causal_attention_backward(s, d_q.data(), d_k.data(), d_v.data(), d_stats.data(), site, true, d_dout.data(),
                                d_dq.data(), d_dk.data(), d_dv.data(), scratch.data(), scratch.size(), stream);
    };
    if (direct) {
      run();
    } else {
      const Graph graph = Graph::capture(stream, run);
      graph.launch(stream);
      FP8KIT_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    for (DeviceBuffer<float>* b : {&d_out, &d_dq, &d_dk, &d_dv}) outs[direct].push_back(b->to_host(stream));
  }
  cudaStreamDestroy(stream);
  for (size_t i = 0; i < outs[0].size(); ++i) EXPECT_EQ(testing::max_ulp_difference(outs[0][i], outs[1][i]), 0) << i;
}

// Inputs that are not 16-byte aligned are read float by float: the same bits as aligned ones.
TEST(CudaAttention, UnalignedInputsGiveTheSameBits) {
  FP8KIT_REQUIRE_GPU();
  const ops::AttentionShape s{3, 37, 3, 32};
  const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
  DeviceBuffer<uint64_t> d_step(1);
  d_step.upload(std::vector<uint64_t>{7});
  const DropoutSite site{4, d_step.data(), 1, 0.1f, true};
  std::vector<std::vector<float>> outs[2];  // [offset in floats]: out, dq, dk, dv
  for (int offset = 0; offset < 2; ++offset) {
    // q, k, v, dout at float `offset` of their buffers.
    DeviceBuffer<float> inputs[4] = {DeviceBuffer<float>(n + 1), DeviceBuffer<float>(n + 1),
                                     DeviceBuffer<float>(n + 1), DeviceBuffer<float>(n + 1)};
    for (int t = 0; t < 4; ++t) {
      std::vector<float> host = testing::random_normal(n, 21 + t, 1.5f);
      host.insert(host.begin() + (offset == 0 ? n : 0), 0.0f);
      inputs[t].upload(host);
    }
    const float *q = inputs[0].data() + offset, *k = inputs[1].data() + offset, *v = inputs[2].data() + offset,
                *dout = inputs[3].data() + offset;
    DeviceBuffer<float> d_out(n), d_dq(n), d_dk(n), d_dv(n), d_stats(s.batch * s.heads * s.seq * 2);
    causal_attention_forward(s, q, k, v, site, false, d_stats.data(), d_out.data(), nullptr);
    DeviceBuffer<uint8_t> scratch(causal_attention_backward_workspace(s));
    causal_attention_backward(s, q, k, v, d_stats.data(), site, false, dout, d_dq.data(), d_dk.data(), d_dv.data(),
                              scratch.data(), scratch.size(), nullptr);
    for (DeviceBuffer<float>* b : {&d_out, &d_dq, &d_dk, &d_dv}) outs[offset].push_back(b->to_host());
  }
  for (size_t i = 0; i < outs[0].size(); ++i) EXPECT_EQ(testing::max_ulp_difference(outs[0][i], outs[1][i]), 0) << i;
}

TEST(CudaAttention, RejectsUnsupportedShapes) {
  FP8KIT_REQUIRE_GPU();
  EXPECT_THROW(causal_attention_forward({1, 8, 1, 24}, nullptr, nullptr, nullptr, {}, false, nullptr, nullptr, nullptr),
               Error);
  EXPECT_THROW(causal_attention_forward({1, 2000, 1, 16}, nullptr, nullptr, nullptr, {}, false, nullptr, nullptr,
                                        nullptr),
               Error);
  // More shared memory per block than a Hopper GPU has (its tiles of 1000 rows of 64).
  EXPECT_THROW(causal_attention_backward({1, 1000, 1, 64}, nullptr, nullptr, nullptr, nullptr, {}, false, nullptr,
                                         nullptr, nullptr, nullptr, nullptr, 0, nullptr),
               Error);
}

}  // namespace
}  // namespace fp8kit::cuda
