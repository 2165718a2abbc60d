// GPU SDPA beyond the op table's CPU comparison: a step that captures the op into a CUDA graph (after
// the eager call that builds cuDNN's graphs) replays the eager results, on a side lane too (each lane
// has its own cuDNN handle), and the backward gives the same bits on every run (cuDNN's deterministic
// algorithm, as the training step's determinism needs).
#include "ops/sdpa.h"

#include <gtest/gtest.h>

#include <cstring>
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

}  // namespace
}  // namespace fp8kit::ops
