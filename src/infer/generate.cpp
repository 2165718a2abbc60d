// The generation loop: one prefill of every prompt, batched decode steps, greedy or sampled choices.
#include "infer/generate.h"

#include "base/error.h"

#include <algorithm>

namespace fp8kit::infer {

std::vector<std::vector<int32_t>> generate(LlamaEngine& engine, std::span<const std::vector<int32_t>> prompts,
                                           const GenerationOptions& options,
                                           const std::function<void(size_t, int32_t)>& on_token) {
  const auto batch = static_cast<int64_t>(prompts.size());
  FP8KIT_CHECK(batch >= 1 && batch <= engine.options().max_batch, "generate: {} prompts for the engine's {} slots",
               batch, engine.options().max_batch);
  FP8KIT_CHECK(options.max_new_tokens >= 1, "generate: max_new_tokens must be >= 1");
  const int64_t vocab = engine.config().vocab_size;
  const int64_t choices = options.vocabulary > 0 ? std::min(options.vocabulary, vocab) : vocab;
  const bool device_argmax = options.sampling.temperature == 0.0f && choices == vocab;
  std::vector<Sampler> samplers;
  for (int64_t i = 0; i < batch; ++i) {
    SamplingOptions s = options.sampling;
    s.seed += static_cast<uint64_t>(i);  // each prompt its own stream, as if generated alone
    samplers.emplace_back(s);
  }
  // The next ids of prompts [first, first + rows of logits).
  auto choose = [&](const Tensor& logits, size_t first = 0) {
    if (device_argmax) return engine.argmax(logits);
    const Tensor host = logits.to(Device::Cpu);
    std::vector<int32_t> ids(static_cast<size_t>(logits.dim(0)));
    for (size_t i = 0; i < ids.size(); ++i)
      ids[i] = samplers[first + i].next(
          host.span<float>().subspan(i * static_cast<size_t>(vocab), static_cast<size_t>(choices)));
    return ids;
  };

  for (int64_t i = 0; i < batch; ++i) {
    const std::vector<int32_t>& prompt = prompts[static_cast<size_t>(i)];
    FP8KIT_CHECK(!prompt.empty(), "generate: prompt {} is empty", i);
    FP8KIT_CHECK(static_cast<int64_t>(prompt.size()) + options.max_new_tokens <= engine.options().max_seq,
                 "generate: prompt {} has {} tokens; with {} new ones it exceeds the KV cache's {} per sequence", i,
                 prompt.size(), options.max_new_tokens, engine.options().max_seq);
  }
  engine.reset_slots();
  // Prompts prefill together, as many at a time as fit the token budget (at least one).
  std::vector<int32_t> next;
  for (size_t first = 0; first < prompts.size();) {
    size_t end = first + 1;
    int64_t tokens = static_cast<int64_t>(prompts[first].size());
    while (end < prompts.size() && tokens + static_cast<int64_t>(prompts[end].size()) <= options.prefill_tokens)
      tokens += static_cast<int64_t>(prompts[end++].size());
    const std::vector<int32_t> ids =
        choose(engine.prefill(prompts.subspan(first, end - first), static_cast<int64_t>(first)), first);
    next.insert(next.end(), ids.begin(), ids.end());
    first = end;
  }
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(batch));
  std::vector<bool> done(static_cast<size_t>(batch), false);
  int64_t active = batch;
  for (int64_t step = 0;; ++step) {
    for (size_t i = 0; i < next.size(); ++i) {
      if (done[i]) continue;
      if (next[i] == options.eos) {
        done[i] = true;
        --active;
        continue;
      }
      out[i].push_back(next[i]);
      if (on_token) on_token(i, next[i]);
      if (static_cast<int64_t>(out[i].size()) == options.max_new_tokens) {
        done[i] = true;
        --active;
      }
    }
    if (active == 0) break;
    // Finished sequences keep decoding (their slot's tokens are not read again): one graph for the batch.
    next = choose(engine.decode(next));
  }
  return out;
}

}  // namespace fp8kit::infer
