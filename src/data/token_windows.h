// A language-model corpus as one stream of token ids (documents joined by an end-of-text id), cut into
// training windows of seq + 1 tokens (inputs and their next-token targets) at multiples of seq, in a
// seeded order per epoch: the batch of any step is a pure function of (stream, seq, seed, step), so a
// resumed run sees the same data as an uninterrupted one.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace fp8kit::data {

// The documents' ids in order, `separator` after each.
std::vector<int32_t> join_documents(std::span<const std::vector<int32_t>> documents, int32_t separator);

class TokenWindows {
 public:
  // stream: at least seq + 1 ids (else throws, naming both sizes).
  TokenWindows(std::span<const int32_t> stream, int64_t seq, uint64_t seed);

  int64_t seq() const { return seq_; }
  int64_t count() const { return count_; }  // windows per epoch

  // The window_index-th window over all epochs (epoch = index / count(), each epoch a fresh seeded
  // permutation): inputs [seq] and targets [seq] (the inputs shifted by one) appended to the outputs.
  void window(int64_t window_index, std::vector<int32_t>& inputs, std::vector<int32_t>& targets) const;
  // The first `count()` windows in stream order (evaluation: every window once, unshuffled).
  void ordered_window(int64_t index, std::vector<int32_t>& inputs, std::vector<int32_t>& targets) const;
  // How many whole batches of `batch` windows in stream order an evaluation runs: all of them, or at
  // most max_batches when > 0. Throws unless batch > 0 and at least one batch fits.
  int64_t evaluation_batches(int64_t batch, int64_t max_batches) const;
  // Batch `index` of those: `batch` ordered windows appended to inputs and targets.
  void ordered_batch(int64_t index, int64_t batch, std::vector<int32_t>& inputs, std::vector<int32_t>& targets) const;

 private:
  int64_t start_of(int64_t window_index) const;

  std::span<const int32_t> stream_;
  int64_t seq_, count_;
  uint64_t seed_;
  mutable int64_t permuted_epoch_ = -1;
  mutable std::vector<int64_t> permutation_;
};

}  // namespace fp8kit::data
