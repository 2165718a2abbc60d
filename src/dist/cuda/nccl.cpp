// The nccl backend: collectives queued on the context's lane stream; a non-blocking communicator whose
// asynchronous errors are polled, and aborted (on this rank) after an error or the timeout.
#include "dist/cuda/nccl.h"

#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "base/error.h"
#include "ops/cuda/context.h"
#include "runtime/cuda/check.h"

namespace fp8kit::dist {
namespace {

using Clock = std::chrono::steady_clock;

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const Rendezvous& r, std::unique_ptr<Store> store, std::chrono::milliseconds timeout)
      : Communicator(r, std::move(store)), timeout_(timeout) {
    ncclUniqueId id{};
    if (rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const Store::Blob shared = this->store().broadcast(std::as_bytes(std::span(&id, 1)));
    std::memcpy(&id, shared.data(), sizeof id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    settle(ncclCommInitRankConfig(&comm_, world_size(), id, rank(), &config), "ncclCommInitRankConfig");
  }

  ~NcclCommunicator() override {
    if (comm_ == nullptr) return;
    // Finalize flushes this rank's queued collectives; a peer that is gone would keep it waiting.
    ncclResult_t state = ncclCommFinalize(comm_);
    for (const auto deadline = Clock::now() + timeout_; state == ncclInProgress && Clock::now() < deadline;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ncclCommGetAsyncError(comm_, &state);
    }
    if (state == ncclSuccess) ncclCommDestroy(comm_);
    else ncclCommAbort(comm_);
  }

  Backend backend() const override { return Backend::Nccl; }
  Device device() const override { return Device::Cuda; }

  void all_reduce(ops::Context& c, Tensor& tensor, ReduceOp op) override {
    prepare(Collective::AllReduce, tensor);
    require_live();
    void* p = tensor.device_data<std::byte>();
    settle(ncclAllReduce(p, p, tensor.numel(), dtype(tensor), op == ReduceOp::Sum ? ncclSum : ncclMax, comm_,
                         ops::stream(c)),
           "ncclAllReduce");
  }

  void broadcast(ops::Context& c, Tensor& tensor) override {
    prepare(Collective::Broadcast, tensor);
    require_live();
    void* p = tensor.device_data<std::byte>();
    settle(ncclBroadcast(p, p, tensor.numel(), dtype(tensor), 0, comm_, ops::stream(c)), "ncclBroadcast");
  }

  // In place as NCCL defines it: this rank's shard is the receive buffer inside the send buffer.
  void reduce_scatter(ops::Context& c, Tensor& tensor, ReduceOp op) override {
    prepare(Collective::ReduceScatter, tensor);
    require_live();
    const size_t count = static_cast<size_t>(tensor.numel() / world_size());
    std::byte* p = tensor.device_data<std::byte>();
    settle(ncclReduceScatter(p, own_shard(p, tensor, count), count, dtype(tensor),
                             op == ReduceOp::Sum ? ncclSum : ncclMax, comm_, ops::stream(c)),
           "ncclReduceScatter");
  }

  void all_gather(ops::Context& c, Tensor& tensor) override {
    prepare(Collective::AllGather, tensor);
    require_live();
    const size_t count = static_cast<size_t>(tensor.numel() / world_size());
    std::byte* p = tensor.device_data<std::byte>();
    settle(ncclAllGather(own_shard(p, tensor, count), p, count, dtype(tensor), comm_, ops::stream(c)),
           "ncclAllGather");
  }

  void wait(ops::Context& c) override {
    require_live();
    cuda::Event done;
    FP8KIT_CUDA_CHECK(cudaEventRecord(done.get(), ops::stream(c)));
    const auto deadline = Clock::now() + timeout_;
    for (int polls = 0;; ++polls) {
      const cudaError_t status = cudaEventQuery(done.get());
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) FP8KIT_CUDA_CHECK(status);
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) abort_with(state, "a collective");
      // A rank that died closed its store socket: the job ends now rather than at the timeout.
      if (polls % 256 == 0) {
        if (const std::string failure = store().poll_failure(); !failure.empty()) abort_with(ncclSuccess, failure);
      }
      if (Clock::now() >= deadline)
        abort_with(ncclSuccess, fmt::format("the collectives queued so far did not finish within {} s (another rank "
                                            "died, hangs, or is slower than the timeout)",
                                            std::chrono::duration<double>(timeout_).count()));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

 private:
  std::byte* own_shard(std::byte* p, const Tensor& tensor, size_t count) const {
    return p + count * dtype_size(tensor.dtype()) * static_cast<size_t>(rank());
  }

  static ncclDataType_t dtype(const Tensor& tensor) {
    return tensor.dtype() == DType::F32 ? ncclFloat32 : ncclBfloat16;
  }

  void require_live() const {
    FP8KIT_CHECK(comm_ != nullptr, "NCCL on rank {}: the communicator was aborted after an error (above); the job "
                 "cannot go on", rank());
  }

  void check(ncclResult_t result, const char* call) {
    if (result != ncclSuccess) fail("{} failed on rank {}: {}", call, rank(), ncclGetErrorString(result));
  }

  // A non-blocking communicator's call returns ncclInProgress while it finishes in the background (init,
  // a first collective that connects): poll until it is done, failed, or the timeout passed.
  void settle(ncclResult_t result, const std::string& call) {
    const auto deadline = Clock::now() + timeout_;
    while (result == ncclInProgress) {
      if (Clock::now() >= deadline)
        abort_with(ncclSuccess, fmt::format("{} did not finish within {} s (a rank did not join, or died)", call,
                                            std::chrono::duration<double>(timeout_).count()));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ncclCommGetAsyncError(comm_, &result);
    }
    if (result != ncclSuccess) abort_with(result, call);
  }

  // Aborts the communicator (its kernels stop; it is unusable after) and throws.
  [[noreturn]] void abort_with(ncclResult_t result, const std::string& what) {
    std::string detail = result == ncclSuccess ? what : fmt::format("{} failed: {}", what, ncclGetErrorString(result));
    if (comm_ != nullptr) {
      const char* last = ncclGetLastError(comm_);
      if (last != nullptr && *last != '\0') detail += fmt::format(" ({})", last);
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    fail("NCCL on rank {} of {}: {}; aborted the communicator", rank(), world_size(), detail);
  }

  ncclComm_t comm_ = nullptr;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const Rendezvous& r, CommunicatorOptions options) {
  int count = 0;
  FP8KIT_CUDA_CHECK(cudaGetDeviceCount(&count));
  FP8KIT_CHECK(count == 1 || r.local_rank < count,
               "LOCAL_RANK={} but this node shows {} GPUs: run at most {} processes per node, or one GPU per process "
               "(CUDA_VISIBLE_DEVICES)", r.local_rank, count, count);
  FP8KIT_CUDA_CHECK(cudaSetDevice(count == 1 ? 0 : r.local_rank));
  // NVLink multicast (NVLS) stays off unless the user set NCCL_NVLS_ENABLE: the multi-GPU machines this
  // is meant for keep it off (issue 14).
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  auto store = std::make_unique<Store>(r, StoreOptions{options.timeout});
  return std::make_unique<NcclCommunicator>(r, std::move(store), options.timeout);
}

}  // namespace fp8kit::dist
