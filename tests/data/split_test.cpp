// numpy RandomState shuffle and Keras' validation split, against the spec's test vectors.
#include "data/split.h"

#include "base/error.h"
#include "sha256.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

namespace fp8kit::data {
namespace {

using ::testing::ElementsAre;

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(testing::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(testing::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(testing::sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Mt19937, IsNumpysGenerator) {
  // The 10,000th output of the default-seeded mt19937 (C++ standard), and seed 42's first draw,
  // which numpy's RandomState(42).randint(0, 2**32, dtype=np.uint64) also returns.
  std::mt19937 standard;
  standard.discard(9999);
  EXPECT_EQ(standard(), 4123659995u);
  EXPECT_EQ(std::mt19937(42)(), 1608637542u);
}

TEST(NumpyPermutation, SpecVectorsSmall) {
  EXPECT_THAT(numpy_permutation(10, 42), ElementsAre(8, 1, 5, 0, 7, 2, 9, 4, 3, 6));
  const auto p = numpy_permutation(1000, 7);
  EXPECT_THAT(std::vector<int64_t>(p.begin(), p.begin() + 8), ElementsAre(778, 334, 271, 802, 216, 408, 812, 94));
  EXPECT_TRUE(numpy_permutation(0, 1).empty());
  EXPECT_THAT(numpy_permutation(1, 1), ElementsAre(0));
}

TEST(NumpyPermutation, SpecVectorsImdbSize) {
  const auto p = numpy_permutation(25000, 42);
  EXPECT_THAT(std::vector<int64_t>(p.begin(), p.begin() + 10),
              ElementsAre(6868, 24016, 9668, 13640, 14018, 7488, 5804, 12909, 3386, 9567));
  EXPECT_THAT(std::vector<int64_t>(p.end() - 10, p.end()),
              ElementsAre(16850, 6265, 22118, 11284, 11964, 21575, 5390, 860, 15795, 23654));
  EXPECT_THAT(std::vector<int64_t>(p.begin() + 19995, p.begin() + 20005),
              ElementsAre(3791, 23445, 14154, 2786, 9259, 23703, 1717, 2696, 1848, 10623));
  std::string bytes;  // little-endian int32, as numpy's arange(25000).astype('<i4').tobytes()
  for (int64_t v : p) {
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((static_cast<uint32_t>(v) >> (8 * i)) & 0xFF));
  }
  EXPECT_EQ(testing::sha256_hex(bytes), "9479f475a61aeaf9a107632197a3c07823d3eb70b5aab38194c25753ac0366cb");
}

TEST(ValidationSplit, KerasImdbSplit) {
  const auto split = validation_split(25000, 0.2, 42);
  ASSERT_EQ(split.train.size(), 20000u);
  ASSERT_EQ(split.validation.size(), 5000u);
  EXPECT_EQ(split.train[0], 6868);
  EXPECT_THAT(std::vector<int64_t>(split.validation.begin(), split.validation.begin() + 5),
              ElementsAre(23703, 1717, 2696, 1848, 10623));
  EXPECT_EQ(split.train.back(), 9259);
}

TEST(ValidationSplit, TruncatesLikePythonInt) {
  EXPECT_EQ(validation_split(9, 0.2, 1).validation.size(), 1u);   // int(1.8) = 1
  EXPECT_EQ(validation_split(10, 0.0, 1).validation.size(), 0u);
  EXPECT_THROW(validation_split(10, 1.0, 1), Error);
  EXPECT_THROW(validation_split(10, -0.1, 1), Error);
}

}  // namespace
}  // namespace fp8kit::data
