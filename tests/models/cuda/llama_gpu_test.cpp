// The Llama model on the GPU against the same model on the CPU: the same weights (one seed) and
// batch, one training step (losses, every gradient, the AdamW update with clipping), then two more
// steps from a captured graph, in fp32, bf16, FP8, FP8 with block scaling and per-Linear recipes mixing
// delayed (keras lag), current, block, bf16 and fp32 Linears; the memory options (loss chunks,
// recomputation) eager and captured; FP8 Linears sharing their input's cast or not; the attention's
// forward in FP8 (cuDNN's FP8 attention against the CPU's emulation); and the HF
// directory a GPU model saves loads back on the CPU.
// The GPU's attention is cuDNN's flash attention with bf16 operands, so even fp32
// differs from the CPU by bf16 rounding inside attention: tolerances are relative L2 errors over all
// parameters together, with headroom over the errors first measured.
#include "models/llama.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "exec/captured_step.h"
#include "models/llama_io.h"
#include "ops/cuda/gpu_test.h"
#include "ops/grad_norm.h"
#include "optim/adam.h"

namespace fp8kit::models {
namespace {

std::vector<float> host(const Tensor& t) {
  const Tensor h = t.to(Device::Cpu);
  return {h.data<float>(), h.data<float>() + h.numel()};
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

const Fp8Recipe kDelayed{}, kCurrent{.mode = ScalingMode::Current}, kBlock{.mode = ScalingMode::Block};

LlamaConfig config() {
  LlamaConfig c = llama_preset("tiny", 101);
  c.max_position_embeddings = 64;
  return c;
}

// One device's run: an eager step, then two captured ones; `scaling`: the FP8 state after them.
struct DeviceRun {
  std::vector<float> losses, grads, weights0, weights, scaling;
};

// share false: every Linear casts its input for itself (no input_of).
DeviceRun run(Device device, nn::Precision precision, const Fp8Recipe& recipe, const nn::LinearRecipes& linears = {},
             const LlamaMemoryOptions& memory = {}, const LlamaConfig& shape = config(), bool share = true,
             bool fp8_attention = false) {
  Llama model(shape, 3, device);
  model.set_precision(precision, recipe, linears);
  model.set_fp8_attention(fp8_attention);
  model.set_memory_options(memory);
  if (!share)
    for (nn::Linear* l : model.linears()) l->op().input_of = nullptr;
  optim::Adam adam(model.parameter_set(), {.learning_rate = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .epsilon = 1e-8f,
                                           .weight_decay = 0.1f, .warmup_steps = 2, .decay_steps = 10});
  const int64_t B = 2, T = 48;
  std::mt19937 rng(5);
  std::vector<int32_t> ids(B * T), targets(B * T);
  for (auto& v : ids) v = static_cast<int32_t>(rng() % 101);
  for (auto& v : targets) v = static_cast<int32_t>(rng() % 101);
  Tensor tokens({B, T}, DType::I32, device), next({B * T}, DType::I32, device), losses, norm;
  tokens.copy_from_host(ids.data());
  next.copy_from_host(targets.data());
  DeviceRun r;
  r.weights0 = host(model.parameter_set().values());
  auto step = [&](ops::Context& c) {
    model.forward(tokens, true);
    model.backward(next, 1.0f / static_cast<float>(B * T), losses);
    ops::clip_by_global_norm(c, model.parameter_set().grads(), 1.0f, norm);
    adam.step(c);
  };
  step(model.context());
  model.context().synchronize();
  r.losses = host(losses);
  r.grads = host(model.parameter_set().grads());
  exec::CapturedStep captured(step);
  for (int s = 0; s < 2; ++s) captured.run(model.context());
  model.context().synchronize();
  r.weights = host(model.parameter_set().values());
  for (const nn::StateTensor& t : model.fp8_state()) {
    const std::vector<float> v = host(*t.tensor);
    r.scaling.insert(r.scaling.end(), v.begin(), v.end());
  }
  return r;
}

TEST(LlamaGpu, MatchesTheCpuModel) {
  FP8KIT_REQUIRE_GPU();
  struct Case {
    nn::Precision precision;
    double losses, grads, update;
    ScalingMode mode = ScalingMode::Delayed;
    std::vector<std::string> rules = {};
    ScalingLag lag = ScalingLag::Te;
    bool fp8_attention = false;
  };
  // Groups (q | k, v; gate, up) and weight-cast batches that mix precisions, delayed slots beside
  // current ones, keras lag's dividing casts beside multiplying ones, an FP8 head.
  const std::vector<std::string> mixed = {"*.mlp.*=current", "model.layers.0.self_attn.*=block", "*.k_proj=bf16",
                                          "*.down_proj=delayed", "model.layers.1.mlp.up_proj=fp32", "lm_head=fp8"};
  for (const Case& k : {Case{nn::Precision::Fp32, 1e-3, 2e-2, 0.1}, Case{nn::Precision::Bf16, 5e-3, 5e-2, 0.2},
                       Case{nn::Precision::Fp8, 5e-3, 0.1, 0.3},
                       Case{nn::Precision::Fp8, 5e-3, 0.1, 0.3, ScalingMode::Block},
                       Case{nn::Precision::Fp8, 5e-3, 0.1, 0.3, ScalingMode::Delayed, mixed, ScalingLag::Keras},
                       Case{nn::Precision::Bf16, 5e-3, 0.1, 0.3, ScalingMode::Delayed, {"lm_head=current"}},
                       Case{nn::Precision::Fp8, 1e-2, 0.2, 0.4, ScalingMode::Delayed, {}, ScalingLag::Te, true}}) {
    const Fp8Recipe recipe{.mode = k.mode, .lag = k.lag};
    const nn::LinearRecipes linears = nn::LinearRecipes::parse(k.rules);
    const DeviceRun cpu = run(Device::Cpu, k.precision, recipe, linears, {}, config(), true, k.fp8_attention),
                    gpu = run(Device::Cuda, k.precision, recipe, linears, {}, config(), true, k.fp8_attention);
    ASSERT_EQ(cpu.weights0, gpu.weights0);
    const double el = rel(gpu.losses, cpu.losses), eg = rel(gpu.grads, cpu.grads);
    std::vector<float> dc(cpu.weights.size()), dg(gpu.weights.size());
    for (size_t i = 0; i < dc.size(); ++i) {
      dc[i] = cpu.weights[i] - cpu.weights0[i];
      dg[i] = gpu.weights[i] - gpu.weights0[i];
    }
    const double eu = rel(dg, dc);
    std::string what(nn::name(k.precision));
    if (k.mode == ScalingMode::Block) what.append(" block");
    if (!linears.empty()) what.append(" ").append(linears.describe());  // (appends: GCC 12's -Wrestrict)
    if (k.fp8_attention) what.append(" + fp8 attention");
    std::printf("%s: losses %.2e, gradients %.2e, 3-step update %.2e\n", what.c_str(), el, eg, eu);
    EXPECT_LT(el, k.losses) << what;
    EXPECT_LT(eg, k.grads) << what;
    EXPECT_LT(eu, k.update) << what;
  }
}

// The memory options on the GPU, eager and captured: recomputation gives the same bits (the same
// kernels on the same inputs; FP8 casts replay the step's scales), the loss in chunks of 32 rows (3
// of them) the same within float32 rounding (cuBLASLt's GEMMs of another row count, the head weight's
// gradient summed by chunks), and the CPU's results within the tolerances above.
TEST(LlamaGpu, MemoryOptionsKeepTheResults) {
  FP8KIT_REQUIRE_GPU();
  for (const Fp8Recipe* recipe : {static_cast<const Fp8Recipe*>(nullptr), &kDelayed, &kCurrent, &kBlock}) {
    const nn::Precision precision = recipe == nullptr ? nn::Precision::Bf16 : nn::Precision::Fp8;
    const Fp8Recipe r = recipe == nullptr ? Fp8Recipe{} : *recipe;
    const std::string what = std::string(nn::name(precision)) + " " + (recipe == nullptr ? "" : describe(r));
    const DeviceRun plain = run(Device::Cuda, precision, r, {}, {.loss_chunk_rows = 1 << 20});
    const DeviceRun recomputed = run(Device::Cuda, precision, r, {}, {.loss_chunk_rows = 1 << 20, .recompute = true});
    EXPECT_EQ(recomputed.losses, plain.losses) << what;
    EXPECT_EQ(recomputed.grads, plain.grads) << what;
    EXPECT_EQ(recomputed.weights, plain.weights) << what;
    const DeviceRun chunked = run(Device::Cuda, precision, r, {}, {.loss_chunk_rows = 32});
    const DeviceRun both = run(Device::Cuda, precision, r, {}, {.loss_chunk_rows = 32, .recompute = true});
    EXPECT_EQ(both.grads, chunked.grads) << what;
    EXPECT_EQ(both.weights, chunked.weights) << what;
    const double el = rel(chunked.losses, plain.losses), eg = rel(chunked.grads, plain.grads);
    std::printf("%s: loss in chunks against one pass: losses %.2e, gradients %.2e\n", what.c_str(), el, eg);
    EXPECT_LT(el, 1e-5) << what;
    EXPECT_LT(eg, precision == nn::Precision::Fp8 ? 1e-2 : 1e-3) << what;
    const DeviceRun cpu = run(Device::Cpu, precision, r, {}, {.loss_chunk_rows = 32, .recompute = true});
    EXPECT_LT(rel(both.losses, cpu.losses), 5e-3) << what;
    EXPECT_LT(rel(both.grads, cpu.grads), precision == nn::Precision::Fp8 ? 0.2 : 5e-2) << what;
  }
}

// FP8 projections with delayed scaling: key and value take query's cast of x, and up_proj gate_proj's
// (hidden 160: no fused quantize + GEMM there), their input slots the owner's amax by a device copy,
// eager and captured, with and without recomputation: the same bits as each casting x for itself
// (losses, gradients, weights, amax histories and scales), and the CPU's results within the
// tolerances of MatchesTheCpuModel.
TEST(LlamaGpu, Fp8DelayedProjectionsShareTheirInputsQuantizations) {
  FP8KIT_REQUIRE_GPU();
  LlamaConfig shape = config();
  shape.hidden_size = 160;
  Llama probe(shape, 3, Device::Cuda);
  probe.set_precision(nn::Precision::Fp8);
  int shared_inputs = 0;
  for (nn::Linear* l : probe.linears()) shared_inputs += l->op().input_of != nullptr;
  EXPECT_EQ(shared_inputs, 2 * 3);  // per layer: key, value, up
  for (const ScalingLag lag : {ScalingLag::Te, ScalingLag::Keras}) {
    const Fp8Recipe recipe{.lag = lag, .amax_history_length = 4};
    for (const bool recompute : {false, true}) {
      const std::string what = describe(recipe) + (recompute ? ", recomputed" : "");
      const LlamaMemoryOptions memory{.recompute = recompute};
      const DeviceRun shared = run(Device::Cuda, nn::Precision::Fp8, recipe, {}, memory, shape, true),
                      own = run(Device::Cuda, nn::Precision::Fp8, recipe, {}, memory, shape, false);
      EXPECT_EQ(shared.losses, own.losses) << what;
      EXPECT_EQ(shared.grads, own.grads) << what;
      EXPECT_EQ(shared.weights, own.weights) << what;
      EXPECT_EQ(shared.scaling, own.scaling) << what;
      const DeviceRun cpu = run(Device::Cpu, nn::Precision::Fp8, recipe, {}, memory, shape, true);
      const double el = rel(shared.losses, cpu.losses), eg = rel(shared.grads, cpu.grads);
      std::printf("%s: against the CPU: losses %.2e, gradients %.2e\n", what.c_str(), el, eg);
      EXPECT_LT(el, 5e-3) << what;
      EXPECT_LT(eg, 0.1) << what;
    }
  }
}

TEST(LlamaGpu, SavedDirectoryLoadsOnTheCpu) {
  FP8KIT_REQUIRE_GPU();
  testing::TempDir dir("llama_gpu_save");
  Llama gpu(config(), 9, Device::Cuda);
  save_pretrained(gpu, dir.path());
  Llama cpu = load_pretrained(dir.path(), Device::Cpu);
  const std::vector<float> a = host(gpu.parameter_set().values()), b = host(cpu.parameter_set().values());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(b[i], a[i], std::abs(a[i]) * 0x1p-8 + 1e-30) << i;
}

}  // namespace
}  // namespace fp8kit::models
