// Rotary position embeddings on Tensors (f32 or bf16): argument checks, then the CPU core
// (ops/cpu/rope.h) or the GPU kernel (ops/cuda/rope.h) on the context's current lane. The table is
// made on the host (once per model) and copied to the context's device.
#include "ops/rope.h"

#include "base/error.h"
#include "ops/cpu/rope.h"
#include "ops/tensor_checks.h"

#include <fmt/ranges.h>

#include <vector>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/rope.h"
#endif

namespace fp8kit::ops {

namespace {

struct RopeShape {
  int64_t batch, seq, heads, head_dim;
};

// x [batch, seq, heads * head_dim] f32 or bf16 and the table [positions, head_dim / 2, 2] covering
// positions [start, start + seq).
RopeShape check_rope(const Context& c, const Tensor& table, const Tensor& x, int64_t heads, int64_t start,
                     std::string_view op, std::string_view what) {
  FP8KIT_CHECK(x.rank() == 3, "{}: {} must be [batch, seq, heads * head_dim], got [{}]", op, what,
               fmt::join(x.shape(), ", "));
  FP8KIT_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::Bf16, "{}: {} must be f32 or bf16, got {}", op, what,
               name(x.dtype()));
  check_tensor(c, x, x.shape(), x.dtype(), op, what);
  FP8KIT_CHECK(heads >= 1 && x.dim(2) % heads == 0 && (x.dim(2) / heads) % 2 == 0 && x.dim(2) > 0,
               "{}: {}'s last dim {} must be heads ({}) times an even head_dim", op, what, x.dim(2), heads);
  const int64_t head_dim = x.dim(2) / heads;
  FP8KIT_CHECK(table.rank() == 3 && table.dim(1) == head_dim / 2 && table.dim(2) == 2,
               "{}: the table must be [positions, {}, 2] (rope_table for head_dim {}), got [{}]", op, head_dim / 2,
               head_dim, fmt::join(table.shape(), ", "));
  check_tensor(c, table, table.shape(), DType::F32, op, "table");
  FP8KIT_CHECK(start >= 0 && start + x.dim(1) <= table.dim(0),
               "{}: positions [{}, {}) are outside the table's {}: make the table for the longest sequence", op, start,
               start + x.dim(1), table.dim(0));
  return {x.dim(0), x.dim(1), heads, head_dim};
}

// Calls f(In{}, Out{}) with the element types of dtypes `in` and `out` (float for F32, uint16_t for
// Bf16's bits).
template <typename F>
void with_element_types(DType in, DType out, F&& f) {
  const auto with_out = [&](auto x) {
    if (out == DType::Bf16) {
      f(x, uint16_t{});
    } else {
      f(x, float{});
    }
  };
  if (in == DType::Bf16) {
    with_out(uint16_t{});
  } else {
    with_out(float{});
  }
}

void rotate(Context& c, const Tensor& table, const Tensor& x, int64_t heads, int64_t start, float sign, bool bf16,
            DType dtype, Tensor& out, std::string_view op, std::string_view what) {
  const RopeShape s = check_rope(c, table, x, heads, start, op, what);
  FP8KIT_CHECK(dtype == DType::F32 || dtype == DType::Bf16, "{}: out must be f32 or bf16, got {}", op, name(dtype));
  prepare_output(c, out, x.shape(), dtype, op, what == "x" ? "out" : "dx");
  with_element_types(x.dtype(), dtype, [&](auto in_element, auto out_element) {
    using In = decltype(in_element);
    using Out = decltype(out_element);
    if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
      cuda::rope_rotate(cuda::RopeShape{s.batch, s.seq, s.heads, s.head_dim}, start, table.device_data<float>(),
                        x.device_data<In>(), sign, bf16, out.device_data<Out>(), stream(c));
#endif
      return;
    }
    cpu::rope_rotate(s.batch, s.seq, s.heads, s.head_dim, start, table.data<float>(), x.data<In>(), sign, bf16,
                     out.data<Out>());
  });
}

}  // namespace

void rope_table(Context& c, int64_t positions, int64_t head_dim, double theta, Tensor& table) {
  constexpr std::string_view op = "rope_table";
  FP8KIT_CHECK(positions >= 1, "{}: positions must be >= 1, got {}", op, positions);
  FP8KIT_CHECK(head_dim >= 2 && head_dim % 2 == 0, "{}: head_dim must be even and >= 2, got {}", op, head_dim);
  FP8KIT_CHECK(theta > 0, "{}: theta (rope_theta) must be > 0, got {}", op, theta);
  std::vector<float> host(static_cast<size_t>(positions * head_dim));
  cpu::rope_table(positions, head_dim, theta, host.data());
  prepare_output(c, table, {positions, head_dim / 2, 2}, DType::F32, op, "table");
  table.copy_from_host(host.data());
}

void rope_forward(Context& c, const Tensor& table, const Tensor& x, int64_t heads, int64_t start, bool bf16,
                  Tensor& out, DType dtype) {
  rotate(c, table, x, heads, start, 1.0f, bf16, dtype, out, "rope_forward", "x");
}

void rope_backward(Context& c, const Tensor& table, const Tensor& dout, int64_t heads, int64_t start, Tensor& dx) {
  rotate(c, table, dout, heads, start, -1.0f, false, DType::F32, dx, "rope_backward", "dout");
}

}  // namespace fp8kit::ops
