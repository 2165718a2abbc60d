// The op table (ggml's test-backend-ops): every op at every configuration that matters (dtype,
// granularity, rounding mode, awkward shapes) runs on the CPU, the exact reference, and on the GPU
// from the same inputs, and their outputs must agree: bit for bit, or within a row's stated
// tolerance. A new op needs only rows here (one file per op family registers them).
#pragma once

#include "ops/activation_out.h"
#include "ops/context.h"
#include "tensor/tensor.h"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8kit::testing {

struct OpCase {
  std::string name;  // "<op>/<configuration>", unique: the test's name
  // Makes the row's inputs on c.device() (the same values on every device: from a fixed seed), runs
  // the op there and returns its outputs, on any device. Called once per device.
  std::function<std::vector<Tensor>(ops::Context& c)> run;
  // |gpu - cpu| <= atol + rtol |cpu| element by element; both 0: the same bits (NaNs: both NaN).
  double atol = 0, rtol = 0;
};

// Every registered row.
std::vector<OpCase>& op_table();

// A file's rows, registered at static initialisation: `const RegisterOps rows([](auto& t) { ... });`
struct RegisterOps {
  explicit RegisterOps(const std::function<void(std::vector<OpCase>&)>& add) { add(op_table()); }
};

// Deterministic test values: n floats, uniform in [lo, hi), from `seed`; with `specials`, a few zeros,
// tiny, huge, negative zero and NaN values mixed in where the op must handle them.
std::vector<float> random_values(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// Host values to a tensor on `device`: f32, or bf16 (rounded); i32 from ints.
Tensor device_tensor(const std::vector<float>& values, std::vector<int64_t> shape, Device device,
                     DType dtype = DType::F32);
Tensor device_ints(const std::vector<int32_t>& values, std::vector<int64_t> shape, Device device);
// A tensor's values as raw bits, copied to the host: f32's 32, bf16's 16 (in the low half).
std::vector<uint32_t> tensor_bits(const Tensor& t);

// Runs `op`, which writes an ops::ActivationOut, in one of the rows' kinds: "bf16", "fp8_tensor" (the
// static multiplier `scale`) or "fp8_row" (current scales per row); appends its output to `result`
// (bf16; or the FP8 codes dequantized, their scale_inv and amax), then waits for c's work.
void run_activation_out(ops::Context& c, std::string_view kind, float scale,
                        const std::function<void(const ops::ActivationOut&)>& op, std::vector<Tensor>& result);

}  // namespace fp8kit::testing
