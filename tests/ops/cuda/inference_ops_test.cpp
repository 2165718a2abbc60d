// Inference's fused ops on the GPU: add_rms_norm's and swiglu's E4M3 outputs (per tensor and per
// row), and decode_attention's (per tensor), are exactly ops::quantize's bytes of their own bf16
// results on the GPU, at rows that take every path of the row kernel (a value per thread, and 1, 2, 4
// and 8 vectors of 8 bf16 per thread) and at no rows; a row's bytes the same at few rows (a cluster of
// blocks per row) and many (a block per row); and a step of the inference ops captured in a CUDA graph
// writes, when replayed, the eager calls' bytes.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "common/activation_out_checks.h"
#include "common/gradient_check.h"
#include "kv_cache_inputs.h"
#include "ops/cuda/context.h"
#include "ops/cuda/gpu_test.h"
#include "ops/embedding.h"
#include "ops/init.h"
#include "ops/rms_norm.h"
#include "ops/sampling.h"
#include "ops/swiglu.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/graph.h"

namespace fp8kit::testing {
namespace {

Tensor gpu_tensor(const std::vector<float>& values, std::vector<int64_t> shape, DType dtype = DType::F32) {
  return host_tensor(values, std::move(shape), dtype).to(Device::Cuda);
}

constexpr int64_t kColumns[] = {7, 4097, 4096, 5000, 14336, 20000};

TEST(CudaInferenceOps, AddRmsNormFp8IsQuantizeOfItsBf16) {
  FP8KIT_REQUIRE_GPU();
  ops::Context c(Device::Cuda);
  for (const int64_t dim : kColumns) {
    const int64_t rows = 3;
    const Tensor delta = gpu_tensor(random_vector(rows * dim, 2), {rows, dim}, DType::Bf16);
    const Tensor weight = gpu_tensor(random_vector(dim, 3, 0.5f, 1.5f), {dim});
    SCOPED_TRACE(fmt::format("dim {}", dim));
    expect_fp8_is_quantized_bf16(c, [&](const ops::ActivationOut& out) {
      Tensor residual = gpu_tensor(random_vector(rows * dim, 1, -3, 3), {rows, dim}, DType::Bf16);
      ops::add_rms_norm(c, residual, &delta, weight, 1e-5f, out);
      c.synchronize();  // before residual is freed
    });
  }
}

TEST(CudaInferenceOps, SwigluFp8IsQuantizeOfItsBf16) {
  FP8KIT_REQUIRE_GPU();
  ops::Context c(Device::Cuda);
  for (const int64_t ffn : kColumns) {
    const Tensor gate_up = gpu_tensor(random_vector(2 * 2 * ffn, 4, -8, 8), {2, 2 * ffn}, DType::Bf16);
    SCOPED_TRACE(fmt::format("ffn {}", ffn));
    expect_fp8_is_quantized_bf16(c, [&](const ops::ActivationOut& out) { ops::swiglu(c, gate_up, out); });
  }
}

// decode_attention's combine writes the output projection's E4M3 input in its pass: quantize's bytes
// of its own bf16 result, for a bf16 and an E4M3 cache (values up to 448 x 0.004 x 100: some saturate),
// and with no sequences.
TEST(CudaInferenceOps, DecodeAttentionFp8IsQuantizeOfItsBf16) {
  FP8KIT_REQUIRE_GPU();
  ops::Context c(Device::Cuda);
  for (const DType dtype : {DType::Bf16, DType::E4M3}) {
    const KvCacheCase s{4, 300, 32, 8, 128, dtype};
    const ops::KvCacheLayer cache = random_cache(c, s, 17, 4.0f);
    for (const int64_t batch : {3, 0}) {
      const Tensor q = gpu_tensor(random_vector(batch * s.heads * s.head_dim, 19), {batch, s.heads * s.head_dim},
                                  DType::Bf16);
      const std::vector<int32_t> all_slots{2, 0, 3}, all_lengths{300, 1, 129};
      const Tensor slots = device_ints({all_slots.begin(), all_slots.begin() + batch}, {batch}, Device::Cuda);
      const Tensor lengths = device_ints({all_lengths.begin(), all_lengths.begin() + batch}, {batch}, Device::Cuda);
      SCOPED_TRACE(fmt::format("{} cache, batch {}", name(dtype), batch));
      expect_fp8_is_quantized_bf16(
          c, [&](const ops::ActivationOut& out) { ops::decode_attention(c, q, cache, slots, lengths, 32, 0.0f, out); },
          true);
    }
  }
}

// Below 128 rows a cluster of blocks shares each row, above that a block per row
// (ops/cuda/activation_out.cuh): a row's bytes are the same either way (add_rms_norm's sum of squares
// taken in the same order). run(rows, out) runs the op on the first `rows` of the same inputs.
void expect_few_rows_give_the_bytes_of_many(ops::Context& c,
                                            const std::function<void(int64_t, const ops::ActivationOut&)>& run) {
  const int64_t few = 3, many = 130;
  const auto expect_head = [&](const Tensor& of_many, const Tensor& of_few, const std::string& what) {
    EXPECT_TRUE(same_bytes(of_many.view(0, of_few.shape()), of_few)) << what;
  };
  Tensor bf16_few, bf16_many;
  run(few, {.bf16 = &bf16_few});
  run(many, {.bf16 = &bf16_many});
  expect_head(bf16_many, bf16_few, "bf16");
  const Tensor scale = scalar_tensor(100.0f, c.device());
  QuantSpec per_tensor, per_row;
  per_row.granularity = Granularity::PerRow;
  for (const QuantSpec& spec : {per_tensor, per_row}) {
    const Tensor* s = spec.granularity == Granularity::PerTensor ? &scale : nullptr;
    QTensor q_few, q_many;
    run(few, {.fp8 = &q_few, .spec = spec, .scale = s});
    run(many, {.fp8 = &q_many, .spec = spec, .scale = s});
    const std::string what(name(spec.granularity));
    expect_head(q_many.codes, q_few.codes, what + ": codes");
    if (spec.granularity == Granularity::PerRow) {  // per tensor, the amax is the whole tensor's
      expect_head(q_many.scale_inv, q_few.scale_inv, what + ": scale_inv");
      expect_head(q_many.amax, q_few.amax, what + ": amax");
    }
  }
}

// The first `rows` rows of values, a [.., cols] matrix.
std::vector<float> head_rows(const std::vector<float>& values, int64_t rows, int64_t cols) {
  return {values.begin(), values.begin() + rows * cols};
}

TEST(CudaInferenceOps, AddRmsNormGivesTheSameRowsAtFewAndManyRows) {
  FP8KIT_REQUIRE_GPU();
  ops::Context c(Device::Cuda);
  for (const int64_t dim : kColumns) {
    const std::vector<float> residual = random_vector(130 * dim, 1, -3, 3), delta = random_vector(130 * dim, 2);
    const Tensor weight = gpu_tensor(random_vector(dim, 3, 0.5f, 1.5f), {dim});
    SCOPED_TRACE(fmt::format("dim {}", dim));
    expect_few_rows_give_the_bytes_of_many(c, [&](int64_t rows, const ops::ActivationOut& out) {
      Tensor r = gpu_tensor(head_rows(residual, rows, dim), {rows, dim}, DType::Bf16);
      const Tensor d = gpu_tensor(head_rows(delta, rows, dim), {rows, dim}, DType::Bf16);
      ops::add_rms_norm(c, r, &d, weight, 1e-5f, out);
      c.synchronize();  // before r and d are freed
    });
  }
}

TEST(CudaInferenceOps, SwigluGivesTheSameRowsAtFewAndManyRows) {
  FP8KIT_REQUIRE_GPU();
  ops::Context c(Device::Cuda);
  for (const int64_t ffn : kColumns) {
    const std::vector<float> gate_up = random_vector(130 * 2 * ffn, 4, -8, 8);
    SCOPED_TRACE(fmt::format("ffn {}", ffn));
    expect_few_rows_give_the_bytes_of_many(c, [&](int64_t rows, const ops::ActivationOut& out) {
      const Tensor g = gpu_tensor(head_rows(gate_up, rows, 2 * ffn), {rows, 2 * ffn}, DType::Bf16);
      ops::swiglu(c, g, out);
      c.synchronize();  // before g is freed
    });
  }
}

// No rows launch no row kernel; per tensor, scale_inv is still quantize's (1 / scale).
TEST(CudaInferenceOps, NoRowsGiveQuantizesBytes) {
  FP8KIT_REQUIRE_GPU();
  ops::Context c(Device::Cuda);
  const Tensor weight = gpu_tensor(random_vector(64, 3), {64});
  const Tensor gate_up({0, 128}, DType::Bf16, Device::Cuda);
  expect_fp8_is_quantized_bf16(c, [&](const ops::ActivationOut& out) {
    Tensor residual({0, 64}, DType::Bf16, Device::Cuda);
    ops::add_rms_norm(c, residual, nullptr, weight, 1e-5f, out);
  });
  expect_fp8_is_quantized_bf16(c, [&](const ops::ActivationOut& out) { ops::swiglu(c, gate_up, out); });
}

TEST(CudaInferenceOps, CapturedInAGraphWritesTheEagerBytes) {
  FP8KIT_REQUIRE_GPU();
  ops::Context c(Device::Cuda);
  const int64_t rows = 4, dim = 4096, ffn = 14336;
  Tensor residual = gpu_tensor(random_vector(rows * dim, 5, -3, 3), {rows, dim}, DType::Bf16);
  const Tensor weight = gpu_tensor(random_vector(dim, 6, 0.5f, 1.5f), {dim});
  const Tensor gate_up = gpu_tensor(random_vector(rows * 2 * ffn, 7, -8, 8), {rows, 2 * ffn}, DType::Bf16);
  const Tensor logits = gpu_tensor(random_vector(rows * 1000, 8), {rows, 1000});
  const Tensor table = gpu_tensor(random_vector(100 * dim, 9), {100, dim}, DType::Bf16);
  Tensor ids({4}, DType::I32);
  for (int i = 0; i < 4; ++i) ids.data<int32_t>()[i] = std::array{3, 99, 0, 3}[i];
  const Tensor gpu_ids = ids.to(Device::Cuda);
  const Tensor scale = scalar_tensor(50.0f, Device::Cuda);
  QuantSpec per_row;
  per_row.granularity = Granularity::PerRow;
  QTensor norm_tensor, norm_row, act_row;
  Tensor norm_bf16, act_bf16, best, gathered, filled({rows, dim}, DType::Bf16, Device::Cuda);
  const auto step = [&] {
    ops::add_rms_norm(c, residual, nullptr, weight, 1e-5f, {.bf16 = &norm_bf16});
    ops::add_rms_norm(c, residual, nullptr, weight, 1e-5f, {.fp8 = &norm_tensor, .scale = &scale});
    ops::add_rms_norm(c, residual, nullptr, weight, 1e-5f, {.fp8 = &norm_row, .spec = per_row});
    ops::swiglu(c, gate_up, {.bf16 = &act_bf16});
    ops::swiglu(c, gate_up, {.fp8 = &act_row, .spec = per_row});
    ops::argmax_rows(c, logits, best);
    ops::gather_rows(c, table, gpu_ids, gathered);
    ops::fill_normal(c, filled, 0.02f, 3);
  };
  step();
  c.synchronize();
  std::vector<Tensor*> outputs = {&norm_bf16, &best, &gathered, &filled, &act_bf16};
  for (QTensor* q : {&norm_tensor, &norm_row, &act_row})
    for (Tensor* t : {&q->codes, &q->scale_inv, &q->amax}) outputs.push_back(t);
  std::vector<Tensor> eager;
  for (Tensor* t : outputs) eager.push_back(t->to(Device::Cpu));
  const cuda::Graph graph = cuda::Graph::capture(ops::stream(c), step);
  for (Tensor* t : outputs)  // scribbled over, in the order of the lane the graph runs on
    FP8KIT_CUDA_CHECK(cudaMemsetAsync(t->device_data<std::byte>(), 0x5A, t->nbytes(), ops::stream(c)));
  graph.launch(ops::stream(c));
  c.synchronize();
  for (size_t i = 0; i < outputs.size(); ++i) EXPECT_TRUE(same_bytes(*outputs[i], eager[i])) << "output " << i;
}

}  // namespace
}  // namespace fp8kit::testing
