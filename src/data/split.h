// The reproducible validation split of Keras' text_dataset_from_directory: numpy's legacy
// RandomState(seed).shuffle over MT19937, training = the first part, validation = the rest.
#pragma once

#include <cstdint>
#include <vector>

namespace fp8kit::data {

// The permutation numpy gives for `a = np.arange(n); np.random.RandomState(seed).shuffle(a)`:
// for i = n-1 down to 1, j = uniform in [0, i] by masked rejection over std::mt19937(seed)
// 32-bit draws, swap a[i], a[j]. (Exact for n < 2^32.)
std::vector<int64_t> numpy_permutation(int64_t n, uint32_t seed);

struct SplitIndices {
  std::vector<int64_t> train;       // indices into the dataset, in shuffled order
  std::vector<int64_t> validation;  // the last int(validation_fraction * n) shuffled indices
};

// Keras' split: shuffle [0, n) with numpy_permutation(n, seed), validation = the last
// int(validation_fraction * n) entries (truncated as Python's int()), train = the rest.
// validation_fraction must be in [0, 1).
SplitIndices validation_split(int64_t n, double validation_fraction, uint32_t seed);

}  // namespace fp8kit::data
