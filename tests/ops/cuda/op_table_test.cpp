// Runs every row of the op table on the CPU and the GPU and compares the outputs (op_table.h).
#include "ops/cuda/op_table.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "common/host_tensors.h"
#include "ops/quantize.h"
#include "ops/cuda/gpu_test.h"

namespace fp8kit::testing {

std::vector<OpCase>& op_table() {
  static std::vector<OpCase> table;
  return table;
}

std::vector<float> random_values(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = lo + (hi - lo) * static_cast<float>(rng() >> 40) / 16777216.0f;
  return v;
}

Tensor device_tensor(const std::vector<float>& values, std::vector<int64_t> shape, Device device, DType dtype) {
  return host_tensor(values, std::move(shape), dtype).to(device);
}

Tensor device_ints(const std::vector<int32_t>& values, std::vector<int64_t> shape, Device device) {
  Tensor t(std::move(shape), DType::I32);
  std::memcpy(t.data<int32_t>(), values.data(), values.size() * sizeof(int32_t));
  return t.to(device);
}

std::vector<uint32_t> tensor_bits(const Tensor& t) {
  const Tensor h = t.to(Device::Cpu);
  std::vector<uint32_t> out(h.numel());
  for (int64_t i = 0; i < h.numel(); ++i)
    out[i] = h.dtype() == DType::Bf16 ? h.data<uint16_t>()[i] : std::bit_cast<uint32_t>(h.data<float>()[i]);
  return out;
}

void run_activation_out(ops::Context& c, std::string_view kind, float scale,
                        const std::function<void(const ops::ActivationOut&)>& op, std::vector<Tensor>& result) {
  const bool fp8 = kind.starts_with("fp8");
  const Tensor multiplier = device_tensor({scale}, {1}, c.device());
  Tensor out;
  QTensor q;
  QuantSpec spec;
  if (kind == "fp8_row") spec.granularity = Granularity::PerRow;
  op(fp8 ? ops::ActivationOut{.fp8 = &q, .spec = spec, .scale = kind == "fp8_tensor" ? &multiplier : nullptr}
         : ops::ActivationOut{.bf16 = &out});
  if (fp8) {
    result.push_back(ops::dequantize(c, q));  // on c's stream, after op (the default stream would not wait)
    result.push_back(std::move(q.scale_inv));
    result.push_back(std::move(q.amax));
  } else {
    result.push_back(std::move(out));
  }
  c.synchronize();
}

namespace {

class OpTable : public ::testing::TestWithParam<OpCase> {};

// The outputs as raw host bytes and, for float dtypes, values.
void expect_same(const Tensor& gpu, const Tensor& cpu, const OpCase& row, size_t index) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << "output " << index;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << "output " << index;
  const Tensor g = gpu.to(Device::Cpu), c = cpu.to(Device::Cpu);
  const bool floats = c.dtype() == DType::F32 || c.dtype() == DType::Bf16;
  if (!floats || (row.atol == 0 && row.rtol == 0)) {
    if (floats) {  // NaNs compare as NaNs (GPU NaNs carry no payload)
      const std::vector<float> gv = float_values(g), cv = float_values(c);
      size_t bad = 0;
      for (size_t i = 0; i < gv.size(); ++i) {
        const bool same = std::isnan(gv[i]) ? std::isnan(cv[i]) : std::memcmp(&gv[i], &cv[i], 4) == 0;
        if (!same && ++bad <= 5) ADD_FAILURE() << "output " << index << "[" << i << "]: gpu " << gv[i] << " cpu " << cv[i];
      }
      EXPECT_EQ(bad, 0u) << "output " << index << ": elements that differ";
    } else {
      EXPECT_EQ(std::memcmp(g.data<std::byte>(), c.data<std::byte>(), c.nbytes()), 0) << "output " << index;
    }
    return;
  }
  const std::vector<float> gv = float_values(g), cv = float_values(c);
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < gv.size(); ++i) {
    const double d = std::fabs(static_cast<double>(gv[i]) - cv[i]);
    const bool ok = std::isnan(cv[i]) ? std::isnan(gv[i]) : d <= row.atol + row.rtol * std::fabs(cv[i]);
    worst = std::max(worst, d);
    if (!ok && ++bad <= 5) ADD_FAILURE() << "output " << index << "[" << i << "]: gpu " << gv[i] << " cpu " << cv[i];
  }
  EXPECT_EQ(bad, 0u) << "output " << index << ": elements outside the tolerance (largest difference " << worst << ")";
}

TEST_P(OpTable, GpuMatchesCpu) {
  FP8KIT_REQUIRE_GPU();
  const OpCase& row = GetParam();
  ops::Context cpu(Device::Cpu, 42), gpu(Device::Cuda, 42);
  cpu.set_step(3);
  gpu.set_step(3);
  const std::vector<Tensor> want = row.run(cpu);
  std::vector<Tensor> got = row.run(gpu);
  gpu.synchronize();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) expect_same(got[i], want[i], row, i);
}

std::string row_name(const ::testing::TestParamInfo<OpCase>& info) {
  std::string s;
  for (char ch : info.param.name) s += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTable, ::testing::ValuesIn(op_table()), row_name);

}  // namespace
}  // namespace fp8kit::testing
