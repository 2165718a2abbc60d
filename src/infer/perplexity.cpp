// Perplexity through the engine's prefill.
#include "infer/perplexity.h"

#include "ops/cross_entropy.h"

#include <cmath>

namespace fp8kit::infer {

Perplexity evaluate(LlamaEngine& engine, const data::TokenWindows& windows, int64_t batch, int64_t max_batches) {
  const int64_t batches = windows.evaluation_batches(batch, max_batches);
  ops::Context& c = engine.context();
  Tensor targets({batch * windows.seq()}, DType::I32, c.device()), losses;
  std::vector<int32_t> inputs, next;
  double sum = 0;
  for (int64_t b = 0; b < batches; ++b) {
    inputs.clear();
    next.clear();
    windows.ordered_batch(b, batch, inputs, next);
    targets.copy_from_host(next.data());
    const Tensor& logits = engine.prefill(inputs, batch, windows.seq(), 0, true);
    ops::cross_entropy(c, logits, targets, 1.0f, losses, nullptr);
    c.synchronize();  // host copies do not wait for the context's streams
    const Tensor host = losses.to(Device::Cpu);
    for (float l : host.span<float>()) sum += l;
  }
  Perplexity p;
  p.tokens = batches * batch * windows.seq();
  p.loss = sum / static_cast<double>(p.tokens);
  p.perplexity = std::exp(p.loss);
  return p;
}

}  // namespace fp8kit::infer
