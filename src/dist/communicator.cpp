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

std::string_view name(Collective call) {
  constexpr std::string_view names[] = {"all_reduce", "broadcast", "reduce_scatter", "all_gather"};
  return names[static_cast<int>(call)];
}

void Communicator::prepare(Collective call, const Tensor& tensor) {
  FP8KIT_CHECK(tensor.device() == device(), "{}: the tensor is on the {}, but the {} backend reduces {} tensors",
               name(call), name(tensor.device()), name(backend()), name(device()));
  FP8KIT_CHECK(tensor.dtype() == DType::F32 || tensor.dtype() == DType::Bf16,
               "{}: the tensor is {}; only f32 and bf16 tensors are reduced", name(call), name(tensor.dtype()));
  const bool sharded = call == Collective::ReduceScatter || call == Collective::AllGather;
  FP8KIT_CHECK(!sharded || tensor.numel() % world_size() == 0,
               "{}: {} elements do not split into {} equal shards: pad the flat buffer to a multiple of the world "
               "size", name(call), tensor.numel(), world_size());
  traffic_.elements[static_cast<int>(call)] += tensor.numel();
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
    prepare(Collective::AllReduce, tensor);
    std::span<std::byte> bytes(tensor.data<std::byte>(), tensor.nbytes());
    const Store::Blob sum = reduce(bytes, tensor.dtype(), op, Collective::AllReduce);
    std::memcpy(bytes.data(), sum.data(), bytes.size());
  }

  void broadcast(ops::Context&, Tensor& tensor) override {
    prepare(Collective::Broadcast, tensor);
    std::span<std::byte> bytes(tensor.data<std::byte>(), tensor.nbytes());
    const Store::Blob result = receive_from_rank0(bytes, bytes.size(), Collective::Broadcast);
    std::memcpy(bytes.data(), result.data(), bytes.size());
  }

  // The whole tensor reduced, of which this rank keeps its shard alone (as NCCL promises no more).
  void reduce_scatter(ops::Context&, Tensor& tensor, ReduceOp op) override {
    prepare(Collective::ReduceScatter, tensor);
    const size_t shard = tensor.nbytes() / static_cast<size_t>(world_size()), own = shard * static_cast<size_t>(rank());
    std::span<std::byte> bytes(tensor.data<std::byte>(), tensor.nbytes());
    const Store::Blob sum = reduce(bytes, tensor.dtype(), op, Collective::ReduceScatter);
    std::memcpy(bytes.data() + own, sum.data() + own, shard);
  }

  void all_gather(ops::Context&, Tensor& tensor) override {
    prepare(Collective::AllGather, tensor);
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
  // Every rank's `bytes` reduced in rank order, on every rank.
  Store::Blob reduce(std::span<const std::byte> bytes, DType dtype, ReduceOp op, Collective call) {
    if (world_size() == 1) return {bytes.begin(), bytes.end()};
    std::vector<Store::Blob> all = store().gather(bytes);
    if (rank() == 0) {
      for (size_t r = 1; r < all.size(); ++r)
        if (all[r].size() != bytes.size())
          store().abort(fmt::format("{}: rank {} reduces {} bytes where rank 0 reduces {}: every rank must reduce "
                                    "the same tensors in the same order", name(call), r, all[r].size(), bytes.size()));
      if (dtype == DType::F32)
        reduce_in_rank_order<float>(all, op, [](float v) { return v; }, [](float v) { return v; });
      else
        reduce_in_rank_order<uint16_t>(all, op, bf16_to_float, float_to_bf16);
    }
    return receive_from_rank0(rank() == 0 ? std::span<const std::byte>(all[0]) : std::span<const std::byte>(),
                              bytes.size(), call);
  }

  // Rank 0's `data` on every rank, which must pass `size` bytes as rank 0 does.
  Store::Blob receive_from_rank0(std::span<const std::byte> data, size_t size, Collective call) {
    Store::Blob result = store().broadcast(data);
    if (result.size() != size)
      store().abort(fmt::format("{}: rank {} has {} bytes where rank 0 has {}: every rank must pass the same "
                                "tensors in the same order", name(call), rank(), size, result.size()));
    return result;
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
