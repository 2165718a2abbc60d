// Mini-batch order for training: a seeded shuffle per epoch (reproducible from (seed, epoch)),
// batches of batch_size consecutive examples of that order, the last one possibly smaller.
#pragma once

#include "base/error.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace fp8kit::data {

// A permutation of [0, n) for `epoch`, from std::mt19937_64 seeded by (seed, epoch).
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch);

// Example indices per batch for one epoch at a time.
class Batcher {
 public:
  // shuffle=false keeps the order 0..n-1 (evaluation).
  Batcher(int64_t num_examples, int64_t batch_size, uint64_t seed, bool shuffle = true);

  // Sets the example order of `epoch` (0-based); call before reading batches of that epoch.
  void start_epoch(int64_t epoch);

  int64_t num_examples() const { return num_examples_; }
  int64_t num_batches() const { return (num_examples_ + batch_size_ - 1) / batch_size_; }
  // Example indices of batch b (0 <= b < num_batches()) in the current epoch.
  std::span<const int64_t> batch(int64_t b) const;

 private:
  int64_t num_examples_, batch_size_;
  uint64_t seed_;
  bool shuffle_;
  std::vector<int64_t> order_;
};

// Copies rows `rows` of a [num_rows, row_length] row-major matrix into `out`
// ([rows.size(), row_length]); e.g. the token ids of one batch.
// Indices are checked; a bad one throws fp8kit::Error.
template <typename T>
void gather_rows(std::span<const T> matrix, int64_t row_length, std::span<const int64_t> rows,
                 std::span<T> out) {
  const int64_t num_rows = row_length > 0 ? static_cast<int64_t>(matrix.size()) / row_length : 0;
  FP8KIT_CHECK(static_cast<int64_t>(out.size()) == static_cast<int64_t>(rows.size()) * row_length,
               "gather_rows: output holds {} values, expected {} rows x {}", out.size(), rows.size(), row_length);
  for (size_t r = 0; r < rows.size(); ++r) {
    FP8KIT_CHECK(rows[r] >= 0 && rows[r] < num_rows, "gather_rows: row {} outside [0, {})", rows[r], num_rows);
    std::copy_n(matrix.begin() + rows[r] * row_length, row_length, out.begin() + r * row_length);
  }
}

}  // namespace fp8kit::data
