// SeedClassifierCuda: the CPU model's forward/backward (models/seed_classifier.cpp) kernel by kernel.
// Parameters, gradients and Adam moments each live in one device buffer (every parameter at a
// 256-byte aligned offset), so Adam is one launch. Mixed bf16 rounds where the CPU rounds; GEMM
// operands are laid out K-major for cuBLASLt: FP8 operands come from quantize_fp8 with their
// transposed copies, bf16 ones from float_to_bf16_transposed (copy + transposed copy in one pass),
// the 8 weights in one launch per step (bf16: with the input query, key and value share; FP8: on the
// key lane, beside the embedding). The step is
// launch-bound (every GEMM is about 6400x32x32), so kernels are fused where the CPU's rounding points
// allow it: an FP8 Linear's input (or output gradient) is quantized and multiplied in one launch
// (cuda::quantize_fp8_gemm, tensor-core MMAs) where its shape fits; a Linear's bias + ReLU runs with
// the dropout and residual sum after it
// (cuda::linear_outputs) or inside the next Linear's input cast, its backward (ReLU mask, dropout)
// inside the cast or quantization of its output gradient. Weight gradients (wgrad GEMMs, bias and
// LayerNorm parameter sums) and the embedding gradient's sort run on a second stream that the main
// one forks and joins (two branches of the graph), so the main chain holds only what the next
// layer's gradient waits for.
#include "models/seed_classifier_cuda.h"

#include "base/error.h"
#include "nn/linear.h"
#include "ops/cuda/adam.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/binary_crossentropy.h"
#include "ops/cuda/convert.h"
#include "ops/cuda/current_scaling.h"
#include "ops/cuda/dropout.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/layer_norm.h"
#include "ops/cuda/mean_pool.h"
#include "ops/cuda/quantize.h"
#include "ops/cuda/scaling_update.h"
#include "ops/cuda/small_fp8_gemm.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/graph.h"
#include "runtime/cuda/stream.h"

#include <algorithm>
#include <map>
#include <string>

namespace fp8kit::models {

using cuda::DeviceBuffer;
using cuda::Event;
using cuda::Graph;
using nn::Precision;

namespace {

// The CPU model's dropout site ids (seed_classifier.cpp), in its order.
enum Site : uint32_t { kEmbeddingDropout, kAttentionProbs, kAttentionDropout, kFeedforwardDropout, kPoolDropout,
                       kHeadDropout };

// The parameters() order of SeedClassifier, by index.
enum Param : int { kToken, kPosition, kQueryW, kQueryB, kKeyW, kKeyB, kValueW, kValueB, kAttnOutW, kAttnOutB,
                   kNorm1G, kNorm1B, kInterW, kInterB, kOutW, kOutB, kNorm2G, kNorm2B, kDenseW, kDenseB, kDense1W,
                   kDense1B, kParamCount };

constexpr int64_t kAlign = 64;  // floats: 256 bytes

int64_t align_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// One Linear (y [rows, out] = act(x [rows, in] W [in, out] + b)) with its precision's GEMM operands.
struct LinearCuda {
  int64_t rows = 0, in = 0, out = 0;
  bool relu = false;
  Precision precision = Precision::Fp32;
  float *w = nullptr, *b = nullptr, *dw = nullptr, *db = nullptr;  // in the model's parameter buffers
  int scaling = 0;  // FP8: index of the inputs state; kernel = +1, outputs_grad = +2
  const float* x = nullptr;  // the forward's input
  DeviceBuffer<float> y, g, dx;                   // [rows, out], [rows, out] (fp32), [rows, in]
  DeviceBuffer<float> w_t, x_t, g_t;              // fp32: [out, in], [in, rows], [out, rows]
  DeviceBuffer<uint16_t> xb, wb, w_tb, x_tb, gb, g_tb;  // bf16: as above, plus [rows, in], [in, out], [rows, out]
  const LinearCuda* input_of = nullptr;  // bf16: the Linear whose xb, x_tb this one reads (null: its own)
  DeviceBuffer<uint8_t> xq, xq_t, wq, wq_t, gq, gq_t;  // fp8 codes: [rows, in], [in, rows], [in, out], [out, in], ...

  void allocate() {
    y = DeviceBuffer<float>(rows * out);
    dx = DeviceBuffer<float>(rows * in);
    switch (precision) {
      case Precision::Fp32:
        g = DeviceBuffer<float>(rows * out);
        w_t = DeviceBuffer<float>(out * in);
        x_t = DeviceBuffer<float>(in * rows);
        g_t = DeviceBuffer<float>(out * rows);
        break;
      case Precision::Bf16:
        if (input_of == nullptr) {
          xb = DeviceBuffer<uint16_t>(rows * in);
          x_tb = DeviceBuffer<uint16_t>(in * rows);
        }
        wb = DeviceBuffer<uint16_t>(in * out);
        w_tb = DeviceBuffer<uint16_t>(out * in);
        gb = DeviceBuffer<uint16_t>(rows * out);
        g_tb = DeviceBuffer<uint16_t>(out * rows);
        break;
      case Precision::Fp8:
        xq = DeviceBuffer<uint8_t>(rows * in);
        xq_t = DeviceBuffer<uint8_t>(in * rows);
        wq = DeviceBuffer<uint8_t>(in * out);
        wq_t = DeviceBuffer<uint8_t>(out * in);
        gq = DeviceBuffer<uint8_t>(rows * out);
        gq_t = DeviceBuffer<uint8_t>(out * rows);
        break;
    }
  }
};

}  // namespace

struct SeedClassifierCuda::Impl {
  SeedClassifierConfig config;
  uint64_t seed;
  int64_t B, T, D, H;
  Precision precision;
  Fp8Recipe recipe;
  optim::AdamOptions adam;
  bool bf16;

  cuda::Stream stream;
  cuda::GemmContext gemms;
  // The backward's side branch: work that nothing on `stream` needs before the step's end (weight
  // gradients: wgrad GEMMs, bias and LayerNorm parameter sums; the sort of the token ids for the
  // embedding gradient) runs on `side`, forked from and joined back into `stream` with events, so
  // that a captured step is a graph of two branches and the main chain keeps only what the next
  // layer's gradient waits for. `side` has its own GEMM context (cuBLASLt workspace).
  cuda::Stream side;
  cuda::GemmContext side_gemms;
  Event fork_event, sorted_event, gradients_event, join_event;
  // Key's and value's GEMMs (forward; dgrad, then bf16/FP8 wgrad), with their FP8 quantizations, run
  // beside query's on two more streams ("lanes"), each with its own GEMM context, joined back before
  // their results are used; the FP8 weights are quantized on the key lane at the step's start.
  enum Lane { kMainLane, kSideLane, kKeyLane, kValueLane };
  cuda::Stream key_lane, value_lane;
  cuda::GemmContext key_gemms, value_gemms;
  Event key_done, value_done;
  std::vector<int64_t> offsets;  // per parameter, into the buffers below
  std::vector<int64_t> sizes;
  int64_t total = 0;
  DeviceBuffer<float> params, grads, adam_m, adam_v, adam_iterations;
  DeviceBuffer<uint64_t> step_counter;
  uint64_t host_step = 0;

  // FP8 scaling state: 8 Linears x (inputs, kernel, outputs_grad).
  cuda::ScalingBatch scaling{};
  DeviceBuffer<float> amax_history, amax, scale, scale_inv, fp8_max;
  // Current scaling in evaluation: the amaxes and scales of the tensors evaluated, apart from the
  // training state (which evaluation leaves as it is, as the CPU's does).
  DeviceBuffer<float> eval_amax, eval_scale;
  // scale_inv[i] at gemm_scale_inv[4 i]: cuBLASLt wants 16-byte aligned scale pointers (else the
  // GEMM wrapper adds a copy per operand).
  DeviceBuffer<float> gemm_scale_inv;
  const float* gemm_scale(int i) const { return gemm_scale_inv.data() + 4 * i; }

  LinearCuda query, key, value, attn_out, inter, ffn_out, dense, dense_1;

  // Activations ([B, T, D] unless said otherwise) and gradients.
  DeviceBuffer<int32_t> tokens;  // [B, T]
  DeviceBuffer<float> labels;    // [B]
  DeviceBuffer<float> x0d, stats, context, r1, x1, mean1, rstd1, r2, x2, mean2, rstd2;
  DeviceBuffer<float> pooled_d, h2_d, probs, loss, dz;  // [B, D], [B, 32], [B], [1], [B]
  DeviceBuffer<float> d_pooled_x, d_r2, d_r1, dq, dk, dv, d_x0e;

  // Scratch of the deterministic gradient sums: bias and LayerNorm partial sums (floats; on the side
  // stream, one after the other; fp32 sums its bias gradients on the main stream, in main_sum_scratch),
  // the embedding backward's token sort (bytes); and the attention backward's per-pair values.
  DeviceBuffer<float> sum_scratch, main_sum_scratch;
  DeviceBuffer<uint8_t> embedding_scratch, attention_scratch;

  Graph graph;

  float* param(int i) { return params.data() + offsets[i]; }
  float* grad(int i) { return grads.data() + offsets[i]; }

  cuda::DropoutSite site(uint32_t id, bool training) const {
    return {seed, step_counter.data(), id, config.dropout, training && config.dropout > 0.0f};
  }

  void setup_linear(LinearCuda& l, int w, int64_t rows, int64_t in, int64_t out, bool relu, int index,
                    const LinearCuda* input_of = nullptr) {
    l.input_of = input_of;
    l.rows = rows;
    l.in = in;
    l.out = out;
    l.relu = relu;
    l.precision = precision;
    l.w = param(w);
    l.b = param(w + 1);
    l.dw = grad(w);
    l.db = grad(w + 1);
    l.scaling = 3 * index;
    l.allocate();
  }

  cudaStream_t s() const { return stream.get(); }

  // Work queued next on `to` waits for the work queued so far on `from` (through `event`).
  static void wait(cudaStream_t to, cudaStream_t from, const Event& event) {
    FP8KIT_CUDA_CHECK(cudaEventRecord(event.get(), from));
    FP8KIT_CUDA_CHECK(cudaStreamWaitEvent(to, event.get(), 0));
  }
  // The side branch waits for the main stream's work so far.
  void fork() { wait(side.get(), s(), fork_event); }
  // Key's and value's lanes wait for the main stream's work so far; the main stream waits for theirs.
  void fork_lanes() {
    FP8KIT_CUDA_CHECK(cudaEventRecord(fork_event.get(), s()));
    for (const cuda::Stream* lane : {&key_lane, &value_lane})
      FP8KIT_CUDA_CHECK(cudaStreamWaitEvent(lane->get(), fork_event.get(), 0));
  }
  void join_lanes() {
    wait(s(), key_lane.get(), key_done);
    wait(s(), value_lane.get(), value_done);
  }
  const Event& done_event(Lane lane) const { return lane == kKeyLane ? key_done : value_done; }
  cudaStream_t stream_of(Lane lane) const {
    return lane == kSideLane ? side.get() : lane == kKeyLane ? key_lane.get() : lane == kValueLane ? value_lane.get()
                                                                                                  : s();
  }

  bool current_scaling() const { return precision == Precision::Fp8 && recipe.mode == ScalingMode::Current; }
  // Keras lag: the state keeps Keras's multiplier (scale_inv) and quantization divides by it.
  bool keras_lag() const { return recipe.mode == ScalingMode::Delayed && recipe.lag == ScalingLag::Keras; }

  // FP8 quantization arguments for x [rows, cols] with state `i`'s scale; amax recorded when training
  // (current scaling: by current_scales, before).
  cuda::QuantizeArgs quantize_args(int i, Fp8Format format, const float* x, int64_t rows, int64_t cols, uint8_t* q,
                                   uint8_t* q_t, bool training, cuda::LinearEpilogue epilogue = {}) {
    const bool keras = keras_lag(), current = current_scaling();
    cuda::QuantizeArgs a;
    a.x = x;
    a.x_type = DType::F32;
    a.rows = rows;
    a.cols = cols;
    a.format = format;
    a.scale = keras ? scale_inv.data() + i : current && !training ? eval_scale.data() + i : scale.data() + i;
    a.divide = keras;
    a.q = q;
    a.q_t = q_t;
    a.amax = training && !current ? amax.data() + i : nullptr;
    a.epilogue = epilogue;
    return a;
  }

  // Current scaling, before `args` (of states `states`) are quantized: their own amaxes (a quantize
  // pass without outputs), then their scales and the GEMMs' scale_invs, on the device (queued on
  // `stream`). Training writes the state (amax, recorded by update_scaling, and scale); evaluation its
  // own copies.
  void current_scales(std::vector<cuda::QuantizeArgs> args, const std::vector<int>& states, bool training,
                      cudaStream_t stream) {
    float* amaxes = training ? amax.data() : eval_amax.data();
    for (size_t k = 0; k < args.size(); ++k) {
      args[k].q = nullptr;
      args[k].q_t = nullptr;
      args[k].amax = amaxes + states[k];
      args[k].epilogue.y = nullptr;  // the quantization pass writes the epilogue's output
    }
    cuda::quantize_fp8_batch(args, stream);
    cuda::current_scales(states, amaxes, fp8_max.data(), recipe.scale_options,
                         training ? scale.data() : eval_scale.data(), gemm_scale_inv.data(), 4, stream);
  }

  // FP8: all 8 weights quantized up front in one launch on `stream` (weights do not change within a
  // forward); current scaling adds 2 launches before it for the amaxes and scales.
  void quantize_weights(bool training, cudaStream_t stream) {
    const Fp8Format f = recipe.forward_format;
    std::vector<cuda::QuantizeArgs> args;
    std::vector<int> states;
    for (LinearCuda* l : {&query, &key, &value, &attn_out, &inter, &ffn_out, &dense, &dense_1}) {
      args.push_back(quantize_args(l->scaling + 1, f, l->w, l->in, l->out, l->wq.data(), l->wq_t.data(), training));
      states.push_back(l->scaling + 1);
    }
    if (current_scaling()) current_scales(args, states, training, stream);
    cuda::quantize_fp8_batch(args, stream);
  }

  // Queued on `lane`'s stream, with its GEMM context.
  void gemm(int64_t m, int64_t n, int64_t k, const void* a, DType at, const void* b, DType bt, float* y,
            const float* a_scale_inv = nullptr, const float* b_scale_inv = nullptr, bool fast = false,
            Lane lane = kMainLane) {
    cuda::GemmArgs g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = a;
    g.a_type = at;
    g.b = b;
    g.b_type = bt;
    g.y = y;
    g.y_type = DType::F32;
    g.a_scale_inv = a_scale_inv;
    g.b_scale_inv = b_scale_inv;
    g.fast_accumulation = fast;
    cuda::GemmContext& context =
        lane == kSideLane ? side_gemms : lane == kKeyLane ? key_gemms : lane == kValueLane ? value_gemms : gemms;
    context.gemm(g, stream_of(lane));
  }

  // An FP8 GEMM (as gemm); shapes that cuBLASLt would pad (n or k not a multiple of 16: dense_1's one
  // output) run small_fp8_gemm instead, one launch instead of the padded copies.
  void fp8_gemm(int64_t m, int64_t n, int64_t k, const uint8_t* a, Fp8Format af, const uint8_t* b, Fp8Format bf,
                float* y, const float* a_scale_inv, const float* b_scale_inv, bool fast, Lane lane = kMainLane) {
    if (n % 16 != 0 || k % 16 != 0) {
      cuda::small_fp8_gemm(m, n, k, a, af, b, bf, a_scale_inv, b_scale_inv, y, stream_of(lane));
      return;
    }
    gemm(m, n, k, a, dtype_of(af), b, dtype_of(bf), y, a_scale_inv, b_scale_inv, fast, lane);
  }

  // bf16: the weights' GEMM operands (wb for dgrad when training, w_tb) and, when x is set, the cast of
  // the input x [B T, D] that query, key and value share, in one launch (weights do not change within
  // a step).
  void cast_weights_and_qkv_input(const float* x, bool training) {
    std::vector<cuda::Bf16Cast> casts;
    for (LinearCuda* l : {&query, &key, &value, &attn_out, &inter, &ffn_out, &dense, &dense_1})
      casts.push_back({l->w, l->in, l->out, training ? l->wb.data() : nullptr, l->w_tb.data()});
    casts.push_back({x, query.rows, query.in, query.xb.data(), training ? query.x_tb.data() : nullptr});
    cuda::float_to_bf16_transposed(casts, s());
  }

  // fp32: the weights' transposes for fprop (w_t), in one launch.
  void transpose_weights() {
    std::vector<cuda::Transpose> transposes;
    for (LinearCuda* l : {&query, &key, &value, &attn_out, &inter, &ffn_out, &dense, &dense_1})
      transposes.push_back({l->w, l->in, l->out, l->w_t.data()});
    cuda::transpose(transposes, s());
  }

  // l's epilogue (bias, ReLU) on its GEMM output l.y, in place; then, when out is set, dropout and the
  // residual sum that follow it in the model (out = residual + dropout(l.y)).
  cuda::LinearOutput output(LinearCuda& l, cuda::DropoutSite dropout = {}, const float* residual = nullptr,
                            float* out = nullptr) const {
    return {l.y.data(), l.b, l.rows, l.out, l.relu, dropout, residual, out};
  }

  // The GEMM of l's forward, l.y = x W, after x's cast (bf16) or quantization (FP8) unless x_ready (made
  // up front by cast_weights_and_qkv_input; the weights' operands always are). l's epilogue is the
  // caller's: cuda::linear_outputs(output(l, ...)), or, when x is the output of a Linear `producer`
  // whose epilogue is still to do, fused into x's cast here. The GEMM runs on `lane`, and so does an
  // FP8 quantization (a bf16 cast is the main stream's: another lane needs x_ready).
  void linear_forward(LinearCuda& l, const float* x, bool training, bool x_ready = false,
                      LinearCuda* producer = nullptr, Lane lane = kMainLane) {
    FP8KIT_CHECK(lane == kMainLane || x_ready || precision == Precision::Fp8,
                 "a bf16 or fp32 GEMM on another lane needs its operands made up front");
    const cudaStream_t stream = stream_of(lane);
    l.x = x;
    const int64_t M = l.rows, N = l.out, K = l.in;
    cuda::LinearEpilogue pending{};
    if (producer != nullptr) pending = {producer->b, producer->relu, bf16, producer->y.data()};
    if (producer != nullptr && precision == Precision::Fp32) {  // no cast to fuse it into
      const cuda::LinearOutput o = output(*producer);
      cuda::linear_outputs({&o, 1}, bf16, s());
    }
    switch (precision) {
      case Precision::Fp32:  // w_t from transpose_weights
        gemm(M, N, K, x, DType::F32, l.w_t.data(), DType::F32, l.y.data(), nullptr, nullptr, false, lane);
        break;
      case Precision::Bf16: {
        // The input's bf16 copy for fprop and, when training, its transposed copy for wgrad.
        if (!x_ready) {
          cuda::Bf16Cast cast{x, M, K, l.xb.data(), training ? l.x_tb.data() : nullptr, pending};
          cuda::float_to_bf16_transposed({&cast, 1}, s());
        }
        const LinearCuda& in = l.input_of != nullptr ? *l.input_of : l;
        gemm(M, N, K, in.xb.data(), DType::Bf16, l.w_tb.data(), DType::Bf16, l.y.data(), nullptr, nullptr, false,
             lane);
        break;
      }
      case Precision::Fp8: {
        const Fp8Format f = recipe.forward_format;
        if (!x_ready) {
          cuda::QuantizeArgs args =
              quantize_args(l.scaling, f, x, M, K, l.xq.data(), l.xq_t.data(), training, pending);
          if (current_scaling()) current_scales({args}, {l.scaling}, training, stream);
          if (cuda::quantize_fp8_gemm_fits(K, N)) {  // the quantization and the GEMM in one launch
            args.q = nullptr;  // only the transposed codes (wgrad's) are read after it
            cuda::quantize_fp8_gemm(args, l.wq_t.data(), f, N, gemm_scale(l.scaling), gemm_scale(l.scaling + 1),
                                    l.y.data(), stream);
            break;
          }
          cuda::quantize_fp8(args, stream);
        }
        fp8_gemm(M, N, K, l.xq.data(), f, l.wq_t.data(), f, l.y.data(), gemm_scale(l.scaling),
                 gemm_scale(l.scaling + 1), true, lane);
        break;
      }
    }
  }

  // One Linear's output gradient dy: of its output, or, with an active `dropout`, of the dropout that
  // followed it.
  struct OutputGrad {
    LinearCuda* l;
    const float* dy;
    cuda::DropoutSite dropout{};
    Lane lane = kMainLane;  // of the dgrad GEMM (key's and value's lanes are joined back at the end)
  };

  // The backward of Linears of one shape whose output gradients are ready together (query, key and
  // value after the attention's backward). Main stream: each one's gradient g (the backward of its
  // ReLU and of the dropout after it, from dy) cast to bf16 or quantized, with its transposed copy, in
  // one launch, then the dgrad GEMMs on their lanes; FP8 where the shape fits: each one's quantization
  // and dgrad in one launch on its lane. Side branch: the bias gradients (recomputing g from dy, in one
  // pass) and the wgrad GEMMs (a lane's on the lane). fp32 has no cast to fold g into: its bias pass
  // writes g on the main stream.
  void linear_backward(std::span<const OutputGrad> group) {
    LinearCuda& first = *group[0].l;
    const int64_t M = first.rows, N = first.out, K = first.in;
    const bool lanes = std::any_of(group.begin(), group.end(), [](const OutputGrad& o) { return o.lane != kMainLane; });
    std::vector<cuda::BiasBackward> bias;
    for (const OutputGrad& o : group) {
      const cuda::EpilogueGradient gradient{o.l->relu, o.l->y.data(), o.dropout, bf16};
      bias.push_back({o.dy, gradient, precision == Precision::Fp32 ? o.l->g.data() : nullptr, o.l->db});
    }
    switch (precision) {
      case Precision::Fp32:
        cuda::bias_backward(bias, M, N, nn::Linear::kBiasGradientOrder, main_sum_scratch.data(), s());
        fork();
        {
          std::vector<cuda::Transpose> transposes;
          for (const OutputGrad& o : group) {
            LinearCuda& l = *o.l;
            transposes.push_back({l.x, M, K, l.x_t.data()});
            transposes.push_back({l.g.data(), M, N, l.g_t.data()});
          }
          cuda::transpose(transposes, side.get());
        }
        if (lanes) fork_lanes();
        for (const OutputGrad& o : group) {
          LinearCuda& l = *o.l;
          gemm(M, K, N, l.g.data(), DType::F32, l.w, DType::F32, l.dx.data(), nullptr, nullptr, false,
               o.lane);  // dx = g W^T
          dgrad_done(o.lane);
          gemm(K, N, M, l.x_t.data(), DType::F32, l.g_t.data(), DType::F32, l.dw, nullptr, nullptr, false,
               kSideLane);  // dW = x^T g (its operands were transposed on the side branch)
        }
        break;
      case Precision::Bf16: {
        // wb and the input's x_tb come from the forward.
        std::vector<cuda::Bf16Cast> casts;
        for (size_t t = 0; t < group.size(); ++t) {
          LinearCuda& l = *group[t].l;
          casts.push_back({group[t].dy, M, N, l.gb.data(), l.g_tb.data(), {}, bias[t].gradient});
        }
        cuda::float_to_bf16_transposed(casts, s());
        fork();
        if (lanes) fork_lanes();
        cuda::bias_backward(bias, M, N, nn::Linear::kBiasGradientOrder, sum_scratch.data(), side.get());
        for (const OutputGrad& o : group) {
          LinearCuda& l = *o.l;
          gemm(M, K, N, l.gb.data(), DType::Bf16, l.wb.data(), DType::Bf16, l.dx.data(), nullptr, nullptr, false,
               o.lane);
          dgrad_done(o.lane);
          const LinearCuda& in = l.input_of != nullptr ? *l.input_of : l;
          gemm(K, N, M, in.x_tb.data(), DType::Bf16, l.g_tb.data(), DType::Bf16, l.dw, nullptr, nullptr, false,
               wgrad_lane(o.lane));
        }
        break;
      }
      case Precision::Fp8: {
        const Fp8Format fb = recipe.backward_format, ff = recipe.forward_format;
        std::vector<cuda::QuantizeArgs> args;
        std::vector<int> states;
        for (size_t t = 0; t < group.size(); ++t) {
          LinearCuda& l = *group[t].l;
          args.push_back(quantize_args(l.scaling + 2, fb, group[t].dy, M, N, l.gq.data(), l.gq_t.data(), true));
          args.back().gradient = bias[t].gradient;
          states.push_back(l.scaling + 2);
        }
        // Each Linear's gradient quantization and dgrad GEMM in one launch on its lane when the shape
        // fits (its MMAs accumulate in fp32 registers, as the split accumulator that dgrad asks for);
        // else the quantizations in one launch, then the GEMMs.
        const bool fused = cuda::quantize_fp8_gemm_fits(N, K);
        if (fused) {
          if (lanes) fork_lanes();
          for (size_t t = 0; t < group.size(); ++t) {
            LinearCuda& l = *group[t].l;
            const cudaStream_t stream = stream_of(group[t].lane);
            if (current_scaling()) current_scales({args[t]}, {states[t]}, true, stream);
            args[t].q = nullptr;  // only the transposed codes (wgrad's) are read after it
            cuda::quantize_fp8_gemm(args[t], l.wq.data(), ff, K, gemm_scale(l.scaling + 2), gemm_scale(l.scaling + 1),
                                    l.dx.data(), stream);
            dgrad_done(group[t].lane);
          }
          fork();
        } else {
          if (current_scaling()) current_scales(args, states, true, s());
          cuda::quantize_fp8_batch(args, s());
          fork();
          if (lanes) fork_lanes();
        }
        cuda::bias_backward(bias, M, N, nn::Linear::kBiasGradientOrder, sum_scratch.data(), side.get());
        for (const OutputGrad& o : group) {
          LinearCuda& l = *o.l;
          const int i = l.scaling;
          if (!fused) {
            fp8_gemm(M, K, N, l.gq.data(), fb, l.wq.data(), ff, l.dx.data(), gemm_scale(i + 2), gemm_scale(i + 1),
                     false, o.lane);
            dgrad_done(o.lane);
          }
          fp8_gemm(K, N, M, l.xq_t.data(), ff, l.gq_t.data(), fb, l.dw, gemm_scale(i), gemm_scale(i + 2), false,
                   wgrad_lane(o.lane));
        }
        break;
      }
    }
    // The main stream waits for the lanes' dgrads only; their wgrads join at the step's end.
    for (const OutputGrad& o : group)
      if (o.lane != kMainLane) FP8KIT_CUDA_CHECK(cudaStreamWaitEvent(s(), done_event(o.lane).get(), 0));
  }

  // After a dgrad GEMM on a lane: marks it done (done_event), for the main stream to wait on.
  void dgrad_done(Lane lane) {
    if (lane != kMainLane) FP8KIT_CUDA_CHECK(cudaEventRecord(done_event(lane).get(), stream_of(lane)));
  }
  // A wgrad GEMM runs on its dgrad's lane (after it), or on the side branch when that is the main stream.
  static Lane wgrad_lane(Lane dgrad) { return dgrad == kMainLane ? kSideLane : dgrad; }

  const float* linear_backward(LinearCuda& l, const float* dy, cuda::DropoutSite dropout = {}) {
    const OutputGrad o{&l, dy, dropout};
    linear_backward({&o, 1});
    return l.dx.data();
  }

  // The forward of SeedClassifier::forward; returns the logits [B] before dense_1's epilogue (its bias),
  // which sigmoid() applies.
  const float* forward(bool training) {
    if (current_scaling() && !training) eval_amax.fill_bytes(0, s());
    if (precision == Precision::Fp8) {  // the weights' quantization on the key lane, beside the embedding
      wait(key_lane.get(), s(), fork_event);
      quantize_weights(training, key_lane.get());
      FP8KIT_CUDA_CHECK(cudaEventRecord(key_done.get(), key_lane.get()));
    }
    cuda::embedding_forward({B, T, D, config.vocabulary_size}, tokens.data(), param(kToken), param(kPosition), bf16,
                            site(kEmbeddingDropout, training), x0d.data(), s());
    if (precision == Precision::Fp8) FP8KIT_CUDA_CHECK(cudaStreamWaitEvent(s(), key_done.get(), 0));  // weights
    if (precision == Precision::Bf16) cast_weights_and_qkv_input(x0d.data(), training);
    if (precision == Precision::Fp32) transpose_weights();
    // Query's, key's and value's GEMMs side by side: FP8 quantizes x0d on each lane (each with its own
    // scale, fused with the GEMM); bf16's operands are cast above, fp32 reads x0d as it is.
    fork_lanes();
    const bool x_ready = precision != Precision::Fp8;
    linear_forward(query, x0d.data(), training, x_ready);
    linear_forward(key, x0d.data(), training, x_ready, nullptr, kKeyLane);
    linear_forward(value, x0d.data(), training, x_ready, nullptr, kValueLane);
    join_lanes();
    const cuda::LinearOutput qkv[] = {output(query), output(key), output(value)};
    cuda::linear_outputs(qkv, bf16, s());
    const float *q = query.y.data(), *k = key.y.data(), *v = value.y.data();
    cuda::causal_attention_forward({B, T, H, D / H}, q, k, v, site(kAttentionProbs, training), bf16, stats.data(),
                                   context.data(), s());
    linear_forward(attn_out, context.data(), training);
    const cuda::LinearOutput attn = output(attn_out, site(kAttentionDropout, training), x0d.data(), r1.data());
    cuda::linear_outputs({&attn, 1}, bf16, s());
    cuda::layer_norm_forward(B * T, D, 1e-5f, r1.data(), param(kNorm1G), param(kNorm1B), bf16, x1.data(),
                             mean1.data(), rstd1.data(), s());
    linear_forward(inter, x1.data(), training);
    linear_forward(ffn_out, inter.y.data(), training, false, &inter);  // inter's bias + ReLU in ffn_out's input cast
    const cuda::LinearOutput f = output(ffn_out, site(kFeedforwardDropout, training), x1.data(), r2.data());
    cuda::linear_outputs({&f, 1}, bf16, s());
    cuda::layer_norm_forward(B * T, D, 1e-5f, r2.data(), param(kNorm2G), param(kNorm2B), bf16, x2.data(),
                             mean2.data(), rstd2.data(), s());
    cuda::mean_pool_forward(x2.data(), B, T, D, bf16, site(kPoolDropout, training), pooled_d.data(), s());
    linear_forward(dense, pooled_d.data(), training);
    const cuda::LinearOutput h2 = output(dense, site(kHeadDropout, training), nullptr, h2_d.data());
    cuda::linear_outputs({&h2, 1}, bf16, s());
    linear_forward(dense_1, h2_d.data(), training);
    return dense_1.y.data();
  }

  // probs = sigmoid(z) after dense_1's epilogue on z (fused), with the loss and dz when labels are given.
  void sigmoid(const float* z, const float* y, float* loss_out, float* dz_out) {
    cuda::sigmoid_binary_crossentropy(z, y, B, bf16, probs.data(), loss_out, dz_out, s(),
                                      {dense_1.b, dense_1.relu, bf16, dense_1.y.data()});
  }

  void forward_backward() {
    const int64_t BTD = B * T * D;
    // Delayed scaling: amax is zero here (the constructor's, then each step's spread clears it).
    if (current_scaling()) amax.fill_bytes(0, s());
    // The embedding gradient's sort of the token ids needs only the ids: on the side branch, from the
    // start of the step.
    const cuda::EmbeddingShape embedding{B, T, D, config.vocabulary_size};
    fork();
    cuda::embedding_backward_sort(embedding, tokens.data(), grad(kToken), embedding_scratch.data(),
                                  embedding_scratch.size(), side.get());
    FP8KIT_CUDA_CHECK(cudaEventRecord(sorted_event.get(), side.get()));
    const float* z = forward(true);
    sigmoid(z, labels.data(), loss.data(), dz.data());
    const float* d_h2d = linear_backward(dense_1, dz.data());
    const float* d_pooled_d = linear_backward(dense, d_h2d, site(kHeadDropout, true));
    cuda::mean_pool_backward(d_pooled_d, site(kPoolDropout, true), bf16, B, T, D, d_pooled_x.data(), s());
    fork();
    cuda::layer_norm_backward_params(B * T, D, r2.data(), mean2.data(), rstd2.data(), d_pooled_x.data(), nullptr,
                                     grad(kNorm2G), grad(kNorm2B), sum_scratch.data(), side.get());
    cuda::layer_norm_backward_dx(B * T, D, r2.data(), param(kNorm2G), mean2.data(), rstd2.data(), d_pooled_x.data(),
                                 nullptr, d_r2.data(), s());
    const float* d_h = linear_backward(ffn_out, d_r2.data(), site(kFeedforwardDropout, true));
    const float* d_x1_ffn = linear_backward(inter, d_h);
    fork();
    cuda::layer_norm_backward_params(B * T, D, r1.data(), mean1.data(), rstd1.data(), d_r2.data(), d_x1_ffn,
                                     grad(kNorm1G), grad(kNorm1B), sum_scratch.data(), side.get());
    cuda::layer_norm_backward_dx(B * T, D, r1.data(), param(kNorm1G), mean1.data(), rstd1.data(), d_r2.data(),
                                 d_x1_ffn, d_r1.data(), s());
    const float* d_context = linear_backward(attn_out, d_r1.data(), site(kAttentionDropout, true));
    cuda::causal_attention_backward({B, T, H, D / H}, query.y.data(), key.y.data(), value.y.data(), stats.data(),
                                    site(kAttentionProbs, true), bf16, d_context, dq.data(), dk.data(), dv.data(),
                                    attention_scratch.data(), attention_scratch.size(), s());
    const OutputGrad qkv[] = {{&query, dq.data()}, {&key, dk.data(), {}, kKeyLane}, {&value, dv.data(), {}, kValueLane}};
    linear_backward(qkv);
    // Every weight gradient of the side branch is queued: Adam waits for them (gradients_event), not
    // for the FP8 scaling update queued after them, which runs beside Adam until join().
    FP8KIT_CUDA_CHECK(cudaEventRecord(gradients_event.get(), side.get()));
    if (precision == Precision::Fp8) {
      // The FP8 scaling update on the side branch, after the main stream, which has waited for query's,
      // key's and value's gradient quantizations on their lanes (the last tensors quantized: every
      // amax is in, and no quantization still reads this step's scales); then, once the main stream's
      // last FP8 GEMMs have read this step's scales, the next step's GEMM scale_invs, and its amaxes
      // cleared. (Current scaling computes every GEMM scale_inv right before its use, and clears the
      // amaxes at the step's start.)
      fork();
      cuda::update_scaling(scaling, recipe, side.get());
      if (!current_scaling()) {
        wait(side.get(), s(), fork_event);
        wait(side.get(), key_lane.get(), key_done);  // key's and value's wgrads
        wait(side.get(), value_lane.get(), value_done);
        cuda::spread(scale_inv.data(), scaling.count, 4, gemm_scale_inv.data(), side.get(), amax.data());
      }
    }
    cuda::residual_gradient(d_r1.data(), query.dx.data(), key.dx.data(), value.dx.data(), site(kEmbeddingDropout, true),
                            bf16, d_x0e.data(), BTD, s());
    FP8KIT_CUDA_CHECK(cudaStreamWaitEvent(s(), sorted_event.get(), 0));
    cuda::embedding_backward_sums(embedding, d_x0e.data(), grad(kToken), grad(kPosition), embedding_scratch.data(),
                                  embedding_scratch.size(), s());
    join_lanes();  // key's and value's wgrads
    FP8KIT_CUDA_CHECK(cudaStreamWaitEvent(s(), gradients_event.get(), 0));
  }

  // The main stream waits for the rest of the side branch (the FP8 scaling update): ends a step, which
  // a captured graph needs (every branch joined back) and the next step's quantization (its scales).
  void join() { wait(s(), side.get(), join_event); }

  void update() {
    cuda::adam_step(adam, adam_iterations.data(), params.data(), grads.data(), adam_m.data(), adam_v.data(), total,
                    s(), step_counter.data());
  }

  void upload_tokens(std::span<const int32_t> host_tokens) {
    FP8KIT_CHECK(static_cast<int64_t>(host_tokens.size()) == B * T, "token batch has {} ids, expected {} x {}",
                 host_tokens.size(), B, T);
    for (size_t i = 0; i < host_tokens.size(); ++i)
      FP8KIT_CHECK(host_tokens[i] >= 0 && host_tokens[i] < config.vocabulary_size,
                   "token id {} at position {} is outside the vocabulary [0, {})", host_tokens[i], i,
                   config.vocabulary_size);
    tokens.upload(host_tokens, s());
  }

  void upload_batch(std::span<const int32_t> host_tokens, std::span<const float> host_labels) {
    FP8KIT_CHECK(static_cast<int64_t>(host_labels.size()) == B, "{} labels for a batch of {}", host_labels.size(), B);
    upload_tokens(host_tokens);
    labels.upload(host_labels, s());
  }

  float read_loss() const {
    float value = 0.0f;
    FP8KIT_CUDA_CHECK(cudaMemcpyAsync(&value, loss.data(), sizeof(float), cudaMemcpyDeviceToHost, s()));
    FP8KIT_CUDA_CHECK(cudaStreamSynchronize(s()));
    return value;
  }

  void launch_graph() {
    if (graph.empty()) {
      graph = Graph::capture(s(), [&] {
        forward_backward();
        update();
        join();
      });
    }
    graph.launch(s());
    ++host_step;
  }
};

SeedClassifierCuda::SeedClassifierCuda(SeedClassifier& cpu, uint64_t seed, int batch, optim::AdamOptions adam)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  FP8KIT_CHECK(batch > 0 && batch <= 1024, "batch {} must be in [1, 1024]", batch);
  m.config = cpu.config();
  m.seed = seed;
  m.B = batch;
  m.T = m.config.sequence_length;
  m.D = m.config.hidden_dim;
  m.H = m.config.num_heads;
  m.precision = cpu.precision();
  m.recipe = cpu.recipe();
  m.adam = adam;
  m.bf16 = m.precision != Precision::Fp32;
  FP8KIT_CHECK(m.config.intermediate_dim == m.D, "the GPU seed model needs intermediate_dim == hidden_dim");

  const std::vector<nn::Parameter*> ps = cpu.parameters();
  FP8KIT_CHECK(ps.size() == kParamCount, "the seed model has {} parameters, the GPU twin expects {}", ps.size(),
               static_cast<int>(kParamCount));
  std::vector<float> host;
  for (const nn::Parameter* p : ps) {
    m.offsets.push_back(m.total);
    m.sizes.push_back(p->numel());
    host.resize(static_cast<size_t>(m.total), 0.0f);
    host.insert(host.end(), p->value.begin(), p->value.end());
    m.total = align_up(m.total + p->numel());
  }
  host.resize(static_cast<size_t>(m.total), 0.0f);
  m.params = DeviceBuffer<float>(m.total);
  m.params.upload(host, m.s());
  for (auto* b : {&m.grads, &m.adam_m, &m.adam_v}) {
    *b = DeviceBuffer<float>(m.total);
    b->fill_bytes(0, m.s());
  }
  m.adam_iterations = DeviceBuffer<float>(1);
  m.adam_iterations.fill_bytes(0, m.s());
  m.step_counter = DeviceBuffer<uint64_t>(1);
  m.step_counter.fill_bytes(0, m.s());

  const int64_t B = m.B, T = m.T, D = m.D, BT = B * T;
  m.setup_linear(m.query, kQueryW, BT, D, D, false, 0);
  m.setup_linear(m.key, kKeyW, BT, D, D, false, 1, &m.query);
  m.setup_linear(m.value, kValueW, BT, D, D, false, 2, &m.query);
  m.setup_linear(m.attn_out, kAttnOutW, BT, D, D, false, 3);
  m.setup_linear(m.inter, kInterW, BT, D, m.config.intermediate_dim, true, 4);
  m.setup_linear(m.ffn_out, kOutW, BT, m.config.intermediate_dim, D, false, 5);
  m.setup_linear(m.dense, kDenseW, B, D, m.config.intermediate_dim, true, 6);
  m.setup_linear(m.dense_1, kDense1W, B, m.config.intermediate_dim, 1, false, 7);

  if (m.precision == Precision::Fp8) {
    constexpr int64_t kStates = 24;
    const int64_t L = static_cast<int64_t>(m.recipe.amax_history_length);
    m.amax_history = DeviceBuffer<float>(kStates * L);
    m.amax_history.fill_bytes(0, m.s());
    m.amax = DeviceBuffer<float>(kStates);
    m.amax.fill_bytes(0, m.s());
    std::vector<float> ones(kStates, 1.0f), maxes(kStates);
    for (int64_t i = 0; i < kStates; ++i)
      maxes[i] = fp8kit::fp8_max(i % 3 == 2 ? m.recipe.backward_format : m.recipe.forward_format);
    m.scale = DeviceBuffer<float>(kStates);
    m.scale.upload(ones, m.s());
    m.scale_inv = DeviceBuffer<float>(kStates);
    m.scale_inv.upload(ones, m.s());
    m.fp8_max = DeviceBuffer<float>(kStates);
    m.fp8_max.upload(maxes, m.s());
    m.scaling = {kStates, L, m.amax_history.data(), m.amax.data(), m.scale.data(), m.scale_inv.data(),
                 m.fp8_max.data()};
    m.gemm_scale_inv = DeviceBuffer<float>(4 * kStates);
    m.gemm_scale_inv.fill_bytes(0, m.s());
    cuda::spread(m.scale_inv.data(), kStates, 4, m.gemm_scale_inv.data(), m.s());
    m.eval_amax = DeviceBuffer<float>(kStates);
    m.eval_scale = DeviceBuffer<float>(kStates);
    m.eval_scale.upload(ones, m.s());
  }

  int64_t bias_sums = 0;
  for (const LinearCuda* l : {&m.query, &m.key, &m.value, &m.attn_out, &m.inter, &m.ffn_out, &m.dense, &m.dense_1}) {
    const int64_t tensors = l == &m.query ? 3 : 1;  // q, k, v
    bias_sums =
        std::max(bias_sums, cuda::bias_backward_workspace(l->rows, l->out, nn::Linear::kBiasGradientOrder, tensors));
  }
  m.sum_scratch = DeviceBuffer<float>(std::max(bias_sums, cuda::layer_norm_backward_workspace(BT, D)));
  if (m.precision == Precision::Fp32) m.main_sum_scratch = DeviceBuffer<float>(bias_sums);
  m.embedding_scratch = DeviceBuffer<uint8_t>(cuda::embedding_backward_workspace({B, T, D, m.config.vocabulary_size}));
  m.attention_scratch = DeviceBuffer<uint8_t>(cuda::causal_attention_backward_workspace({B, T, m.H, D / m.H}));
  m.tokens = DeviceBuffer<int32_t>(BT);
  m.labels = DeviceBuffer<float>(B);
  for (auto* b : {&m.x0d, &m.context, &m.r1, &m.x1, &m.r2, &m.x2, &m.d_pooled_x, &m.d_r2, &m.d_r1, &m.dq, &m.dk,
                  &m.dv, &m.d_x0e})
    *b = DeviceBuffer<float>(BT * D);
  m.stats = DeviceBuffer<float>(B * m.H * T * 2);
  for (auto* b : {&m.mean1, &m.rstd1, &m.mean2, &m.rstd2}) *b = DeviceBuffer<float>(BT);
  m.pooled_d = DeviceBuffer<float>(B * D);
  m.h2_d = DeviceBuffer<float>(B * m.config.intermediate_dim);
  for (auto* b : {&m.probs, &m.dz}) *b = DeviceBuffer<float>(B);
  m.loss = DeviceBuffer<float>(1);
  m.stream.synchronize();
}

SeedClassifierCuda::~SeedClassifierCuda() = default;

int SeedClassifierCuda::batch() const { return static_cast<int>(impl_->B); }

void SeedClassifierCuda::set_step(uint64_t step) {
  impl_->step_counter.upload(std::span<const uint64_t>(&step, 1), impl_->s());
  impl_->host_step = step;
}

uint64_t SeedClassifierCuda::step() const { return impl_->host_step; }

float SeedClassifierCuda::forward_backward(std::span<const int32_t> tokens, std::span<const float> labels) {
  Impl& m = *impl_;
  m.upload_batch(tokens, labels);
  m.forward_backward();
  m.join();
  return m.read_loss();
}

void SeedClassifierCuda::update() {
  impl_->update();
  ++impl_->host_step;
  impl_->stream.synchronize();
}

float SeedClassifierCuda::train_step(std::span<const int32_t> tokens, std::span<const float> labels) {
  Impl& m = *impl_;
  m.upload_batch(tokens, labels);
  m.launch_graph();
  return m.read_loss();
}

void SeedClassifierCuda::enqueue_train_step(const int32_t* device_tokens, const float* device_labels) {
  Impl& m = *impl_;
  FP8KIT_CUDA_CHECK(cudaMemcpyAsync(m.tokens.data(), device_tokens, m.tokens.bytes(), cudaMemcpyDeviceToDevice, m.s()));
  FP8KIT_CUDA_CHECK(cudaMemcpyAsync(m.labels.data(), device_labels, m.labels.bytes(), cudaMemcpyDeviceToDevice, m.s()));
  m.launch_graph();
}

float SeedClassifierCuda::loss() const { return impl_->read_loss(); }

std::vector<float> SeedClassifierCuda::predict(std::span<const int32_t> tokens) {
  Impl& m = *impl_;
  m.upload_tokens(tokens);
  const float* z = m.forward(false);
  m.sigmoid(z, nullptr, nullptr, nullptr);
  return m.probs.to_host(m.s());
}

void SeedClassifierCuda::copy_to(SeedClassifier& cpu) const {
  const Impl& m = *impl_;
  const std::vector<float> values = m.params.to_host(m.s()), grads = m.grads.to_host(m.s());
  const std::vector<nn::Parameter*> ps = cpu.parameters();
  FP8KIT_CHECK(ps.size() == m.offsets.size(), "copy_to: the CPU model has {} parameters, expected {}", ps.size(),
               m.offsets.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    FP8KIT_CHECK(ps[i]->numel() == m.sizes[i], "copy_to: parameter {} has {} values, expected {}", ps[i]->name,
                 ps[i]->numel(), m.sizes[i]);
    std::copy_n(values.begin() + m.offsets[i], m.sizes[i], ps[i]->value.begin());
    std::copy_n(grads.begin() + m.offsets[i], m.sizes[i], ps[i]->grad.begin());
  }
}

std::vector<float> SeedClassifierCuda::probabilities() const { return impl_->probs.to_host(impl_->s()); }

namespace {

// The GPU's FP8 state index of a CPU fp8_state() entry "<path>/<tensor>_{scale,amax_history}":
// 3 x layer (GPU order) + tensor (inputs 0, kernel 1, outputs_grad 2); second: whether it is a history.
std::pair<int, bool> fp8_state_index(const std::string& name) {
  static const std::vector<std::string> layers = {"query", "key", "value", "attention_output",
                                                  "feedforward_intermediate_dense", "feedforward_output_dense",
                                                  "dense", "dense_1"};
  static const std::vector<std::string> tensors = {"inputs", "kernel", "outputs_grad"};
  const size_t slash = name.rfind('/');
  FP8KIT_CHECK(slash != std::string::npos && slash > 0, "FP8 state entry {} has no layer path", name);
  const size_t layer_begin = name.rfind('/', slash - 1);
  const std::string layer = name.substr(layer_begin == std::string::npos ? 0 : layer_begin + 1,
                                        slash - (layer_begin == std::string::npos ? 0 : layer_begin + 1));
  const std::string leaf = name.substr(slash + 1);
  const auto l = std::find(layers.begin(), layers.end(), layer);
  FP8KIT_CHECK(l != layers.end(), "FP8 state entry {}: unknown layer {}", name, layer);
  for (size_t t = 0; t < tensors.size(); ++t) {
    for (const bool history : {false, true}) {
      if (leaf == tensors[t] + (history ? "_amax_history" : "_scale"))
        return {static_cast<int>(3 * (l - layers.begin()) + t), history};
    }
  }
  fail("FP8 state entry {}: unknown tensor {}", name, leaf);
}

// Adam's state entries by name.
std::map<std::string, std::span<float>> adam_entries(optim::Adam& adam) {
  std::map<std::string, std::span<float>> entries;
  for (const nn::StateEntry& e : adam.state()) entries[e.name] = e.data;
  return entries;
}

std::span<float> adam_entry(std::map<std::string, std::span<float>>& entries, const std::string& name, int64_t size) {
  const auto it = entries.find(name);
  FP8KIT_CHECK(it != entries.end() && static_cast<int64_t>(it->second.size()) == size,
               "the optimizer has no state {} of {} values", name, size);
  return it->second;
}

}  // namespace

void SeedClassifierCuda::load_state(SeedClassifier& cpu, optim::Adam& adam) {
  Impl& m = *impl_;
  FP8KIT_CHECK(cpu.precision() == m.precision, "load_state: the CPU model runs {}, the GPU model {}",
               nn::name(cpu.precision()), nn::name(m.precision));
  const std::vector<nn::Parameter*> ps = cpu.parameters();
  FP8KIT_CHECK(ps.size() == m.offsets.size(), "load_state: the CPU model has {} parameters, expected {}", ps.size(),
               m.offsets.size());
  auto entries = adam_entries(adam);
  std::vector<float> values(m.total, 0.0f), first(m.total, 0.0f), second(m.total, 0.0f);
  for (size_t i = 0; i < ps.size(); ++i) {
    FP8KIT_CHECK(ps[i]->numel() == m.sizes[i], "load_state: parameter {} has {} values, expected {}", ps[i]->name,
                 ps[i]->numel(), m.sizes[i]);
    std::copy(ps[i]->value.begin(), ps[i]->value.end(), values.begin() + m.offsets[i]);
    const auto mi = adam_entry(entries, ps[i]->name + "/m", m.sizes[i]);
    const auto vi = adam_entry(entries, ps[i]->name + "/v", m.sizes[i]);
    std::copy(mi.begin(), mi.end(), first.begin() + m.offsets[i]);
    std::copy(vi.begin(), vi.end(), second.begin() + m.offsets[i]);
  }
  m.params.upload(values, m.s());
  m.adam_m.upload(first, m.s());
  m.adam_v.upload(second, m.s());
  const float iterations = static_cast<float>(adam.iterations());
  m.adam_iterations.upload(std::span<const float>(&iterations, 1), m.s());
  if (m.precision == Precision::Fp8) {
    const int64_t count = m.scaling.count, L = m.scaling.history_length;
    std::vector<float> scale(count, 0.0f), scale_inv(count, 0.0f), history(count * L, 0.0f);
    std::vector<int> seen(count, 0);
    const bool keras = m.keras_lag();
    for (const nn::StateEntry& e : cpu.fp8_state()) {
      const auto [i, is_history] = fp8_state_index(e.name);
      FP8KIT_CHECK(static_cast<int64_t>(e.data.size()) == (is_history ? L : 1), "FP8 state {} has {} values",
                   e.name, e.data.size());
      ++seen[i];
      if (is_history) {
        std::copy(e.data.begin(), e.data.end(), history.begin() + i * L);
      } else {
        // The entry is the scale in te lag, Keras's multiplier (the GPU's scale_inv) in keras lag.
        (keras ? scale_inv : scale)[i] = e.data[0];
        (keras ? scale : scale_inv)[i] = 1.0f / e.data[0];
      }
    }
    FP8KIT_CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 2; }),
                 "load_state: the CPU model's FP8 state does not cover the 8 Linears");
    m.scale.upload(scale, m.s());
    m.scale_inv.upload(scale_inv, m.s());
    m.amax_history.upload(history, m.s());
    cuda::spread(m.scale_inv.data(), count, 4, m.gemm_scale_inv.data(), m.s());
  }
  set_step(static_cast<uint64_t>(adam.iterations()));
  m.stream.synchronize();
}

void SeedClassifierCuda::store_state(SeedClassifier& cpu, optim::Adam& adam) const {
  const Impl& m = *impl_;
  FP8KIT_CHECK(cpu.precision() == m.precision, "store_state: the CPU model runs {}, the GPU model {}",
               nn::name(cpu.precision()), nn::name(m.precision));
  copy_to(cpu);
  const std::vector<float> first = m.adam_m.to_host(m.s()), second = m.adam_v.to_host(m.s());
  const std::vector<float> iterations = m.adam_iterations.to_host(m.s());
  auto entries = adam_entries(adam);
  const std::vector<nn::Parameter*> ps = cpu.parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    const auto mi = adam_entry(entries, ps[i]->name + "/m", m.sizes[i]);
    const auto vi = adam_entry(entries, ps[i]->name + "/v", m.sizes[i]);
    std::copy_n(first.begin() + m.offsets[i], m.sizes[i], mi.begin());
    std::copy_n(second.begin() + m.offsets[i], m.sizes[i], vi.begin());
  }
  adam_entry(entries, "iterations", 1)[0] = iterations[0];
  if (m.precision == Precision::Fp8) {
    const int64_t L = m.scaling.history_length;
    const std::vector<float> scale = m.scale.to_host(m.s()), scale_inv = m.scale_inv.to_host(m.s());
    const std::vector<float> history = m.amax_history.to_host(m.s());
    const bool keras = m.keras_lag();
    for (const nn::StateEntry& e : cpu.fp8_state()) {
      const auto [i, is_history] = fp8_state_index(e.name);
      if (is_history) {
        std::copy_n(history.begin() + i * L, L, e.data.begin());
      } else {
        e.data[0] = (keras ? scale_inv : scale)[i];
      }
    }
  }
}

}  // namespace fp8kit::models
