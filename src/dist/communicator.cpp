// The backend-independent half of Communicator, connect(), and the tcp backend: all-reduce as a
// gather to rank 0, a reduction there in rank order, and a broadcast of the result's bytes.
#include "dist/communicator.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "numerics/cast.h"
#if FP8KIT_HAVE_NCCL
#include "dist/cuda/nccl.h"
#endif

namespace fp8kit::dist {

std::string_view name(Backend backend) { return backend == Backend::Nccl ? "nccl" : "tcp"; }

Backend parse_backend(std::string_view text) {
  if (text == "tcp") return Backend::Tcp;
  if (text == "nccl") return Backend::Nccl;
  fail("unknown communication backend '{}': use tcp (CPU tensors) or nccl (CUDA tensors)", text);
}

Backend default_backend(Device device) { return device == Device::Cuda ? Backend::Nccl : Backend::Tcp; }

bool nccl_available() { return FP8KIT_HAVE_NCCL != 0; }

void check_collective_tensor(const Communicator& comm, const Tensor& tensor, std::string_view call, bool sharded) {
  FP8KIT_CHECK(tensor.device() == comm.device(), "{}: the tensor is on the {}, but the {} backend reduces {} tensors",
               call, name(tensor.device()), name(comm.backend()), name(comm.device()));
  FP8KIT_CHECK(tensor.dtype() == DType::F32 || tensor.dtype() == DType::Bf16,
               "{}: the tensor is {}; only f32 and bf16 tensors are reduced", call, name(tensor.dtype()));
  FP8KIT_CHECK(!sharded || tensor.numel() % comm.world_size() == 0,
               "{}: {} elements do not split into {} equal shards: pad the flat buffer to a multiple of the world "
               "size", call, tensor.numel(), comm.world_size());
}

namespace {

// Every rank's elements, reduced in rank order into the first blob (what every rank receives).
template <typename T>
void reduce_in_rank_order(std::vector<Store::Blob>& all, ReduceOp op, float (*load)(T), T (*store)(float)) {
  const size_t n = all[0].size() / sizeof(T);
  std::vector<float> acc(n);
  std::vector<T> x(n);
  for (size_t r = 0; r < all.size(); ++r) {
    std::memcpy(x.data(), all[r].data(), n * sizeof(T));
    for (size_t i = 0; i < n; ++i) {
      const float v = load(x[i]);
      if (r == 0) acc[i] = v;
      else if (op == ReduceOp::Sum) acc[i] += v;
      else if (v > acc[i] || std::isnan(v)) acc[i] = v;  // max, NaN sticking
    }
  }
  for (size_t i = 0; i < n; ++i) x[i] = store(acc[i]);
  std::memcpy(all[0].data(), x.data(), n * sizeof(T));
}

class TcpCommunicator final : public Communicator {
 public:
  TcpCommunicator(const Rendezvous& r, std::unique_ptr<Store> store) : Communicator(r, std::move(store)) {}

  Backend backend() const override { return Backend::Tcp; }
  Device device() const override { return Device::Cpu; }

  void all_reduce(ops::Context&, Tensor& tensor, ReduceOp op) override {
    check_collective_tensor(*this, tensor, "all_reduce");
    if (world_size() == 1) return;
    std::span<std::byte> bytes(tensor.data<std::byte>(), tensor.nbytes());
    std::vector<Store::Blob> all = store().gather(bytes);
    if (rank() == 0) {
      for (size_t r = 1; r < all.size(); ++r)
        if (all[r].size() != bytes.size())
          store().abort(fmt::format("all_reduce: rank {} reduces {} bytes where rank 0 reduces {}: every rank must "
                                    "reduce the same tensors in the same order", r, all[r].size(), bytes.size()));
      if (tensor.dtype() == DType::F32)
        reduce_in_rank_order<float>(all, op, [](float v) { return v; }, [](float v) { return v; });
      else
        reduce_in_rank_order<uint16_t>(all, op, bf16_to_float, float_to_bf16);
    }
    receive_from_rank0(rank() == 0 ? std::span<const std::byte>(all[0]) : std::span<const std::byte>(), bytes,
                       "all_reduce");
  }

  void broadcast(ops::Context&, Tensor& tensor) override {
    check_collective_tensor(*this, tensor, "broadcast");
    std::span<std::byte> bytes(tensor.data<std::byte>(), tensor.nbytes());
    receive_from_rank0(bytes, bytes, "broadcast");
  }

  // The whole tensor reduced: its own shard is what reduce_scatter promises.
  void reduce_scatter(ops::Context& c, Tensor& tensor, ReduceOp op) override {
    check_collective_tensor(*this, tensor, "reduce_scatter", true);
    all_reduce(c, tensor, op);
  }

  void all_gather(ops::Context&, Tensor& tensor) override {
    check_collective_tensor(*this, tensor, "all_gather", true);
    if (world_size() == 1) return;
    const size_t shard = tensor.nbytes() / static_cast<size_t>(world_size());
    std::byte* data = tensor.data<std::byte>();
    const std::vector<Store::Blob> all = store().allgather({data + shard * static_cast<size_t>(rank()), shard});
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].size() != shard)
        store().abort(fmt::format("all_gather: rank {} has shards of {} bytes where rank {} has {}: every rank must "
                                  "pass the same tensors in the same order", r, all[r].size(), rank(), shard));
      std::memcpy(data + shard * r, all[r].data(), shard);
    }
  }

  void wait(ops::Context&) override {}

 private:
  // Rank 0's `data` into every rank's `out`, which must be as large.
  void receive_from_rank0(std::span<const std::byte> data, std::span<std::byte> out, std::string_view call) {
    const Store::Blob result = store().broadcast(data);
    if (result.size() != out.size())
      store().abort(fmt::format("{}: rank {} has {} bytes where rank 0 has {}: every rank must pass the same "
                                "tensors in the same order", call, rank(), out.size(), result.size()));
    std::memcpy(out.data(), result.data(), out.size());
  }
};

}  // namespace

std::unique_ptr<Communicator> connect(const Rendezvous& r, Backend backend, CommunicatorOptions options) {
  if (backend == Backend::Nccl) {
#if FP8KIT_HAVE_NCCL
    return make_nccl_communicator(r, options);
#else
    fail("this build has no nccl backend (it needs the CUDA backend and NCCL: configure with NCCL_ROOT pointing "
         "at a folder with include/nccl.h and lib/libnccl.so), or use the tcp backend on the CPU");
#endif
  }
  return std::make_unique<TcpCommunicator>(r, std::make_unique<Store>(r, StoreOptions{options.timeout}));
}

}  // namespace fp8kit::dist
