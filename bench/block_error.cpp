// Quantization error of every Linear of a Llama under FP8 per-tensor current scaling and under block
// scaling, on the CPU: one training step of the model (bf16) on IMDB text captures each projection's
// input x, output gradient g and weight W; then each precision's Linear op recomputes y, dx and dW from
// them, against float32. Also the whole model's gradients in each precision against float32.
//   bench_block_error MODEL_DIR [BATCH SEQ]   (an HF directory with tokenizer.json, e.g. lm train's model-bf16)
#include "base/error.h"
#include "data/imdb.h"
#include "data/token_windows.h"
#include "models/llama.h"
#include "models/llama_io.h"
#include "nn/linear.h"
#include "ops/linear.h"
#include "ops/scaling_table.h"
#include "text/bpe_tokenizer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <deque>
#include <string>
#include <vector>

using namespace fp8kit;

namespace {

double rel_error(std::span<const float> got, std::span<const float> want) {
  double e = 0, n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    e += d * d;
    n += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(e / std::max(n, 1e-300));
}

struct Captured {
  std::string path;
  int64_t in, out;
  ops::LinearOp::Layout layout;
  Tensor x, g, w;
};

struct Result {
  Tensor y, dx, dw;
};

// One Linear of `precision` (Fp8: current per-tensor scales) on the captured operands.
Result run(const Captured& k, ops::LinearPrecision precision, const Fp8Recipe& recipe) {
  ops::Context c;
  ops::ScalingTable table(recipe);
  ops::LinearOp l;
  l.in = k.in;
  l.out = k.out;
  l.layout = k.layout;
  l.precision = precision;
  Tensor w = k.w.to(Device::Cpu), dw(k.w.shape(), DType::F32);
  l.w = &w;
  l.dw = &dw;
  if (precision == ops::LinearPrecision::Fp8) {
    l.scaling = &table;
    l.slot = table.add_linear("linear", ScalingMode::Current);
    table.allocate(Device::Cpu);
  }
  l.block_recipe = recipe;
  ops::LinearOp* op = &l;
  ops::linear_prepare_weights(c, {&op, 1}, true);
  ops::linear_forward(c, l, k.x, true);
  const ops::LinearGradient grad{&l, &k.g};
  ops::linear_backward(c, {&grad, 1});
  return {l.y.clone(), l.dx.clone(), std::move(dw)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: {} MODEL_DIR [BATCH SEQ]\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 4, seq = argc > 3 ? std::atoll(argv[3]) : 256;
  models::Llama model = models::load_pretrained(dir);
  const text::BpeTokenizer tokenizer = text::BpeTokenizer::load(dir / "tokenizer.json");

  // Validation reviews as lm train joins them, the first batch * seq + 1 tokens.
  const data::ImdbSplits splits = data::load_imdb(data::find_imdb(), {.lowercase = false, .validation_fraction = 0.0});
  std::vector<std::string> texts;
  for (size_t i = 0; i < 400; ++i) texts.push_back(splits.test.texts[i * splits.test.texts.size() / 400]);
  const std::vector<std::vector<int32_t>> docs = tokenizer.encode_batch(texts);
  const std::vector<int32_t> stream = data::join_documents(docs, *tokenizer.eos_id());
  FP8KIT_CHECK(static_cast<int64_t>(stream.size()) > batch * seq + 1, "too few tokens");
  Tensor tokens({batch, seq}, DType::I32), targets({batch * seq}, DType::I32), losses;
  for (int64_t i = 0; i < batch * seq; ++i) {
    tokens.data<int32_t>()[i] = stream[i];
    targets.data<int32_t>()[i] = stream[i + 1];
  }
  const float grad_scale = 1.0f / static_cast<float>(batch * seq);

  // The model's gradients in each precision against float32's.
  auto gradients = [&](nn::Precision p, const Fp8Recipe& r) {
    model.set_precision(p, r);
    model.forward(tokens, true);
    model.backward(targets, grad_scale, losses);
    double loss = 0;
    for (float v : losses.span<float>()) loss += v;
    std::vector<Tensor> owned;
    for (nn::Parameter* q : model.parameters()) {
      Tensor o(q->grad.shape(), DType::F32);
      std::copy_n(q->grad.data<float>(), q->grad.numel(), o.data<float>());
      owned.push_back(std::move(o));
    }
    return std::pair{loss / static_cast<double>(batch * seq), std::move(owned)};
  };
  Fp8Recipe current{.mode = ScalingMode::Current}, block{.mode = ScalingMode::Block};
  Fp8Recipe current_e4m3 = current, block_e4m3 = block;
  set_fp8_formats(current_e4m3, "e4m3");
  set_fp8_formats(block_e4m3, "e4m3");
  const auto [ref_loss, ref] = gradients(nn::Precision::Fp32, {});
  struct Run {
    std::string name;
    nn::Precision p;
    Fp8Recipe r;
  };
  const std::vector<Run> runs = {{"bf16", nn::Precision::Bf16, {}},
                                 {"current hybrid", nn::Precision::Fp8, current},
                                 {"block hybrid", nn::Precision::Fp8, block},
                                 {"current e4m3", nn::Precision::Fp8, current_e4m3},
                                 {"block e4m3", nn::Precision::Fp8, block_e4m3}};
  std::vector<nn::Parameter*> params = model.parameters();
  fmt::print("model gradients against fp32 (loss {:.5f}): relative error per parameter\n{:<44}", ref_loss, "");
  std::vector<std::pair<double, std::vector<Tensor>>> got;
  for (const Run& r : runs) {
    fmt::print("{:>16}", r.name);
    got.push_back(gradients(r.p, r.r));
  }
  fmt::print("\n{:<44}", "loss");
  for (const auto& [loss, g] : got) fmt::print("{:>16.5f}", loss);
  fmt::print("\n");
  for (size_t i = 0; i < params.size(); ++i) {
    fmt::print("{:<44}", params[i]->name);
    for (const auto& [loss, g] : got) fmt::print("{:>16.5f}", rel_error(g[i].span<float>(), ref[i].span<float>()));
    fmt::print("\n");
  }

  // Each projection's operands from a bf16 step.
  model.set_precision(nn::Precision::Bf16);
  model.forward(tokens, true);
  model.backward(targets, grad_scale, losses);
  std::vector<Captured> captured;
  for (nn::Linear* l : model.linears()) {
    if (l->path() == "lm_head") continue;
    const ops::LinearOp& op = l->op();
    Captured k{l->path(), op.in, op.out, op.layout, Tensor({op.rows, op.in}, DType::F32),
               Tensor({op.rows, op.out}, DType::F32), Tensor(op.w->shape(), DType::F32)};
    std::copy_n(op.x->data<float>(), k.x.numel(), k.x.data<float>());
    std::copy_n(op.g.data<float>(), k.g.numel(), k.g.data<float>());
    std::copy_n(op.w->data<float>(), k.w.numel(), k.w.data<float>());
    captured.push_back(std::move(k));
  }
  fmt::print("\nper Linear, relative error against fp32 of y, dx, dW\n{:<36}", "");
  const std::vector<std::pair<std::string, Fp8Recipe>> recipes = {
      {"current hybrid", current}, {"block hybrid", block}, {"current e4m3", current_e4m3}, {"block e4m3", block_e4m3}};
  for (const auto& [name, r] : recipes) fmt::print("  {:^26}", name);
  fmt::print("\n");
  for (const Captured& k : captured) {
    const Result ref32 = run(k, ops::LinearPrecision::Fp32, {});
    fmt::print("{:<36}", k.path);
    for (const auto& [name, r] : recipes) {
      const Result q =
          run(k, r.mode == ScalingMode::Block ? ops::LinearPrecision::Fp8Block : ops::LinearPrecision::Fp8, r);
      fmt::print("  {:8.5f} {:8.5f} {:8.5f}", rel_error(q.y.span<float>(), ref32.y.span<float>()),
                 rel_error(q.dx.span<float>(), ref32.dx.span<float>()),
                 rel_error(q.dw.span<float>(), ref32.dw.span<float>()));
    }
    fmt::print("\n");
  }
  return 0;
}
