// Argument checks shared by the ops on Tensors: one line that names the op, the argument and what
// to fix (shape, dtype, device).
#pragma once

#include "ops/context.h"
#include "ops/dropout.h"
#include "tensor/tensor.h"

#include <initializer_list>
#include <string_view>

namespace fp8kit::ops {

// t must have exactly `shape` and `dtype` and live on the context's device.
void check_tensor(const Context& c, const Tensor& t, std::initializer_list<int64_t> shape, DType dtype,
                  std::string_view op, std::string_view what);
// The same with the shape as a span.
void check_tensor(const Context& c, const Tensor& t, std::span<const int64_t> shape, DType dtype, std::string_view op,
                  std::string_view what);
// An output: resized to `shape` when it has the dtype and device (a default Tensor() becomes
// one of them on a CPU context), else the error says what it has.
void prepare_output(const Context& c, Tensor& t, std::initializer_list<int64_t> shape, DType dtype,
                    std::string_view op, std::string_view what);
// The same with the shape as a span (e.g. an input's shape).
void prepare_output(const Context& c, Tensor& t, std::span<const int64_t> shape, DType dtype, std::string_view op,
                    std::string_view what);

// A norm's input: x must be [rows, dim] f32 on the context's device with dim >= 1 (the error says to
// view a [batch, seq, dim] tensor as [batch * seq, dim]).
struct Rows {
  int64_t rows, dim;
};
Rows check_rows(const Context& c, const Tensor& x, std::string_view op);

// An active dropout site's rate must be in [0, 1).
void check_dropout(const DropoutSpec& spec, std::string_view op);

// An op's own buffer (scratch kept between calls): t becomes a [shape] tensor of `dtype` on `device`,
// reusing its storage when it already is one of them with room enough (steps then allocate nothing).
void sized(Tensor& t, std::initializer_list<int64_t> shape, DType dtype, Device device);

}  // namespace fp8kit::ops
