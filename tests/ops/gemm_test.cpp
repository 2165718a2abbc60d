// GEMMs against naive triple loops in double: float32 for every transpose combination and awkward
// shapes; the FP8 GEMM against decoding with the scalar casts and scaling by hand.
#include "ops/gemm.h"

#include "common/gradient_check.h"
#include "numerics/cast.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

namespace fp8kit::ops {
namespace {

struct Dims {
  int64_t m, n, k;
};
// The last two are large enough to be split across threads: by rows of C, and along k.
const Dims kShapes[] = {{1, 16, 1}, {5, 160, 3}, {17, 33, 64}, {64, 32, 200}, {217, 31, 32}, {600, 40, 64}, {32, 40, 1000}};

// op(A)[i, l] for A stored as described by GemmShape.
double at_a(const std::vector<double>& a, const GemmShape& s, int64_t i, int64_t l) {
  return s.trans_a ? a[l * s.m + i] : a[i * s.k + l];
}
double at_b(const std::vector<double>& b, const GemmShape& s, int64_t l, int64_t j) {
  return s.trans_b ? b[j * s.k + l] : b[l * s.n + j];
}

TEST(GemmF32, MatchesNaiveForEveryTransposeAndShape) {
  for (const Dims& d : kShapes) {
    for (int t = 0; t < 4; ++t) {
      const GemmShape s{d.m, d.n, d.k, (t & 1) != 0, (t & 2) != 0};
      const auto a = testing::random_vector(d.m * d.k, 1 + t), b = testing::random_vector(d.k * d.n, 2 + t);
      auto c = testing::random_vector(d.m * d.n, 3 + t);
      const std::vector<float> c0 = c;
      gemm_f32(s, 0.5f, a.data(), b.data(), 2.0f, c.data());
      const std::vector<double> ad(a.begin(), a.end()), bd(b.begin(), b.end());
      for (int64_t i = 0; i < d.m; ++i)
        for (int64_t j = 0; j < d.n; ++j) {
          double acc = 0;
          for (int64_t l = 0; l < d.k; ++l) acc += at_a(ad, s, i, l) * at_b(bd, s, l, j);
          const double expected = 0.5 * acc + 2.0 * c0[i * d.n + j];
          ASSERT_NEAR(c[i * d.n + j], expected, 1e-5 * (d.k + 2))
              << d.m << "x" << d.n << "x" << d.k << " trans " << t << " at " << i << "," << j;
        }
    }
  }
}

TEST(GemmF32, ResultsDoNotDependOnTheThreadCount) {
  const int threads_before = omp_get_max_threads();
  for (const Dims& d : {Dims{6400, 32, 32}, Dims{32, 32, 6400}, Dims{1300, 17, 900}}) {
    for (int t = 0; t < 4; ++t) {
      const GemmShape s{d.m, d.n, d.k, (t & 1) != 0, (t & 2) != 0};
      const auto a = testing::random_vector(d.m * d.k, 40 + t), b = testing::random_vector(d.k * d.n, 50 + t);
      std::vector<float> c[3];
      for (int threads = 1; threads <= 3; ++threads) {
        omp_set_num_threads(threads);
        c[threads - 1].resize(d.m * d.n);
        gemm_f32(s, 0.75f, a.data(), b.data(), 0.0f, c[threads - 1].data());
      }
      EXPECT_EQ(c[0], c[1]) << d.m << "x" << d.n << "x" << d.k << " trans " << t;
      EXPECT_EQ(c[0], c[2]) << d.m << "x" << d.n << "x" << d.k << " trans " << t;
    }
  }
  omp_set_num_threads(threads_before);
}

TEST(GemmF32, BetaZeroIgnoresNaN) {
  const std::vector<float> a = {1, 2}, b = {3, 4};
  std::vector<float> c = {NAN};
  gemm_f32({1, 1, 2}, 1.0f, a.data(), b.data(), 0.0f, c.data());
  EXPECT_EQ(c[0], 11.0f);
}

TEST(Fp8Values, TablesAreTheScalarDecode) {
  for (int code = 0; code < 256; ++code) {
    const auto c = static_cast<uint8_t>(code);
    const float e4 = fp8_values(Fp8Format::E4M3)[code], e5 = fp8_values(Fp8Format::E5M2)[code];
    const float r4 = fp8kit::decode_fp8<Fp8Format::E4M3>(c), r5 = fp8kit::decode_fp8<Fp8Format::E5M2>(c);
    EXPECT_TRUE(e4 == r4 || (std::isnan(e4) && std::isnan(r4))) << code;
    EXPECT_TRUE(e5 == r5 || (std::isnan(e5) && std::isnan(r5))) << code;
  }
}

// Random finite codes of a format.
std::vector<uint8_t> random_codes(size_t n, Fp8Format format, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> codes(n);
  for (uint8_t& c : codes) {
    do {
      c = static_cast<uint8_t>(rng());
    } while (!std::isfinite(fp8kit::decode_fp8(c, format)));
  }
  return codes;
}

TEST(GemmFp8, MatchesScalarDecodeAndScaling) {
  const Fp8Format formats[][2] = {{Fp8Format::E4M3, Fp8Format::E4M3},
                                  {Fp8Format::E5M2, Fp8Format::E4M3},
                                  {Fp8Format::E4M3, Fp8Format::E5M2}};
  for (const Dims& d : kShapes) {
    for (int t = 0; t < 4; ++t) {
      for (const auto& f : formats) {
        const GemmShape s{d.m, d.n, d.k, (t & 1) != 0, (t & 2) != 0};
        const auto a = random_codes(d.m * d.k, f[0], 10 + t), b = random_codes(d.k * d.n, f[1], 20 + t);
        const float sa = 0.0371f, sb = 3.25e-3f;
        std::vector<float> c(d.m * d.n);
        gemm_fp8(s, {a.data(), f[0], sa}, {b.data(), f[1], sb}, 0.0f, c.data());
        std::vector<double> ad(a.size()), bd(b.size());
        for (size_t i = 0; i < a.size(); ++i) ad[i] = fp8kit::decode_fp8(a[i], f[0]);
        for (size_t i = 0; i < b.size(); ++i) bd[i] = fp8kit::decode_fp8(b[i], f[1]);
        for (int64_t i = 0; i < d.m; ++i)
          for (int64_t j = 0; j < d.n; ++j) {
            double acc = 0, magnitude = 0;
            for (int64_t l = 0; l < d.k; ++l) {
              acc += at_a(ad, s, i, l) * at_b(bd, s, l, j);
              magnitude += std::abs(at_a(ad, s, i, l) * at_b(bd, s, l, j));
            }
            // float32 accumulation: error below k ulps of the sum of magnitudes.
            const double tol = (magnitude * d.k * 0x1p-23 + 1e-30) * sa * sb;
            ASSERT_NEAR(c[i * d.n + j], acc * sa * sb, tol) << "trans " << t << " at " << i << "," << j;
          }
      }
    }
  }
}

}  // namespace
}  // namespace fp8kit::ops
