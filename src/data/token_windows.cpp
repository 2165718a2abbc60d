// Token windows: the joined stream, and the per-epoch permutation of its windows.
#include "data/token_windows.h"

#include "base/error.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace fp8kit::data {

std::vector<int32_t> join_documents(std::span<const std::vector<int32_t>> documents, int32_t separator) {
  std::vector<int32_t> stream;
  size_t total = 0;
  for (const auto& d : documents) total += d.size() + 1;
  stream.reserve(total);
  for (const auto& d : documents) {
    stream.insert(stream.end(), d.begin(), d.end());
    stream.push_back(separator);
  }
  return stream;
}

TokenWindows::TokenWindows(std::span<const int32_t> stream, int64_t seq, uint64_t seed)
    : stream_(stream), seq_(seq), seed_(seed) {
  FP8KIT_CHECK(seq > 0, "the sequence length must be positive, got {}", seq);
  FP8KIT_CHECK(static_cast<int64_t>(stream.size()) >= seq + 1,
               "the corpus has {} tokens, fewer than one window of {} + 1: use a shorter --seq or more text",
               stream.size(), seq);
  count_ = (static_cast<int64_t>(stream.size()) - 1) / seq;
}

int64_t TokenWindows::start_of(int64_t window_index) const {
  const int64_t epoch = window_index / count_;
  if (epoch != permuted_epoch_) {
    permutation_.resize(count_);
    std::iota(permutation_.begin(), permutation_.end(), int64_t{0});
    std::mt19937_64 rng(seed_ ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(epoch + 1)));
    // Fisher-Yates with a fixed draw (not std::shuffle, whose draws differ between libraries).
    for (int64_t i = count_ - 1; i > 0; --i) std::swap(permutation_[i], permutation_[rng() % static_cast<uint64_t>(i + 1)]);
    permuted_epoch_ = epoch;
  }
  return permutation_[window_index % count_] * seq_;
}

void TokenWindows::window(int64_t window_index, std::vector<int32_t>& inputs, std::vector<int32_t>& targets) const {
  const int64_t start = start_of(window_index);
  inputs.insert(inputs.end(), stream_.begin() + start, stream_.begin() + start + seq_);
  targets.insert(targets.end(), stream_.begin() + start + 1, stream_.begin() + start + seq_ + 1);
}

void TokenWindows::ordered_window(int64_t index, std::vector<int32_t>& inputs, std::vector<int32_t>& targets) const {
  FP8KIT_CHECK(index >= 0 && index < count_, "window {} of {}", index, count_);
  const int64_t start = index * seq_;
  inputs.insert(inputs.end(), stream_.begin() + start, stream_.begin() + start + seq_);
  targets.insert(targets.end(), stream_.begin() + start + 1, stream_.begin() + start + seq_ + 1);
}

int64_t TokenWindows::evaluation_batches(int64_t batch, int64_t max_batches) const {
  FP8KIT_CHECK(batch > 0, "the evaluation batch must be positive, got {}", batch);
  const int64_t available = count_ / batch;
  FP8KIT_CHECK(available > 0, "the validation text holds {} windows of {} tokens, fewer than one batch of {}", count_,
               seq_, batch);
  return max_batches > 0 ? std::min(max_batches, available) : available;
}

void TokenWindows::ordered_batch(int64_t index, int64_t batch, std::vector<int32_t>& inputs,
                                 std::vector<int32_t>& targets) const {
  for (int64_t i = 0; i < batch; ++i) ordered_window(index * batch + i, inputs, targets);
}

}  // namespace fp8kit::data
