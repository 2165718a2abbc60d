// adam_step on Tensors (CPU): the same bits as the update core (adam_coefficients + adam_update) over
// the same values, for sizes that take the scalar tail, the AVX2 lanes and the threaded chunks; the
// iteration count in its tensor; and the argument errors.
#include "ops/adam.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "common/host_tensors.h"
#include "ops/context.h"
#include "tensor/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace fp8kit::ops {
namespace {

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

TEST(AdamOp, GivesTheCoresBits) {
  const AdamOptions options{3e-3f, 0.85f, 0.995f, 1e-6f};
  for (const int64_t n : {1, 13, 1000, 100003}) {
    std::vector<float> want_w = testing::random_vector(n, 1), want_m(n), want_v(n);
    Context c;
    Tensor w = testing::host_tensor(want_w, {n}), g({n}, DType::F32), m({n}, DType::F32), v({n}, DType::F32);
    Tensor iterations({1}, DType::F32);
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> grad =
          testing::random_vector(n, 10 + step, step == 1 ? -1e-6f : -1.0f, step == 1 ? 1e-6f : 1.0f);
      std::memcpy(g.data<float>(), grad.data(), n * sizeof(float));
      adam_update(adam_coefficients(options, static_cast<float>(step + 1)), want_w.data(), grad.data(), want_m.data(),
                  want_v.data(), n);
      adam_step(c, options, iterations, w, g, m, v);
      EXPECT_TRUE(same_bits(w.span<float>(), want_w)) << "n " << n << " step " << step;
      EXPECT_TRUE(same_bits(m.span<float>(), want_m)) << "n " << n << " step " << step;
      EXPECT_TRUE(same_bits(v.span<float>(), want_v)) << "n " << n << " step " << step;
      EXPECT_EQ(iterations.data<float>()[0], static_cast<float>(step + 1));
    }
  }
}

TEST(AdamOp, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  Tensor w({4}, DType::F32), g({4}, DType::F32), m({4}, DType::F32), v({4}, DType::F32), it({1}, DType::F32);
  Tensor short_g({3}, DType::F32), wide_it({2}, DType::F32), bf16_v({4}, DType::Bf16);
  EXPECT_THAT(error_of([&] { adam_step(c, {}, it, w, short_g, m, v); }),
              HasSubstr("adam_step: g (w's shape) must be [4], got [3]"));
  EXPECT_THAT(error_of([&] { adam_step(c, {}, wide_it, w, g, m, v); }),
              HasSubstr("adam_step: iterations must be [1], got [2]"));
  EXPECT_THAT(error_of([&] { adam_step(c, {}, it, w, g, m, bf16_v); }),
              HasSubstr("adam_step: v (w's shape) must be f32, got bf16"));
  EXPECT_THAT(error_of([&] { adam_step(c, {1e-3f, 1.0f}, it, w, g, m, v); }),
              HasSubstr("Adam betas must be in [0, 1), got 1 and 0.999"));
  EXPECT_EQ(it.data<float>()[0], 0.0f);  // nothing ran
}

}  // namespace
}  // namespace fp8kit::ops
