// The MSE loss: argument checks, the CPU core, and the dispatch to the GPU kernels (ops/cuda/mse.h).
#include "ops/mse.h"

#include "base/error.h"
#include "ops/tensor_checks.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <vector>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/mse.h"
#endif

namespace fp8kit::ops {

void mse_loss(Context& c, const Tensor& y, const Tensor& target, Tensor& loss, Tensor& dy) {
  constexpr std::string_view op = "mse_loss";
  FP8KIT_CHECK(y.numel() >= 1, "{}: y has no elements", op);
  check_tensor(c, y, y.shape(), DType::F32, op, "y");
  FP8KIT_CHECK(target.shape() == y.shape(), "{}: the target [{}] must have y's shape [{}]", op,
               fmt::join(target.shape(), ", "), fmt::join(y.shape(), ", "));
  check_tensor(c, target, y.shape(), DType::F32, op, "the target");
  FP8KIT_CHECK(!loss.shares_storage(y) && !loss.shares_storage(target), "{}: loss must be a tensor of its own", op);
  prepare_output(c, loss, {1}, DType::F32, op, "loss");
  if (&dy != &y) prepare_output(c, dy, y.shape(), DType::F32, op, "dy");
  const int64_t n = y.numel();
  const float factor = 2.0f / static_cast<float>(n);
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    const int64_t pieces = (n + kMsePiece - 1) / kMsePiece;
    cuda::mse_loss(y.device_data<float>(), target.device_data<float>(), n, kMsePiece, factor,
                   static_cast<float*>(c.scratch(pieces * sizeof(float))), loss.device_data<float>(),
                   dy.device_data<float>(), stream(c));
#endif
    return;
  }
  const float* yp = y.data<float>();
  const float* tp = target.data<float>();
  float* dp = dy.data<float>();
  const int64_t pieces = (n + kMsePiece - 1) / kMsePiece;
  std::vector<float> sums(static_cast<size_t>(pieces));
#pragma omp parallel for schedule(static) if (n >= 65536)
  for (int64_t p = 0; p < pieces; ++p) {
    float s = 0.0f;
    for (int64_t i = p * kMsePiece; i < std::min(n, (p + 1) * kMsePiece); ++i) {
      const float d = yp[i] - tp[i];
      s = std::fma(d, d, s);
      dp[i] = d * factor;
    }
    sums[static_cast<size_t>(p)] = s;
  }
  float total = 0.0f;
  for (float s : sums) total += s;
  loss.data<float>()[0] = total / static_cast<float>(n);
}

}  // namespace fp8kit::ops
