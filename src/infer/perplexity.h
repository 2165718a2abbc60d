// A model's perplexity through the inference engine: windows of a token stream prefilled from
// position 0, every position's next-token cross-entropy (the numbers `lm eval` reports for a trained
// model, here from bf16 or packed FP8 weights and a bf16 or FP8 KV cache).
#pragma once

#include "data/token_windows.h"
#include "infer/llama_engine.h"

#include <cstdint>

namespace fp8kit::infer {

struct Perplexity {
  double loss = 0, perplexity = 0;  // mean nats per token, exp(loss)
  int64_t tokens = 0;
};

// The first max_batches (0: all) batches of `batch` windows in stream order (the engine needs
// max_batch >= batch and max_seq >= windows.seq()).
Perplexity evaluate(LlamaEngine& engine, const data::TokenWindows& windows, int64_t batch, int64_t max_batches);

}  // namespace fp8kit::infer
