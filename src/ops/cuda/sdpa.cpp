// Grouped-query SDPA on the GPU: cuDNN's fused flash attention (forward with its softmax stats, the
// lse; backward from them), described as cudnn-frontend graphs. q, k, v, out and their gradients are
// [batch, seq, heads, head_dim] (BSHD), which cuDNN takes as dims [b, h, s, d] with strides
// [s*h*d, d, h*d, 1]; k and v have kv_heads heads (cuDNN's GQA); lse is Stats [b, h, s, 1] f32.
// Sequences padded to seq (a forward with lengths) take cuDNN's padding mask, the lengths being
// both its seq_len_q and seq_len_kv ([b, 1, 1, 1] i32). The FP8 forward (SdpaShape::fp8) is cuDNN's
// sdpa_fp8 on E4M3 codes of q, k, v and out, its scalars ([1, 1, 1, 1] f32) from sdpa_fp8.cu.
#include "ops/cuda/sdpa.h"

#include "base/error.h"
#include "ops/cuda/context.h"
#include "ops/cuda/convert.h"
#include "ops/cuda/quantize.h"
#include "runtime/cuda/check.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <array>
#include <bit>
#include <cstdlib>
#include <map>
#include <string_view>
#include <tuple>
#include <unordered_map>

namespace fe = cudnn_frontend;

namespace fp8kit::cuda {

namespace {

enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSeqLenQ, kSeqLenKV,
  kDescaleQ, kDescaleK, kDescaleV, kDescaleS, kScaleS, kScaleO, kAmaxS, kAmaxO
};

// Lane, backward, batch, seq, heads, kv_heads, head_dim, causal, scale's bits, padded (lengths given), FP8.
using GraphKey = std::tuple<int, bool, int64_t, int64_t, int64_t, int64_t, int64_t, bool, uint32_t, bool, bool>;

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};

void check_cudnn(cudnnStatus_t status, const char* call) {
  FP8KIT_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN: {} failed: {}", call, cudnnGetErrorString(status));
}

std::string describe(const ops::SdpaShape& s, bool padded) {
  return fmt::format("batch {} seq {} heads {} kv_heads {} head_dim {}{}{} ({})", s.batch, s.seq, s.heads, s.kv_heads,
                     s.head_dim, s.causal ? " causal" : "", padded ? " padded (lengths)" : "", s.fp8 ? "fp8" : "bf16");
}

}  // namespace

struct SdpaGraphs {
  std::array<cudnnHandle_t, ops::kLanes> handles{};
  std::map<GraphKey, Built> graphs;

  SdpaGraphs() = default;
  SdpaGraphs(const SdpaGraphs&) = delete;
  SdpaGraphs& operator=(const SdpaGraphs&) = delete;
  ~SdpaGraphs() {
    graphs.clear();  // plans before the handles they were made with
    for (cudnnHandle_t h : handles) {
      if (h != nullptr) cudnnDestroy(h);
    }
  }
};

void SdpaGraphsDeleter::operator()(SdpaGraphs* graphs) const { delete graphs; }

namespace {

// The current lane's handle, made at its first use: a handle is bound to one stream, so each lane has
// its own (and the graphs are keyed by lane with it).
cudnnHandle_t handle(ops::Context& c) {
  auto& state = c.cuda().sdpa;
  if (state == nullptr) state.reset(new SdpaGraphs());
  cudnnHandle_t& h = state->handles[static_cast<int>(c.lane())];
  if (h == nullptr) {
    check_cudnn(cudnnCreate(&h), "cudnnCreate");
    check_cudnn(cudnnSetStream(h, ops::stream(c)), "cudnnSetStream");
  }
  return h;
}

// A [batch, seq, heads * head_dim] tensor as cuDNN's [b, h, s, d] in the BSHD layout.
fe::graph::Tensor_attributes bshd(const ops::SdpaShape& s, int64_t heads, const char* name, Uid uid) {
  const int64_t d = s.head_dim;
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({s.batch, heads, s.seq, d})
      .set_stride({s.seq * heads * d, d, heads * d, 1});
}

fe::graph::Tensor_attributes stats(const ops::SdpaShape& s) {
  return fe::graph::Tensor_attributes()
      .set_name("Stats")
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({s.batch, s.heads, s.seq, 1})
      .set_stride({s.heads * s.seq, s.seq, 1, 1});
}

std::shared_ptr<fe::graph::Graph> new_graph(fe::DataType_t io = fe::DataType_t::BFLOAT16) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(io)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

template <typename Attributes>
void set_scale_and_mask(Attributes& attributes, const ops::SdpaShape& s) {
  attributes.set_attn_scale(s.scale);
  if (s.causal) {  // query i sees keys j <= i (seq_q == seq_kv: top left is bottom right)
    attributes.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  }
}

std::shared_ptr<fe::graph::Graph> forward_graph(const ops::SdpaShape& s, bool padded) {
  auto graph = new_graph(s.fp8 ? fe::DataType_t::FP8_E4M3 : fe::DataType_t::BFLOAT16);
  auto q = graph->tensor(bshd(s, s.heads, "Q", kQ));
  auto k = graph->tensor(bshd(s, s.kv_heads, "K", kK));
  auto v = graph->tensor(bshd(s, s.kv_heads, "V", kV));
  auto attributes = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true);
  set_scale_and_mask(attributes, s);
  if (padded) {
    auto seq_len = [&](const char* name, Uid uid) {
      return graph->tensor(fe::graph::Tensor_attributes()
                               .set_name(name)
                               .set_uid(uid)
                               .set_dim({s.batch, 1, 1, 1})
                               .set_stride({1, 1, 1, 1})
                               .set_data_type(fe::DataType_t::INT32));
    };
    attributes.set_padding_mask(true)
        .set_seq_len_q(seq_len("seq_len_q", kSeqLenQ))
        .set_seq_len_kv(seq_len("seq_len_kv", kSeqLenKV));
  }
  std::shared_ptr<fe::graph::Tensor_attributes> o, lse;
  if (s.fp8) {
    const auto scalar = [&](const char* name, Uid uid) {
      return fe::graph::Tensor_attributes()
          .set_name(name)
          .set_uid(uid)
          .set_dim({1, 1, 1, 1})
          .set_stride({1, 1, 1, 1})
          .set_data_type(fe::DataType_t::FLOAT);
    };
    auto in = [&](const char* name, Uid uid) { return graph->tensor(scalar(name, uid)); };
    auto [o8, lse8, amax_s, amax_o] =
        graph->sdpa_fp8(q, k, v, in("descale_q", kDescaleQ), in("descale_k", kDescaleK), in("descale_v", kDescaleV),
                        in("descale_s", kDescaleS), in("scale_s", kScaleS), in("scale_o", kScaleO), attributes);
    o = o8, lse = lse8;
    for (auto [t, name, uid] : {std::tuple{amax_s, "amax_s", kAmaxS}, std::tuple{amax_o, "amax_o", kAmaxO}}) {
      const auto layout = scalar(name, uid);
      t->set_output(true).set_uid(uid).set_dim(layout.get_dim()).set_stride(layout.get_stride()).set_data_type(
          fe::DataType_t::FLOAT);
    }
  } else {
    const auto outputs = graph->sdpa(q, k, v, attributes);
    o = outputs[0], lse = outputs[1];
  }
  const auto o_layout = bshd(s, s.heads, "O", kO);
  o->set_output(true).set_uid(kO).set_dim(o_layout.get_dim()).set_stride(o_layout.get_stride());
  const auto lse_layout = stats(s);
  lse->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(lse_layout.get_dim())
      .set_stride(lse_layout.get_stride());
  return graph;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const ops::SdpaShape& s, bool deterministic) {
  auto graph = new_graph();
  auto q = graph->tensor(bshd(s, s.heads, "Q", kQ));
  auto k = graph->tensor(bshd(s, s.kv_heads, "K", kK));
  auto v = graph->tensor(bshd(s, s.kv_heads, "V", kV));
  auto o = graph->tensor(bshd(s, s.heads, "O", kO));
  auto dout = graph->tensor(bshd(s, s.heads, "dO", kDO));
  auto lse = graph->tensor(stats(s));
  auto attributes = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward");
  attributes.set_deterministic_algorithm(deterministic);
  set_scale_and_mask(attributes, s);
  auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, dout, lse, attributes);
  for (auto [t, heads, name, uid] : {std::tuple{dq, s.heads, "dQ", kDQ}, std::tuple{dk, s.kv_heads, "dK", kDK},
                                     std::tuple{dv, s.kv_heads, "dV", kDV}}) {
    const auto layout = bshd(s, heads, name, uid);
    t->set_output(true).set_uid(uid).set_dim(layout.get_dim()).set_stride(layout.get_stride());
  }
  return graph;
}

// Validates, lowers and plans a graph (cuDNN's heuristics A).
fe::error_t build(fe::graph::Graph& graph, cudnnHandle_t h) {
  if (fe::error_t e = graph.validate(); !e.is_good()) return e;
  if (fe::error_t e = graph.build_operation_graph(h); !e.is_good()) return e;
  if (fe::error_t e = graph.create_execution_plans({fe::HeurMode_t::A}); !e.is_good()) return e;
  if (fe::error_t e = graph.check_support(); !e.is_good()) return e;
  return graph.build_plans();
}

// cuDNN's deterministic backward (no atomics: the same bits every run, as the rest of a step) keeps
// dP, [batch, heads, seq, seq] bf16 in tiles of 64 x 128, in its workspace; up to this much of it
// the backward is deterministic, beyond it cuDNN's default (dq summed with float atomics, workspace
// O(seq)). FP8KIT_SDPA_DETERMINISTIC=0 takes the default at every size (PyTorch's choice: faster,
// the last bits of dq may vary from run to run).
constexpr int64_t kMaxDeterministicWorkspace = int64_t{4} << 30;

bool deterministic(const ops::SdpaShape& s) {
  static const bool wanted = [] {
    const char* v = std::getenv("FP8KIT_SDPA_DETERMINISTIC");
    return v == nullptr || std::string_view(v) != "0";
  }();
  auto round_up = [](int64_t n, int64_t tile) { return (n + tile - 1) / tile * tile; };
  return wanted && s.batch * s.heads * round_up(s.seq, 64) * round_up(s.seq, 128) * 2 <= kMaxDeterministicWorkspace;
}

// The graph of (lane, direction, shape, padding), built at its first call. A backward that cuDNN has
// no deterministic algorithm for takes its default.
const Built& graph_for(ops::Context& c, const ops::SdpaShape& s, bool backward, bool padded) {
  cudnnHandle_t h = handle(c);
  const GraphKey key{static_cast<int>(c.lane()), backward, s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, s.causal,
                     std::bit_cast<uint32_t>(s.scale), padded, s.fp8};
  auto& graphs = c.cuda().sdpa->graphs;
  if (auto it = graphs.find(key); it != graphs.end()) return it->second;
  const std::string_view op = backward ? "sdpa_backward" : "sdpa_forward";
  Built built;
  built.graph = backward ? backward_graph(s, deterministic(s)) : forward_graph(s, padded);
  fe::error_t status = build(*built.graph, h);
  if (backward && deterministic(s) && !status.is_good()) {
    built.graph = backward_graph(s, false);
    status = build(*built.graph, h);
  }
  FP8KIT_CHECK(status.is_good(), "{}: cuDNN has no fused attention for {} (cuDNN {}): {}", op,
               describe(s, padded), cudnnGetVersion(), status.get_message());
  FP8KIT_CHECK(built.graph->get_workspace_size(built.workspace).is_good(), "{}: cuDNN's workspace size", op);
  return graphs.emplace(key, std::move(built)).first->second;
}

constexpr size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The lane's scratch, cut into 256-byte aligned pieces: cuDNN's workspace, then bf16 buffers.
struct Scratch {
  std::byte* next;
  void* take(size_t bytes) {
    void* p = next;
    next += aligned(bytes);
    return p;
  }
};

// A tensor's bf16 data: its own (bf16 tensors), or a bf16 copy of f32 values (cast when `in`) in scratch.
void* bf16_data(ops::Context& c, Scratch& scratch, const Tensor& t, bool in) {
  if (t.dtype() == DType::Bf16) return const_cast<void*>(static_cast<const void*>(t.device_data<uint16_t>()));
  auto* copy = static_cast<uint16_t*>(scratch.take(t.numel() * sizeof(uint16_t)));
  if (in) float_to_bf16(t.device_data<float>(), t.numel(), copy, ops::stream(c));
  return copy;
}

// An f32 output's values from its bf16 buffer (nothing to do for bf16 tensors).
void finish(ops::Context& c, const void* bf16, Tensor& t) {
  if (t.dtype() == DType::F32) bf16_to_float(static_cast<const uint16_t*>(bf16), t.numel(), t.device_data<float>(),
                                             ops::stream(c));
}

void execute(ops::Context& c, const Built& built, std::unordered_map<int64_t, void*>& pack, void* workspace,
             std::string_view op) {
  fe::error_t status = built.graph->execute(handle(c), pack, workspace);
  FP8KIT_CHECK(status.is_good(), "{}: cuDNN's execution failed: {}", op, status.get_message());
}

}  // namespace

}  // namespace fp8kit::cuda

namespace fp8kit::ops {

namespace {

// The FP8 forward: amaxes, scales and E4M3 codes of q, k and v, cuDNN's sdpa_fp8 into out's codes, and
// those dequantized into out.
void sdpa_forward_fp8(Context& c, const cuda::Built& built, const Tensor& q, const Tensor& k, const Tensor& v,
                      Tensor& out, Tensor& lse) {
  const size_t bytes = cuda::aligned(built.workspace) + 2 * cuda::aligned(q.numel()) + 2 * cuda::aligned(k.numel()) +
                       cuda::aligned(cuda::kSdpaFp8Floats * sizeof(float));
  cuda::Scratch scratch{static_cast<std::byte*>(c.scratch(bytes))};
  void* workspace = scratch.take(built.workspace);
  auto* scales = static_cast<float*>(scratch.take(cuda::kSdpaFp8Floats * sizeof(float)));
  const Tensor* inputs[] = {&q, &k, &v};
  uint8_t* codes[4];
  for (int i = 0; i < 3; ++i) codes[i] = static_cast<uint8_t*>(scratch.take(inputs[i]->numel()));
  codes[3] = static_cast<uint8_t*>(scratch.take(out.numel()));
  FP8KIT_CUDA_CHECK(cudaMemsetAsync(scales, 0, cuda::kSdpaFp8Floats * sizeof(float), stream(c)));
  cuda::QuantizeArgs args[3];
  for (int i = 0; i < 3; ++i) {  // the amax pass (no codes)
    const Tensor& x = *inputs[i];
    args[i] = {.x = x.device_data<std::byte>(), .x_type = x.dtype(), .rows = x.dim(0) * x.dim(1), .cols = x.dim(2),
               .scale = scales + cuda::kSdpaFp8Scale + i, .amax = scales + cuda::kSdpaFp8Amax + i};
  }
  cuda::quantize_fp8_batch(args, stream(c));
  cuda::sdpa_fp8_scales(scales, stream(c));
  for (int i = 0; i < 3; ++i) args[i].q = codes[i], args[i].amax = nullptr;
  cuda::quantize_fp8_batch(args, stream(c));
  const float* scale = scales + cuda::kSdpaFp8Scale;
  const float* scale_inv = scales + cuda::kSdpaFp8ScaleInv;
  std::unordered_map<int64_t, void*> pack = {
      {cuda::kQ, codes[0]}, {cuda::kK, codes[1]}, {cuda::kV, codes[2]}, {cuda::kO, codes[3]},
      {cuda::kStats, lse.device_data<float>()},
      {cuda::kDescaleQ, const_cast<float*>(scale_inv)}, {cuda::kDescaleK, const_cast<float*>(scale_inv + 1)},
      {cuda::kDescaleV, const_cast<float*>(scale_inv + 2)}, {cuda::kDescaleS, const_cast<float*>(scale_inv + 4)},
      {cuda::kScaleS, const_cast<float*>(scale + 4)}, {cuda::kScaleO, const_cast<float*>(scale + 3)},
      {cuda::kAmaxS, scales + cuda::kSdpaFp8CudnnAmax}, {cuda::kAmaxO, scales + cuda::kSdpaFp8CudnnAmax + 1}};
  cuda::execute(c, built, pack, workspace, "sdpa_forward (fp8)");
  cuda::sdpa_fp8_dequantize(codes[3], scale_inv + 3, out.numel(), out.dtype() == DType::Bf16,
                            out.device_data<std::byte>(), stream(c));
}

}  // namespace

void cuda_sdpa_forward(Context& c, const SdpaShape& s, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                       Tensor& lse, const Tensor* lengths) {
  const cuda::Built& built = cuda::graph_for(c, s, false, lengths != nullptr);
  if (s.fp8) {
    sdpa_forward_fp8(c, built, q, k, v, out, lse);
    return;
  }
  const bool copies = q.dtype() == DType::F32;
  const size_t bf16_bytes = (2 * q.numel() + 2 * k.numel()) * sizeof(uint16_t) + 4 * 256;
  cuda::Scratch scratch{static_cast<std::byte*>(c.scratch(cuda::aligned(built.workspace) + (copies ? bf16_bytes : 0)))};
  void* workspace = scratch.take(built.workspace);
  std::unordered_map<int64_t, void*> pack = {
      {cuda::kQ, cuda::bf16_data(c, scratch, q, true)},     {cuda::kK, cuda::bf16_data(c, scratch, k, true)},
      {cuda::kV, cuda::bf16_data(c, scratch, v, true)},     {cuda::kO, cuda::bf16_data(c, scratch, out, false)},
      {cuda::kStats, lse.device_data<float>()}};
  if (lengths != nullptr) {
    void* n = const_cast<int32_t*>(lengths->device_data<int32_t>());
    pack.insert({{cuda::kSeqLenQ, n}, {cuda::kSeqLenKV, n}});
  }
  cuda::execute(c, built, pack, workspace, "sdpa_forward");
  cuda::finish(c, pack[cuda::kO], out);
}

void cuda_sdpa_backward(Context& c, const SdpaShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  if (s.seq == 1) {
    cuda::sdpa_single_key_backward(s, dout.dtype() == DType::Bf16, dout.device_data<std::byte>(),
                                   dq.device_data<std::byte>(), dk.device_data<std::byte>(),
                                   dv.device_data<std::byte>(), stream(c));
    return;
  }
  const cuda::Built& built = cuda::graph_for(c, s, true, false);
  const bool copies = q.dtype() == DType::F32;
  const size_t bf16_bytes = (4 * q.numel() + 4 * k.numel()) * sizeof(uint16_t) + 8 * 256;
  cuda::Scratch scratch{static_cast<std::byte*>(c.scratch(cuda::aligned(built.workspace) + (copies ? bf16_bytes : 0)))};
  void* workspace = scratch.take(built.workspace);
  std::unordered_map<int64_t, void*> pack = {
      {cuda::kQ, cuda::bf16_data(c, scratch, q, true)},       {cuda::kK, cuda::bf16_data(c, scratch, k, true)},
      {cuda::kV, cuda::bf16_data(c, scratch, v, true)},       {cuda::kO, cuda::bf16_data(c, scratch, out, true)},
      {cuda::kDO, cuda::bf16_data(c, scratch, dout, true)},   {cuda::kDQ, cuda::bf16_data(c, scratch, dq, false)},
      {cuda::kDK, cuda::bf16_data(c, scratch, dk, false)},    {cuda::kDV, cuda::bf16_data(c, scratch, dv, false)},
      {cuda::kStats, const_cast<float*>(lse.device_data<float>())}};
  cuda::execute(c, built, pack, workspace, "sdpa_backward");
  cuda::finish(c, pack[cuda::kDQ], dq);
  cuda::finish(c, pack[cuda::kDK], dk);
  cuda::finish(c, pack[cuda::kDV], dv);
}

}  // namespace fp8kit::ops
