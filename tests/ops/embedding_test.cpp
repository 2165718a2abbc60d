// Token + position embedding on Tensors (CPU): the forward is the gather core (embedding_gather)
// then ops::dropout_forward, bit for bit; the backward pair sums in batch-position order (the same bits
// as a plain sequential loop); and the argument errors name the op, the tensor and the fix.
#include "ops/embedding.h"

#include "common/error_of.h"
#include "common/host_tensors.h"
#include "ops/dropout.h"
#include "numerics/cast.h"
#include "ops/context.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace fp8kit::ops {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

std::vector<float> random_vector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

Tensor tensor_of(const std::vector<float>& values, std::vector<int64_t> shape) {
  return testing::host_tensor(values, std::move(shape));
}

Tensor ids_of(const std::vector<int32_t>& ids, std::vector<int64_t> shape) {
  Tensor t(std::move(shape), DType::I32);
  if (!ids.empty()) std::memcpy(t.data<int32_t>(), ids.data(), ids.size() * sizeof(int32_t));  // (no rows: null data)
  return t;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

struct Shape {
  int64_t batch, seq, dim, vocabulary;
};

// Ids with repeats and both ends of the vocabulary.
std::vector<int32_t> some_ids(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(s.batch * s.seq);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 4 == 0 ? 0 : rng() % s.vocabulary);
  ids.front() = static_cast<int32_t>(s.vocabulary - 1);
  ids.back() = 0;
  return ids;
}

TEST(EmbeddingOp, ForwardIsTheLayerThenDropoutBitForBit) {
  const Shape s{3, 37, 33, 50};
  const std::vector<float> token = random_vector(s.vocabulary * s.dim, 1), position = random_vector(s.seq * s.dim, 2);
  const std::vector<int32_t> ids = some_ids(s, 3);
  const Tensor tokens = ids_of(ids, {s.batch, s.seq});
  const Tensor token_table = tensor_of(token, {s.vocabulary, s.dim});
  const Tensor position_table = tensor_of(position, {s.seq, s.dim});
  Context c(Device::Cpu, 11);
  c.set_step(5);
  for (const bool bf16 : {false, true}) {
    for (const bool active : {false, true}) {
      std::vector<float> want(s.batch * s.seq * s.dim);
      embedding_gather(ids, s.seq, s.dim, token, position, bf16, want);
      if (active) dropout_forward(DropoutMask(11, 5, 4, 0.25f), 0.25f, bf16, want, want);
      Tensor out;
      embedding_forward(c, tokens, token_table, position_table, bf16, {4, 0.25f, active}, out);
      EXPECT_EQ(out.shape(), (std::vector<int64_t>{s.batch, s.seq, s.dim}));
      EXPECT_TRUE(same_bits(out.span<float>(), want)) << "bf16 " << bf16 << " dropout " << active;
    }
  }
  // The gather itself, element by element (a plain sum; bf16: both rounded, the sum rounded).
  Tensor out;
  embedding_forward(c, tokens, token_table, position_table, true, {}, out);
  for (int64_t bt = 0; bt < s.batch * s.seq; ++bt)
    for (int64_t d = 0; d < s.dim; ++d)
      ASSERT_EQ(out.data<float>()[bt * s.dim + d],
                round_bf16(round_bf16(token[ids[bt] * s.dim + d]) + round_bf16(position[(bt % s.seq) * s.dim + d])));
}

TEST(EmbeddingOp, BackwardSumsInBatchOrder) {
  // Batch 1 and a large one (the threaded path: rows * dim >= 65536); one id repeated everywhere.
  for (const Shape s : {Shape{1, 7, 5, 3}, Shape{4, 37, 33, 20}, Shape{16, 80, 64, 300}}) {
    for (const bool repeated : {false, true}) {
      std::vector<int32_t> ids = some_ids(s, 7);
      if (repeated) std::fill(ids.begin(), ids.end(), static_cast<int32_t>(s.vocabulary / 2));
      const std::vector<float> dout = random_vector(s.batch * s.seq * s.dim, 8);
      // A plain sequential scatter in batch-position order.
      std::vector<float> token_want(s.vocabulary * s.dim, 0.0f), position_want(s.seq * s.dim, 0.0f);
      for (int64_t bt = 0; bt < s.batch * s.seq; ++bt)
        for (int64_t d = 0; d < s.dim; ++d) {
          token_want[ids[bt] * s.dim + d] += dout[bt * s.dim + d];
          position_want[(bt % s.seq) * s.dim + d] += dout[bt * s.dim + d];
        }

      Context c;
      const Tensor tokens = ids_of(ids, {s.batch, s.seq});
      // Stale values everywhere: the pair overwrites them all.
      Tensor token_grad = tensor_of(std::vector<float>(s.vocabulary * s.dim, 9.0f), {s.vocabulary, s.dim});
      Tensor position_grad = tensor_of(std::vector<float>(s.seq * s.dim, 9.0f), {s.seq, s.dim});
      Tensor workspace;
      embedding_backward_sort(c, tokens, token_grad, workspace);
      embedding_backward_sums(c, tokens, tensor_of(dout, {s.batch, s.seq, s.dim}), token_grad, position_grad,
                              workspace);
      EXPECT_TRUE(same_bits(token_grad.span<float>(), token_want)) << s.batch << " repeated " << repeated;
      EXPECT_TRUE(same_bits(position_grad.span<float>(), position_want)) << s.batch << " repeated " << repeated;
    }
  }
}

TEST(EmbeddingOp, AnEmptyPositionTableMeansTokensOnly) {
  // Llama's embedding: out = token[id] (bf16: rounded), dropout as with positions; the backward's token
  // gradient as with positions, and the empty position gradient left alone.
  for (const Shape s : {Shape{3, 37, 33, 50}, Shape{16, 80, 64, 300}}) {  // single-threaded and threaded
    const std::vector<float> token = random_vector(s.vocabulary * s.dim, 1);
    const std::vector<int32_t> ids = some_ids(s, 3);
    const Tensor tokens = ids_of(ids, {s.batch, s.seq});
    const Tensor token_table = tensor_of(token, {s.vocabulary, s.dim});
    Context c(Device::Cpu, 11);
    for (const bool bf16 : {false, true}) {
      for (const bool active : {false, true}) {
        std::vector<float> want(s.batch * s.seq * s.dim);
        for (int64_t bt = 0; bt < s.batch * s.seq; ++bt)
          for (int64_t d = 0; d < s.dim; ++d) {
            const float t = token[ids[bt] * s.dim + d];
            want[bt * s.dim + d] = bf16 ? round_bf16(t) : t;
          }
        if (active) dropout_forward(DropoutMask(11, 0, 4, 0.25f), 0.25f, bf16, want, want);
        Tensor out;
        embedding_forward(c, tokens, token_table, Tensor(), bf16, {4, 0.25f, active}, out);
        EXPECT_TRUE(same_bits(out.span<float>(), want)) << "bf16 " << bf16 << " dropout " << active;
      }
    }
    const std::vector<float> dout = random_vector(s.batch * s.seq * s.dim, 8);
    Tensor want_grad = tensor_of(std::vector<float>(s.vocabulary * s.dim), {s.vocabulary, s.dim});
    Tensor position_grad = tensor_of(std::vector<float>(s.seq * s.dim), {s.seq, s.dim}), workspace;
    embedding_backward_sort(c, tokens, want_grad, workspace);
    embedding_backward_sums(c, tokens, tensor_of(dout, {s.batch, s.seq, s.dim}), want_grad, position_grad, workspace);
    Tensor token_grad = tensor_of(std::vector<float>(s.vocabulary * s.dim, 9.0f), {s.vocabulary, s.dim}), none;
    embedding_backward_sort(c, tokens, token_grad, workspace);
    embedding_backward_sums(c, tokens, tensor_of(dout, {s.batch, s.seq, s.dim}), token_grad, none, workspace);
    EXPECT_TRUE(same_bits(token_grad.span<float>(), want_grad.span<float>())) << s.batch;
    EXPECT_EQ(none.numel(), 0);
  }
}

TEST(EmbeddingOp, ErrorsNameTheOpTheTensorAndTheFix) {
  Context c;
  const Tensor tokens = ids_of({0, 4, 2, 1}, {2, 2});
  const Tensor table = tensor_of(std::vector<float>(15), {5, 3}), position = tensor_of(std::vector<float>(6), {2, 3});
  Tensor out;
  EXPECT_THAT(error_of([&] {
                embedding_forward(c, ids_of({0, 5, 2, 1}, {2, 2}), table, position, false, {}, out);
              }),
              HasSubstr("token id 5 at position 1 is outside the vocabulary [0, 5)"));
  EXPECT_THAT(error_of([&] {
                embedding_forward(c, ids_of({0, 1, -1, 1}, {2, 2}), table, position, false, {}, out);
              }),
              HasSubstr("token id -1 at position 2"));
  EXPECT_THAT(error_of([&] {
                embedding_forward(c, tensor_of({0, 1, 2, 3}, {2, 2}), table, position, false, {}, out);
              }),
              HasSubstr("embedding_forward: tokens must be i32, got f32"));
  EXPECT_THAT(error_of([&] {
                embedding_forward(c, ids_of({0, 1}, {2}), table, position, false, {}, out);
              }),
              HasSubstr("embedding_forward: tokens must be [batch, seq] ids, got rank 1"));
  EXPECT_THAT(error_of([&] {
                embedding_forward(c, tokens, table, tensor_of(std::vector<float>(9), {3, 3}), false, {}, out);
              }),
              HasSubstr("embedding_forward: position_table (or an empty tensor) must be [2, 3], got [3, 3]"));
  Tensor wrong_out({1}, DType::Bf16);
  EXPECT_THAT(error_of([&] { embedding_forward(c, tokens, table, position, false, {}, wrong_out); }),
              HasSubstr("embedding_forward: out must be f32 on the cpu, got bf16"));
  Tensor token_grad = tensor_of(std::vector<float>(15), {5, 3}),
         position_grad = tensor_of(std::vector<float>(6), {2, 3});
  Tensor flat_grad = tensor_of(std::vector<float>(15), {15}), workspace;
  EXPECT_THAT(error_of([&] { embedding_backward_sort(c, tokens, flat_grad, workspace); }),
              HasSubstr("embedding_backward_sort: token_grad must be [vocabulary, dim], got rank 1"));
  EXPECT_THAT(error_of([&] {
                embedding_backward_sums(c, tokens, tensor_of(std::vector<float>(8), {2, 2, 2}), token_grad,
                                        position_grad, workspace);
              }),
              HasSubstr("embedding_backward_sums: dout must be [2, 2, 3], got [2, 2, 2]"));
  EXPECT_THAT(error_of([&] {
                embedding_backward_sums(c, ids_of({0, 7, 2, 1}, {2, 2}), tensor_of(std::vector<float>(12), {2, 2, 3}),
                                        token_grad, position_grad, workspace);
              }),
              HasSubstr("token id 7 at position 1 is outside the vocabulary [0, 5)"));
}

// gather_rows: out row r is table row ids[r] (repeats, the first and last rows), bit for bit in f32
// and bf16; an id outside the table throws, naming it.
TEST(GatherRows, CopiesTheRowsOfTheIds) {
  const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8, 9, -1, -2, -3.5f};
  for (const DType dtype : {DType::F32, DType::Bf16}) {
    Context c;
    const Tensor table = testing::host_tensor(values, {4, 3}, dtype);
    Tensor out;
    gather_rows(c, table, ids_of({3, 0, 0, 2}, {4}), out);
    EXPECT_EQ(out.dtype(), dtype);
    EXPECT_EQ(out.shape(), (std::vector<int64_t>{4, 3}));
    EXPECT_EQ(testing::float_values(out), (std::vector<float>{-1, -2, -3.5f, 1, 2, 3, 1, 2, 3, 7, 8, 9}));
    gather_rows(c, table, ids_of({}, {0}), out);
    EXPECT_EQ(out.shape(), (std::vector<int64_t>{0, 3}));
  }
}

TEST(GatherRows, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  const Tensor table = tensor_of(std::vector<float>(6), {2, 3});
  Tensor out;
  EXPECT_THAT(error_of([&] { gather_rows(c, table, ids_of({0, 2}, {2}), out); }),
              HasSubstr("gather_rows: ids[1] = 2 is outside the table's rows [0, 2)"));
  EXPECT_THAT(error_of([&] { gather_rows(c, table, ids_of({0, 1}, {1, 2}), out); }),
              HasSubstr("gather_rows: ids must be [rows] i32, got [1, 2]"));
  EXPECT_THAT(error_of([&] { gather_rows(c, ids_of({0, 1}, {1, 2}), ids_of({0}, {1}), out); }),
              HasSubstr("gather_rows: table must be [n, dim] bf16 or f32, got i32 [1, 2]"));
}

}  // namespace
}  // namespace fp8kit::ops
