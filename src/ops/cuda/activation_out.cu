// What a row kernel's launcher queues for an ActivationOut of no rows: per tensor, quantize's scale_inv
// (a recorded amax stays the 0 the launcher wrote); nothing else has elements.
#include "ops/cuda/activation_out.h"

#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

__global__ void scale_inv_kernel(const float* scale, float* scale_inv) { *scale_inv = __fdiv_rn(1.0f, *scale); }

}  // namespace

void finish_empty_activation(const ActivationOutArgs& out, cudaStream_t stream) {
  if (out.kind != OutKind::PerTensor) return;
  scale_inv_kernel<<<1, 1, 0, stream>>>(out.scale, out.scale_inv);
  check_launch("finish_empty_activation");
}

}  // namespace fp8kit::cuda
