// The tcp backend's collectives with several processes: the same bits on every rank, equal to a serial
// reduction in rank order; and the checks every backend makes.
#include "dist/communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error_of.h"
#include "dist/ranks.h"
#include "numerics/cast.h"

namespace fp8kit::dist {
namespace {

using namespace std::chrono_literals;
using testing::error_of;
using testing::run_ranks;

constexpr int kWorld = 4;
constexpr int kCount = 1000;

// Rank r's values: magnitudes far apart, so that another summation order gives other bits.
float value(int rank, int i) {
  const float scale[] = {1e8f, 1.0f, -1e8f, 3e-3f};
  return scale[rank] * (1.0f + 0.37f * static_cast<float>((i * 7 + rank * 13) % 101)) + static_cast<float>(i % 3);
}

std::string hex(const Tensor& t) {
  const auto* p = reinterpret_cast<const uint8_t*>(t.data<std::byte>());
  return fmt::format("{:02x}", fmt::join(p, p + t.nbytes(), ""));
}

// Every rank's reduced tensor, as hex, from run_ranks.
std::vector<testing::RankOutcome> reduce_on_ranks(DType dtype, ReduceOp op) {
  return run_ranks(kWorld, [&](const Rendezvous& r) {
    auto comm = connect(r, Backend::Tcp, {.timeout = 20s});
    ops::Context c;
    Tensor t({kCount}, dtype);
    for (int i = 0; i < kCount; ++i) {
      const float v = value(r.rank, i);
      if (dtype == DType::F32) t.data<float>()[i] = v;
      else t.data<uint16_t>()[i] = float_to_bf16(v);
    }
    comm->all_reduce(c, t, op);
    comm->barrier();
    return hex(t);
  });
}

TEST(TcpCommunicator, AllReduceSumIsTheSerialRankOrderSumOnEveryRank) {
  const auto outcomes = reduce_on_ranks(DType::F32, ReduceOp::Sum);
  Tensor expected({kCount}, DType::F32);
  for (int i = 0; i < kCount; ++i) {
    float acc = value(0, i);
    for (int r = 1; r < kWorld; ++r) acc += value(r, i);
    expected.data<float>()[i] = acc;
  }
  for (const auto& o : outcomes) {
    ASSERT_TRUE(o.ok) << o.text;
    EXPECT_EQ(o.text, hex(expected));
  }
}

TEST(TcpCommunicator, AllReduceMaxAndBf16) {
  const auto max = reduce_on_ranks(DType::F32, ReduceOp::Max);
  const auto bf16 = reduce_on_ranks(DType::Bf16, ReduceOp::Sum);
  Tensor expected_max({kCount}, DType::F32), expected_bf16({kCount}, DType::Bf16);
  for (int i = 0; i < kCount; ++i) {
    float m = value(0, i), s = bf16_to_float(float_to_bf16(value(0, i)));
    for (int r = 1; r < kWorld; ++r) {
      m = std::max(m, value(r, i));
      s += bf16_to_float(float_to_bf16(value(r, i)));
    }
    expected_max.data<float>()[i] = m;
    expected_bf16.data<uint16_t>()[i] = float_to_bf16(s);
  }
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(max[r].ok && bf16[r].ok) << max[r].text << bf16[r].text;
    EXPECT_EQ(max[r].text, hex(expected_max));
    EXPECT_EQ(bf16[r].text, hex(expected_bf16));
  }
}

TEST(TcpCommunicator, MaxKeepsNaNAndBroadcastCopiesRankZeros) {
  const auto outcomes = run_ranks(3, [](const Rendezvous& r) {
    auto comm = connect(r, Backend::Tcp, {.timeout = 20s});
    ops::Context c;
    Tensor amax({2}, DType::F32);
    amax.data<float>()[0] = r.rank == 1 ? std::numeric_limits<float>::quiet_NaN() : 1.0f;
    amax.data<float>()[1] = static_cast<float>(r.rank);
    comm->all_reduce(c, amax, ReduceOp::Max);
    Tensor weights({3}, DType::F32);
    for (int i = 0; i < 3; ++i) weights.data<float>()[i] = static_cast<float>(10 * r.rank + i);
    comm->broadcast(c, weights);
    comm->wait(c);
    return fmt::format("{} {} | {} {} {}", amax.data<float>()[0], amax.data<float>()[1], weights.data<float>()[0],
                       weights.data<float>()[1], weights.data<float>()[2]);
  });
  for (const auto& o : outcomes) {
    ASSERT_TRUE(o.ok) << o.text;
    EXPECT_EQ(o.text, "nan 2 | 0 1 2");
  }
}

TEST(TcpCommunicator, ReduceScatterAndAllGatherShards) {
  // ZeRO-1's step: gradients reduce-scattered, each rank updates its shard, parameters all-gathered.
  const auto outcomes = run_ranks(3, [](const Rendezvous& r) {
    auto comm = connect(r, Backend::Tcp, {.timeout = 20s});
    ops::Context c;
    Tensor grads({6}, DType::F32), params({6}, DType::F32);
    for (int i = 0; i < 6; ++i) grads.data<float>()[i] = static_cast<float>((r.rank + 1) * (i + 1));
    comm->reduce_scatter(c, grads, ReduceOp::Sum);
    const int first = 2 * r.rank;
    for (int i = first; i < first + 2; ++i) params.data<float>()[i] = -grads.data<float>()[i];
    comm->all_gather(c, params);
    const Traffic& traffic = comm->traffic();
    return fmt::format("{} | {} | {} {} {}", fmt::join(grads.span<float>(), " "), fmt::join(params.span<float>(), " "),
                       traffic[Collective::ReduceScatter], traffic[Collective::AllGather],
                       traffic[Collective::AllReduce]);
  });
  // Shard r of the sum: (1 + 2 + 3) * (i + 1); the other shards keep the rank's own values (which NCCL
  // does not promise). Each call counts the whole tensor's elements.
  EXPECT_EQ(outcomes[0].text, "6 12 3 4 5 6 | -6 -12 -18 -24 -30 -36 | 6 6 0");
  EXPECT_EQ(outcomes[1].text, "2 4 18 24 10 12 | -6 -12 -18 -24 -30 -36 | 6 6 0");
  EXPECT_EQ(outcomes[2].text, "3 6 9 12 30 36 | -6 -12 -18 -24 -30 -36 | 6 6 0");
}

TEST(TcpCommunicator, ShardsMustSplitEvenly) {
  const auto outcomes = run_ranks(2, [](const Rendezvous& r) {
    auto comm = connect(r, Backend::Tcp, {.timeout = 20s});
    ops::Context c;
    Tensor odd({5}, DType::F32);
    return error_of([&] { comm->all_gather(c, odd); });
  });
  EXPECT_EQ(outcomes[0].text, "all_gather: 5 elements do not split into 2 equal shards: pad the flat buffer to a "
                              "multiple of the world size");
}

TEST(TcpCommunicator, DifferentSizesOnDifferentRanksAreAnErrorOnEveryRank) {
  const auto outcomes = run_ranks(3, [](const Rendezvous& r) {
    auto comm = connect(r, Backend::Tcp, {.timeout = 20s});
    ops::Context c;
    Tensor t({r.rank == 2 ? 5 : 4}, DType::F32);
    comm->all_reduce(c, t, ReduceOp::Sum);
    return std::string("reduced");
  });
  for (const auto& o : outcomes) {
    EXPECT_FALSE(o.ok);
    EXPECT_NE(o.text.find("all_reduce: rank 2 reduces 20 bytes where rank 0 reduces 16: every rank must reduce the "
                          "same tensors in the same order"),
              std::string::npos)
        << o.text;
  }
}

TEST(TcpCommunicator, ARankThatLeavesFailsTheOthersAllReduce) {
  const auto outcomes = run_ranks(3, [](const Rendezvous& r) {
    auto comm = connect(r, Backend::Tcp, {.timeout = 30s});
    if (r.rank == 1) _exit(3);  // a crash between two steps
    ops::Context c;
    Tensor t({16}, DType::F32);
    comm->all_reduce(c, t, ReduceOp::Sum);
    return std::string("reduced");
  });
  for (int rank : {0, 2}) {
    EXPECT_FALSE(outcomes[rank].ok);
    EXPECT_NE(outcomes[rank].text.find("rank 1 left during gather #1"), std::string::npos) << outcomes[rank].text;
  }
}

TEST(Communicator, OneProcessAndTheChecks) {
  auto comm = connect(Rendezvous{}, Backend::Tcp);
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_EQ(comm->backend(), Backend::Tcp);
  ops::Context c;
  Tensor t({3}, DType::F32);
  t.data<float>()[1] = 2.5f;
  comm->all_reduce(c, t, ReduceOp::Sum);
  EXPECT_EQ(t.data<float>()[1], 2.5f);
  Tensor ints({3}, DType::I32);
  EXPECT_EQ(error_of([&] { comm->all_reduce(c, ints, ReduceOp::Max); }),
            "all_reduce: the tensor is i32; only f32 and bf16 tensors are reduced");
  EXPECT_EQ(parse_backend("nccl"), Backend::Nccl);
  EXPECT_EQ(default_backend(Device::Cpu), Backend::Tcp);
  EXPECT_NE(error_of([] { parse_backend("gloo"); }).find("unknown communication backend 'gloo'"), std::string::npos);
  if (!nccl_available()) {
    EXPECT_NE(error_of([] { connect(Rendezvous{}, Backend::Nccl); }).find("this build has no nccl backend"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace fp8kit::dist
