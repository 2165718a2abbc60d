// RoPE: the table against double-precision cos/sin of HF's float32 angles; the rotation against a
// reference that rounds each product and then the sum (no fused multiply-add: the bits the GPU gives),
// in place and out of place, at a start offset, bf16 rounding, head_dim 2 and 6 (half not a multiple of
// 4); bf16 tensors in and out against the f32 path's bits; the backward by finite differences and as
// the inverse rotation; the argument errors.
#include "ops/rope.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "cpu_op_test.h"
#include "numerics/cast.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace fp8kit::ops {
namespace {

// a * b rounded to float32 (volatile: -march=native would let the compiler fuse it into the add that
// follows, as it did to a double-precision version of this reference).
float mul(float a, float b) {
  volatile float p = a * b;
  return p;
}

TEST(Rope, TableIsHfsFloat32Angles) {
  Context c;
  Tensor table;
  const int64_t positions = 300, head_dim = 64;
  rope_table(c, positions, head_dim, 10000.0, table);
  ASSERT_EQ(table.shape(), (std::vector<int64_t>{positions, head_dim / 2, 2}));
  const float* t = table.data<float>();
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const float inv_freq =
          1.0f / static_cast<float>(std::pow(10000.0, static_cast<double>(static_cast<float>(2 * i) / 64.0f)));
      const double angle = static_cast<float>(p) * inv_freq;  // float32 product, as HF
      ASSERT_EQ(t[(p * 32 + i) * 2], static_cast<float>(std::cos(angle))) << p << " " << i;
      ASSERT_EQ(t[(p * 32 + i) * 2 + 1], static_cast<float>(std::sin(angle))) << p << " " << i;
      // ... which is within float32 rounding of the exact angle's.
      const double exact = p / std::pow(10000.0, 2.0 * i / 64.0);
      ASSERT_NEAR(t[(p * 32 + i) * 2], std::cos(exact), 1e-6 * (1 + exact));
    }
  }
  EXPECT_EQ(t[0], 1.0f);  // position 0
  EXPECT_EQ(t[1], 0.0f);
}

struct Case {
  int64_t batch, seq, heads, head_dim, start;
};

// out = rope_forward(x) by the formula of ops/rope.h, each product then the sum rounded.
std::vector<float> reference(const Tensor& table, const std::vector<float>& x, const Case& s, bool bf16) {
  std::vector<float> out(x.size());
  const int64_t half = s.head_dim / 2;
  const float* t = table.data<float>();
  for (int64_t bt = 0; bt < s.batch * s.seq; ++bt) {
    const int64_t pos = s.start + bt % s.seq;
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        const float c = t[(pos * half + i) * 2], sn = t[(pos * half + i) * 2 + 1];
        const int64_t lo = (bt * s.heads + h) * s.head_dim + i, hi = lo + half;
        const float a = mul(x[lo], c) - mul(x[hi], sn), b = mul(x[hi], c) + mul(x[lo], sn);
        out[lo] = bf16 ? round_bf16(a) : a;
        out[hi] = bf16 ? round_bf16(b) : b;
      }
    }
  }
  return out;
}

TEST(Rope, ForwardRoundsEachProductThenTheSum) {
  for (const Case s : {Case{2, 37, 3, 6, 5}, Case{1, 1, 1, 2, 0}, Case{3, 64, 4, 32, 0}, Case{2, 200, 2, 64, 20}}) {
    Context c;
    Tensor table;
    rope_table(c, s.start + s.seq, s.head_dim, 500000.0, table);
    const std::vector<float> x = testing::random_vector(s.batch * s.seq * s.heads * s.head_dim, 1, -4, 4);
    for (const bool bf16 : {false, true}) {
      const Tensor xt = testing::host_tensor(x, {s.batch, s.seq, s.heads * s.head_dim});
      Tensor out;
      rope_forward(c, table, xt, s.heads, s.start, bf16, out);
      EXPECT_TRUE(testing::same_bits(out.span<float>(), reference(table, x, s, bf16)))
          << s.batch << "x" << s.seq << " heads " << s.heads << " head_dim " << s.head_dim << " bf16 " << bf16;
      Tensor in_place = xt.clone();
      rope_forward(c, table, in_place, s.heads, s.start, bf16, in_place);
      EXPECT_TRUE(testing::same_bits(in_place.span<float>(), out.span<float>()));
    }
  }
}

// bf16 tensors: the forward's Bf16 out holds the bits of the f32 path's bf16-rounded values (whatever
// bf16 says; in place too); bf16 inputs (x, dout) give what f32 tensors of the same values give.
TEST(Rope, Bf16TensorsHoldTheF32PathsBits) {
  for (const Case s : {Case{2, 37, 3, 6, 5}, Case{1, 1, 1, 2, 0}, Case{2, 70, 4, 64, 20}}) {
    Context c;
    Tensor table;
    rope_table(c, s.start + s.seq, s.head_dim, 500000.0, table);
    const std::vector<int64_t> shape{s.batch, s.seq, s.heads * s.head_dim};
    std::vector<float> x = testing::random_vector(s.batch * s.seq * s.heads * s.head_dim, 4, -4, 4);
    const std::string what = "heads " + std::to_string(s.heads) + " head_dim " + std::to_string(s.head_dim);
    Tensor want;
    rope_forward(c, table, testing::host_tensor(x, shape), s.heads, s.start, true, want);
    for (const bool bf16 : {false, true}) {
      Tensor out;
      rope_forward(c, table, testing::host_tensor(x, shape), s.heads, s.start, bf16, out, DType::Bf16);
      ASSERT_EQ(out.dtype(), DType::Bf16);
      EXPECT_TRUE(testing::same_bits(testing::float_values(out), want.span<float>())) << what << " bf16 " << bf16;
    }
    for (float& v : x) v = round_bf16(v);
    const Tensor x_f32 = testing::host_tensor(x, shape), x_bf16 = testing::host_tensor(x, shape, DType::Bf16);
    for (const DType dtype : {DType::F32, DType::Bf16}) {
      Tensor from_f32, from_bf16;
      rope_forward(c, table, x_f32, s.heads, s.start, true, from_f32, dtype);
      rope_forward(c, table, x_bf16, s.heads, s.start, true, from_bf16, dtype);
      EXPECT_TRUE(testing::same_bits(testing::float_values(from_bf16), testing::float_values(from_f32)))
          << what << " out " << name(dtype);
    }
    Tensor in_place = x_bf16.clone(), out;
    rope_forward(c, table, in_place, s.heads, s.start, false, in_place, DType::Bf16);
    rope_forward(c, table, x_bf16, s.heads, s.start, false, out, DType::Bf16);
    EXPECT_TRUE(testing::same_bits(testing::float_values(in_place), testing::float_values(out))) << what;
    Tensor dx_f32, dx_bf16;
    rope_backward(c, table, x_f32, s.heads, s.start, dx_f32);
    rope_backward(c, table, x_bf16, s.heads, s.start, dx_bf16);
    ASSERT_EQ(dx_bf16.dtype(), DType::F32);
    EXPECT_TRUE(testing::same_bits(dx_bf16.span<float>(), dx_f32.span<float>())) << what;
  }
}

TEST(Rope, BackwardIsTheTransposeAndTheInverse) {
  const Case s{2, 9, 3, 6, 4};
  Context c;
  Tensor table;
  rope_table(c, 16, s.head_dim, 10000.0, table);
  const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
  auto x = testing::random_vector(n, 2, -2, 2);
  const auto w = testing::random_vector(n, 3);
  const std::vector<int64_t> shape{s.batch, s.seq, s.heads * s.head_dim};
  auto loss = [&] {
    Tensor out;
    rope_forward(c, table, testing::host_tensor(x, shape), s.heads, s.start, false, out);
    return testing::probe(out.span<float>(), w);
  };
  Tensor dx;
  rope_backward(c, table, testing::host_tensor(w, shape), s.heads, s.start, dx);
  std::vector<float> analytic(dx.span<float>().begin(), dx.span<float>().end());
  testing::expect_gradient_close(x, analytic, loss, 1e-2, 1e-4, 1e-3, "dx");
  // A rotation's transpose is its inverse; in place (dx = dout) too.
  Tensor rotated;
  rope_forward(c, table, testing::host_tensor(x, shape), s.heads, s.start, false, rotated);
  rope_backward(c, table, rotated, s.heads, s.start, rotated);
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(rotated.data<float>()[i], x[i], 1e-6) << i;
}

TEST(RopeOp, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  Tensor table, out;
  EXPECT_THAT(error_of([&] { rope_table(c, 8, 7, 10000.0, table); }),
              HasSubstr("rope_table: head_dim must be even and >= 2, got 7"));
  rope_table(c, 8, 4, 10000.0, table);
  Tensor x({1, 6, 8}, DType::F32), x2({6, 8}, DType::F32);
  EXPECT_THAT(error_of([&] { rope_forward(c, table, x2, 2, 0, false, out); }),
              HasSubstr("rope_forward: x must be [batch, seq, heads * head_dim], got [6, 8]"));
  EXPECT_THAT(error_of([&] { rope_forward(c, table, x, 4, 0, false, out); }),
              HasSubstr("rope_forward: the table must be [positions, 1, 2] (rope_table for head_dim 2), got "
                        "[8, 2, 2]"));
  EXPECT_THAT(error_of([&] { rope_forward(c, table, x, 3, 0, false, out); }),
              HasSubstr("x's last dim 8 must be heads (3) times an even head_dim"));
  EXPECT_THAT(error_of([&] { rope_backward(c, table, x, 2, 3, out); }),
              HasSubstr("rope_backward: positions [3, 9) are outside the table's 8: make the table for the longest"));
  Tensor codes({1, 6, 8}, DType::E4M3), bf16({1, 6, 8}, DType::Bf16);
  EXPECT_THAT(error_of([&] { rope_forward(c, table, codes, 2, 0, false, out); }),
              HasSubstr("rope_forward: x must be f32 or bf16, got e4m3"));
  EXPECT_THAT(error_of([&] { rope_forward(c, table, x, 2, 0, false, out, DType::E4M3); }),
              HasSubstr("rope_forward: out must be f32 or bf16, got e4m3"));
  EXPECT_THAT(error_of([&] { rope_forward(c, table, x, 2, 0, true, x, DType::Bf16); }),
              HasSubstr("rope_forward: out must be bf16 on the cpu, got f32 on the cpu"));
  EXPECT_THAT(error_of([&] { rope_backward(c, table, bf16, 2, 0, bf16); }),
              HasSubstr("rope_backward: dx must be f32 on the cpu, got bf16 on the cpu"));
}

}  // namespace
}  // namespace fp8kit::ops
