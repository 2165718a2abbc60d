// Seeded per-epoch shuffles and batches of example indices.
#include "data/batcher.h"

#include <numeric>
#include <random>

namespace fp8kit::data {

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  FP8KIT_CHECK(n >= 0, "number of examples must be non-negative, got {}", n);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  // seed_seq and mt19937_64 are fully specified by the standard, so orders are portable; the
  // index draw is written out because uniform_int_distribution is not.
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(epoch),
                    static_cast<uint32_t>(static_cast<uint64_t>(epoch) >> 32)};
  std::mt19937_64 rng(seq);
  for (int64_t i = n - 1; i >= 1; --i) {
    const auto bound = static_cast<uint64_t>(i) + 1;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;  // reject the biased tail
    uint64_t draw;
    do {
      draw = rng();
    } while (draw >= limit);
    std::swap(order[i], order[static_cast<int64_t>(draw % bound)]);
  }
  return order;
}

Batcher::Batcher(int64_t num_examples, int64_t batch_size, uint64_t seed, bool shuffle)
    : num_examples_(num_examples), batch_size_(batch_size), seed_(seed), shuffle_(shuffle) {
  FP8KIT_CHECK(num_examples >= 0, "number of examples must be non-negative, got {}", num_examples);
  FP8KIT_CHECK(batch_size > 0, "batch size must be positive, got {}", batch_size);
  order_.resize(num_examples);
  std::iota(order_.begin(), order_.end(), int64_t{0});
}

void Batcher::start_epoch(int64_t epoch) {
  FP8KIT_CHECK(epoch >= 0, "epoch must be non-negative, got {}", epoch);
  if (shuffle_) order_ = epoch_order(num_examples_, seed_, epoch);
}

std::span<const int64_t> Batcher::batch(int64_t b) const {
  FP8KIT_CHECK(b >= 0 && b < num_batches(), "batch {} outside [0, {})", b, num_batches());
  const int64_t begin = b * batch_size_;
  const int64_t end = std::min(begin + batch_size_, num_examples_);
  return std::span<const int64_t>(order_).subspan(begin, end - begin);
}

}  // namespace fp8kit::data
