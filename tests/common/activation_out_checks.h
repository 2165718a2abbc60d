// The check every op that writes an ops::ActivationOut passes, on either device: its fp8 outputs are
// exactly ops::quantize's bytes (codes, scale_inv, amax) of its own bf16 result.
#pragma once

#include "common/host_tensors.h"
#include "ops/activation_out.h"
#include "ops/quantize.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

namespace fp8kit::testing {

// Whether a and b (any devices) have the same shape, dtype and bytes.
inline bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::Cpu), y = b.to(Device::Cpu);
  return x.shape() == y.shape() && x.dtype() == y.dtype() &&
         (x.nbytes() == 0 || std::memcmp(x.data<std::byte>(), y.data<std::byte>(), x.nbytes()) == 0);
}

// run(out) runs the op on c into `out`, from the same inputs at every call. E4M3 per tensor with a
// static scale (large enough that some values saturate), also with record_amax off (the same codes and
// scale_inv), and, unless per_tensor_only, per row with current scaling (plain, and with a margin and
// power-of-two scales), each written twice into the same QTensor (stale amax and scales must not leak
// into the second): the bytes of ops::quantize of the bf16 output.
inline void expect_fp8_is_quantized_bf16(ops::Context& c, const std::function<void(const ops::ActivationOut&)>& run,
                                         bool per_tensor_only = false) {
  Tensor bf16;
  run({.bf16 = &bf16});
  const Tensor scale = scalar_tensor(100.0f, c.device());
  QuantSpec per_tensor, per_row, per_row_options;
  per_row.granularity = per_row_options.granularity = Granularity::PerRow;
  per_row_options.options = {.margin = 1, .power_of_two = true};
  for (const QuantSpec& spec : {per_tensor, per_row, per_row_options}) {
    if (per_tensor_only && spec.granularity != Granularity::PerTensor) continue;
    const Tensor* s = spec.granularity == Granularity::PerTensor ? &scale : nullptr;
    QTensor want, got;
    ops::quantize(c, bf16, spec, want, s);
    for (int pass = 0; pass < 2; ++pass) run({.fp8 = &got, .spec = spec, .scale = s});
    c.synchronize();
    const std::string what = std::string(name(spec.granularity)) + (spec.options.margin != 0 ? " with options" : "");
    EXPECT_TRUE(same_bytes(got.codes, want.codes)) << what << ": codes";
    EXPECT_TRUE(same_bytes(got.scale_inv, want.scale_inv)) << what << ": scale_inv";
    EXPECT_TRUE(same_bytes(got.amax, want.amax)) << what << ": amax";
    EXPECT_EQ(got.codes_t.numel(), 0) << what;
    if (spec.granularity != Granularity::PerTensor) continue;
    QTensor unrecorded;
    run({.fp8 = &unrecorded, .spec = spec, .scale = s, .record_amax = false});
    c.synchronize();
    EXPECT_TRUE(same_bytes(unrecorded.codes, want.codes)) << what << " without the amax: codes";
    EXPECT_TRUE(same_bytes(unrecorded.scale_inv, want.scale_inv)) << what << " without the amax: scale_inv";
  }
}

}  // namespace fp8kit::testing
