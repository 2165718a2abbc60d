// The ops' argument checks (tensor_checks.h).
#include "ops/tensor_checks.h"

#include "base/error.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <vector>

namespace fp8kit::ops {

void check_tensor(const Context& c, const Tensor& t, std::span<const int64_t> shape, DType dtype, std::string_view op,
                  std::string_view what) {
  FP8KIT_CHECK(t.device() == c.device(), "{}: {} is on the {}, the op runs on the {}: copy it there (Tensor::to)", op,
               what, name(t.device()), name(c.device()));
  FP8KIT_CHECK(t.dtype() == dtype, "{}: {} must be {}, got {}", op, what, name(dtype), name(t.dtype()));
  FP8KIT_CHECK(std::equal(shape.begin(), shape.end(), t.shape().begin(), t.shape().end()),
               "{}: {} must be [{}], got [{}]", op, what, fmt::join(shape, ", "), fmt::join(t.shape(), ", "));
}

void check_tensor(const Context& c, const Tensor& t, std::initializer_list<int64_t> shape, DType dtype,
                  std::string_view op, std::string_view what) {
  check_tensor(c, t, std::span<const int64_t>(shape.begin(), shape.size()), dtype, op, what);
}

void prepare_output(const Context& c, Tensor& t, std::span<const int64_t> shape, DType dtype, std::string_view op,
                    std::string_view what) {
  if (t.numel() == 0 && (t.device() != c.device() || t.dtype() != dtype)) {
    t = Tensor(std::vector<int64_t>(shape.begin(), shape.end()), dtype, c.device());
    return;
  }
  FP8KIT_CHECK(t.device() == c.device() && t.dtype() == dtype, "{}: {} must be {} on the {}, got {} on the {}", op,
               what, name(dtype), name(c.device()), name(t.dtype()), name(t.device()));
  t.resize(shape);
}

void prepare_output(const Context& c, Tensor& t, std::initializer_list<int64_t> shape, DType dtype,
                    std::string_view op, std::string_view what) {
  prepare_output(c, t, std::span<const int64_t>(shape.begin(), shape.size()), dtype, op, what);
}

void check_dropout(const DropoutSpec& spec, std::string_view op) {
  FP8KIT_CHECK(!spec.active || (spec.rate >= 0.0f && spec.rate < 1.0f),
               "{}: the dropout rate of site {} must be in [0, 1), got {}", op, spec.site, spec.rate);
}

void sized(Tensor& t, std::initializer_list<int64_t> shape, DType dtype, Device device) {
  if (t.dtype() != dtype || t.device() != device) t = Tensor(std::vector<int64_t>(shape), dtype, device);
  t.resize(shape);
}

Rows check_rows(const Context& c, const Tensor& x, std::string_view op) {
  FP8KIT_CHECK(x.rank() == 2,
               "{}: x must be [rows, dim], got [{}]: view a [batch, seq, dim] tensor as [batch * seq, dim]", op,
               fmt::join(x.shape(), ", "));
  check_tensor(c, x, x.shape(), DType::F32, op, "x");
  FP8KIT_CHECK(x.dim(1) >= 1, "{}: x must have at least one column (dim), got [{}]", op, fmt::join(x.shape(), ", "));
  return {x.dim(0), x.dim(1)};
}

}  // namespace fp8kit::ops
