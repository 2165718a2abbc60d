// GPU SDPA beyond the op table's CPU comparison: a step that captures the op into a CUDA graph (after
// the eager call that builds cuDNN's graphs) replays the eager results, on a side lane too (each lane
// has its own cuDNN handle), the backward gives the same bits on every run (cuDNN's deterministic
// algorithm, as the training step's determinism needs), and sequences of different lengths padded
// to one (lengths: cuDNN's padding mask) attend as if alone.
#include "ops/sdpa.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/host_tensors.h"
#include "numerics/cast.h"
#include "ops/cuda/context.h"
#include "ops/cuda/gpu_test.h"
#include "ops/cuda/op_table.h"
#include "runtime/cuda/graph.h"
#include "runtime/memory.h"

namespace fp8kit::ops {
namespace {

const SdpaShape kShape{.batch = 2, .seq = 200, .heads = 8, .kv_heads = 2, .head_dim = 128};

Tensor input(const std::vector<int64_t>& shape, uint64_t seed) {
  return testing::device_tensor(testing::random_values(shape[0] * shape[1] * shape[2], seed), shape, Device::Cuda,
                                DType::Bf16);
}

struct Step {
  Tensor q, k, v, dout, out, lse, dq, dk, dv;

  Step()
      : q(input({kShape.batch, kShape.seq, kShape.heads * kShape.head_dim}, 1)),
        k(input({kShape.batch, kShape.seq, kShape.kv_heads * kShape.head_dim}, 2)),
        v(input({kShape.batch, kShape.seq, kShape.kv_heads * kShape.head_dim}, 3)),
        dout(input({kShape.batch, kShape.seq, kShape.heads * kShape.head_dim}, 4)) {}

  void step(Context& c) {
    sdpa_forward(c, kShape, q, k, v, true, out, lse);
    sdpa_backward(c, kShape, q, k, v, out, lse, dout, dq, dk, dv);
  }
  // The outputs' bytes on the host.
  std::vector<Tensor> outputs() const {
    std::vector<Tensor> host;
    for (const Tensor* t : {&out, &lse, &dq, &dk, &dv}) host.push_back(t->to(Device::Cpu));
    return host;
  }
  void clear() {
    for (Tensor* t : {&out, &lse, &dq, &dk, &dv}) zero_bytes(Device::Cuda, t->device_data<std::byte>(), t->nbytes());
  }
};

void expect_same_bytes(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const char* what) {
  const char* names[] = {"out", "lse", "dq", "dk", "dv"};
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::memcmp(a[i].data<std::byte>(), b[i].data<std::byte>(), a[i].nbytes()), 0) << what << ": " << names[i];
  }
}

TEST(CudaSdpa, ACapturedStepReplaysTheEagerResults) {
  FP8KIT_REQUIRE_GPU();
  for (const Lane lane : {Lane::Main, Lane::A}) {
    Context c(Device::Cuda);
    Step r;
    c.fork(lane);
    cuda::Graph graph;
    {
      const Context::OnLane on(c, lane);
      r.step(c);  // builds the graphs, sizes the scratch and the outputs
      c.synchronize();
      const std::vector<Tensor> eager = r.outputs();
      r.clear();
      graph = cuda::Graph::capture(stream(c), [&] { r.step(c); });
      graph.launch(stream(c));
      c.synchronize();
      expect_same_bytes(r.outputs(), eager, lane == Lane::Main ? "main lane" : "lane A");
    }
    c.join_all();
  }
}

TEST(CudaSdpa, TheBackwardGivesTheSameBitsEveryRun) {
  FP8KIT_REQUIRE_GPU();
  Context c(Device::Cuda);
  Step r;
  r.step(c);
  c.synchronize();
  const std::vector<Tensor> first = r.outputs();
  for (int i = 0; i < 3; ++i) {
    r.clear();
    r.step(c);
    c.synchronize();
    expect_same_bytes(r.outputs(), first, "a later run");
  }
}

// Sequences of different lengths padded to one seq (cuDNN's padding mask, tensor-core attention at
// seq 2048 too): each sequence's rows of out and lse near a GPU call on it alone and near the CPU's
// (the op table's tolerances); the rows past a sequence's end are not compared (unspecified).
TEST(CudaSdpa, LengthsAttendToEachSequenceAsIfAlone) {
  FP8KIT_REQUIRE_GPU();
  struct Case {
    SdpaShape s;
    std::vector<int32_t> lengths;
  };
  const Case cases[] = {
      {{.batch = 3, .seq = 192, .heads = 4, .kv_heads = 2, .head_dim = 64}, {130, 1, 192}},
      {{.batch = 3, .seq = 192, .heads = 4, .kv_heads = 2, .head_dim = 64, .causal = false}, {130, 1, 192}},
      {{.batch = 2, .seq = 2048, .heads = 8, .kv_heads = 2, .head_dim = 128}, {2048, 700}},
  };
  for (const Case& k : cases) {
    const SdpaShape& s = k.s;
    const int64_t qw = s.heads * s.head_dim, kw = s.kv_heads * s.head_dim;
    auto values = [](int64_t n, uint64_t seed, float range) {
      std::vector<float> x = testing::random_values(static_cast<size_t>(n), seed, -range, range);
      for (float& e : x) e = round_bf16(e);
      return x;
    };
    const std::vector<float> q = values(s.batch * s.seq * qw, 5, 2.0f), key = values(s.batch * s.seq * kw, 6, 2.0f),
                             v = values(s.batch * s.seq * kw, 7, 1.0f);
    // out and lse of the padded batch on `device`, as floats.
    auto padded = [&](Device device) {
      Context c(device);
      const Tensor lengths = testing::device_ints(k.lengths, {s.batch}, device);
      Tensor out, lse;
      sdpa_forward(c, s, testing::device_tensor(q, {s.batch, s.seq, qw}, device, DType::Bf16),
                   testing::device_tensor(key, {s.batch, s.seq, kw}, device, DType::Bf16),
                   testing::device_tensor(v, {s.batch, s.seq, kw}, device, DType::Bf16), true, out, lse, &lengths);
      c.synchronize();
      return std::pair{testing::float_values(out), testing::float_values(lse)};
    };
    const auto [gpu_out, gpu_lse] = padded(Device::Cuda);
    const auto [cpu_out, cpu_lse] = padded(Device::Cpu);
    Context c(Device::Cuda);
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t n = k.lengths[static_cast<size_t>(b)];
      SdpaShape alone = s;
      alone.batch = 1;
      alone.seq = n;
      auto rows = [&](const std::vector<float>& x, int64_t width) {
        const auto first = x.begin() + b * s.seq * width;
        return std::vector<float>(first, first + n * width);
      };
      auto lse_rows = [&](const std::vector<float>& lse) {
        std::vector<float> r;
        for (int64_t h = 0; h < s.heads; ++h) {
          const auto first = lse.begin() + (b * s.heads + h) * s.seq;
          r.insert(r.end(), first, first + n);
        }
        return r;
      };
      Tensor out, lse;
      sdpa_forward(c, alone, testing::device_tensor(rows(q, qw), {1, n, qw}, Device::Cuda, DType::Bf16),
                   testing::device_tensor(rows(key, kw), {1, n, kw}, Device::Cuda, DType::Bf16),
                   testing::device_tensor(rows(v, kw), {1, n, kw}, Device::Cuda, DType::Bf16), true, out, lse);
      c.synchronize();
      const std::vector<float> got = rows(gpu_out, qw), got_lse = lse_rows(gpu_lse), want = rows(cpu_out, qw),
                               want_lse = lse_rows(cpu_lse);
      const std::string what = "seq " + std::to_string(s.seq) + (s.causal ? " causal" : " full") + ", sequence " +
                               std::to_string(b) + " of " + std::to_string(n);
      EXPECT_LT(cuda::testing::relative_l2(got, testing::float_values(out)), 1e-2) << what;
      EXPECT_LT(cuda::testing::relative_l2(got_lse, testing::float_values(lse)), 1e-3) << what;
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-3 + 1e-2 * std::abs(want[i])) << what << " out [" << i << "]";
      for (size_t i = 0; i < got_lse.size(); ++i)
        ASSERT_NEAR(got_lse[i], want_lse[i], 2e-3 + 1e-2 * std::abs(want_lse[i])) << what << " lse [" << i << "]";
    }
  }
}

}  // namespace
}  // namespace fp8kit::ops
