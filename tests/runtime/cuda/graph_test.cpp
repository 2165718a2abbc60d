// Graph capture: a stream's work captured once replays on every launch; a capture whose recording
// throws leaves the stream usable and the graph empty.
#include "runtime/cuda/graph.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "ops/cuda/gpu_test.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/stream.h"

namespace fp8kit::cuda {
namespace {

TEST(CudaGraph, CapturedWorkReplaysOnEveryLaunch) {
  FP8KIT_REQUIRE_GPU();
  const Stream stream;
  DeviceBuffer<float> source(4), target(4);
  source.upload(std::vector<float>{1, 2, 3, 4}, stream.get());
  const Graph graph = Graph::capture(stream.get(), [&] {
    FP8KIT_CUDA_CHECK(
        cudaMemcpyAsync(target.data(), source.data(), source.bytes(), cudaMemcpyDeviceToDevice, stream.get()));
  });
  EXPECT_FALSE(graph.empty());
  for (const std::vector<float>& values : {std::vector<float>{1, 2, 3, 4}, std::vector<float>{5, 6, 7, 8}}) {
    source.upload(values, stream.get());
    target.fill_bytes(0, stream.get());
    graph.launch(stream.get());
    EXPECT_EQ(target.to_host(stream.get()), values);  // the replay reads the buffers' current contents
  }
}

TEST(CudaGraph, ThrowingRecordingEndsTheCapture) {
  FP8KIT_REQUIRE_GPU();
  const Stream stream;
  Graph graph;
  EXPECT_THROW(graph = Graph::capture(stream.get(), [] { throw std::runtime_error("recording failed"); }),
               std::runtime_error);
  EXPECT_TRUE(graph.empty());
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  FP8KIT_CUDA_CHECK(cudaStreamIsCapturing(stream.get(), &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  stream.synchronize();  // the stream takes work again
}

}  // namespace
}  // namespace fp8kit::cuda
