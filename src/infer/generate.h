// Generation with the inference engine: every prompt prefilled into a slot of its own (together,
// whatever their lengths, in forwards of up to a token budget), then all of them decoded together one token per step (a captured
// CUDA graph per step on the GPU), greedy on the device or sampled on the host (infer/sampler.h), each
// token handed to a callback as it comes.
#pragma once

#include "infer/llama_engine.h"
#include "infer/sampler.h"

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace fp8kit::infer {

struct GenerationOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling{};  // temperature 0: greedy (argmax on the device)
  int32_t eos = -1;          // a sequence ends at this token (not included); -1: none
  int64_t vocabulary = 0;    // choose among the first N ids only (a tokenizer smaller than the padded
                             // embedding); 0: all
  // Prompts prefill together in forwards of at most this many tokens (a longer prompt alone): bounds
  // the prefill's activations (at Llama-3-8B's shapes some 100 KiB per token).
  int64_t prefill_tokens = 16384;
};

// The new tokens of each prompt (at most engine.options().max_batch prompts, each non-empty and
// short enough that prompt + max_new_tokens fits a slot). on_token(prompt index, token) sees every
// token as it is chosen. The engine's slots are reset first.
std::vector<std::vector<int32_t>> generate(LlamaEngine& engine, std::span<const std::vector<int32_t>> prompts,
                                           const GenerationOptions& options,
                                           const std::function<void(size_t, int32_t)>& on_token = {});

}  // namespace fp8kit::infer
