// The nccl backend at world size 1 (one GPU): it initializes and is destroyed, its collectives leave
// the tensor as it is, on any lane and inside a captured CUDA graph, and it refuses CPU tensors.
#include <gtest/gtest.h>

#include <vector>

#include "common/error_of.h"
#include "dist/communicator.h"
#include "exec/captured_step.h"
#include "ops/cuda/gpu_test.h"
#include "tensor/tensor.h"

namespace fp8kit::dist {
namespace {

using testing::error_of;

Tensor on_gpu(const std::vector<float>& values) {
  Tensor host({static_cast<int64_t>(values.size())}, DType::F32);
  std::copy(values.begin(), values.end(), host.data<float>());
  return host.to(Device::Cuda);
}

std::vector<float> values_of(const Tensor& t) {
  const Tensor host = t.to(Device::Cpu);
  return {host.data<float>(), host.data<float>() + host.numel()};
}

TEST(NcclCommunicator, OneRankCollectivesAreTheIdentity) {
  FP8KIT_REQUIRE_GPU();
  if (!nccl_available()) GTEST_SKIP() << "this build has no NCCL";
  auto comm = connect(Rendezvous{}, Backend::Nccl, {.timeout = std::chrono::seconds(60)});
  EXPECT_EQ(comm->backend(), Backend::Nccl);
  EXPECT_EQ(comm->device(), Device::Cuda);
  ops::Context c(Device::Cuda);
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f};
  Tensor grads = on_gpu(values), amax = on_gpu(values);
  Tensor bf16({4}, DType::Bf16, Device::Cuda);
  comm->all_reduce(c, grads, ReduceOp::Sum);
  comm->all_reduce(c, bf16, ReduceOp::Sum);
  {
    ops::Context::OnLane side(c, ops::Lane::Side);
    c.fork(ops::Lane::Side);
    comm->all_reduce(c, amax, ReduceOp::Max);
    comm->wait(c);
  }
  c.join_all();
  comm->broadcast(c, grads);
  comm->reduce_scatter(c, grads, ReduceOp::Sum);
  comm->all_gather(c, grads);
  comm->wait(c);
  EXPECT_EQ(values_of(grads), values);
  EXPECT_EQ(values_of(amax), values);
  Tensor host({4}, DType::F32);
  EXPECT_EQ(error_of([&] { comm->all_reduce(c, host, ReduceOp::Sum); }),
            "all_reduce: the tensor is on the cpu, but the nccl backend reduces cuda tensors");
}

TEST(NcclCommunicator, AllReduceInsideACapturedStep) {
  FP8KIT_REQUIRE_GPU();
  if (!nccl_available()) GTEST_SKIP() << "this build has no NCCL";
  auto comm = connect(Rendezvous{}, Backend::Nccl, {.timeout = std::chrono::seconds(60)});
  ops::Context c(Device::Cuda);
  const std::vector<float> values = {4.0f, 5.0f};
  Tensor grads = on_gpu(values);
  exec::CapturedStep step([&](ops::Context& context) { comm->all_reduce(context, grads, ReduceOp::Sum); });
  for (int i = 0; i < 3; ++i) step.run(c);  // eager, captured, replayed
  comm->wait(c);
  EXPECT_EQ(values_of(grads), values);
}

}  // namespace
}  // namespace fp8kit::dist
